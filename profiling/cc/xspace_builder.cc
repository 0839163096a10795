#include "profiling/cc/xspace_builder.h"

namespace pgle::testing {

using ::tensorflow::profiler::XEvent;
using ::tensorflow::profiler::XLine;
using ::tensorflow::profiler::XStat;

int64_t PlaneBuilder::StatId(const std::string& name) {
  for (const auto& [id, metadata] : plane_->stat_metadata()) {
    if (metadata.name() == name) return id;
  }
  const int64_t id = static_cast<int64_t>(plane_->stat_metadata_size()) + 1;
  auto& metadata = (*plane_->mutable_stat_metadata())[id];
  metadata.set_id(id);
  metadata.set_name(name);
  return id;
}

int64_t PlaneBuilder::EventMetadataId(const std::string& name) {
  for (const auto& [id, metadata] : plane_->event_metadata()) {
    if (metadata.name() == name) return id;
  }
  const int64_t id = static_cast<int64_t>(plane_->event_metadata_size()) + 1;
  auto& metadata = (*plane_->mutable_event_metadata())[id];
  metadata.set_id(id);
  metadata.set_name(name);
  return id;
}

void PlaneBuilder::SetStat(XStat* stat, const std::string& name, const StatValue& value) {
  stat->set_metadata_id(StatId(name));
  if (auto* s = std::get_if<std::string>(&value)) stat->set_str_value(*s);
  if (auto* r = std::get_if<Ref>(&value))
    stat->set_ref_value(static_cast<uint64_t>(StatId(r->name)));
  if (auto* i = std::get_if<int64_t>(&value)) stat->set_int64_value(*i);
  if (auto* u = std::get_if<uint64_t>(&value)) stat->set_uint64_value(*u);
}

XLine* PlaneBuilder::AddLine(const std::string& name, int64_t timestamp_ns,
                             const std::string& display_name) {
  XLine* line = plane_->add_lines();
  line->set_id(plane_->lines_size());
  line->set_name(name);
  line->set_display_name(display_name);
  line->set_timestamp_ns(timestamp_ns);
  return line;
}

XEvent* PlaneBuilder::AddEvent(XLine* line, const std::string& name, int64_t offset_ps,
                               int64_t duration_ps, Stats stats) {
  XEvent* event = line->add_events();
  event->set_metadata_id(EventMetadataId(name));
  event->set_offset_ps(offset_ps);
  event->set_duration_ps(duration_ps);
  for (const auto& [stat_name, value] : stats) SetStat(event->add_stats(), stat_name, value);
  return event;
}

void PlaneBuilder::AddMetadataStats(const std::string& name, Stats stats) {
  auto& metadata = (*plane_->mutable_event_metadata())[EventMetadataId(name)];
  for (const auto& [stat_name, value] : stats) SetStat(metadata.add_stats(), stat_name, value);
}

void PlaneBuilder::AddMetadataBytes(const std::string& name, const std::string& stat_name,
                                    const std::string& bytes) {
  auto& metadata = (*plane_->mutable_event_metadata())[EventMetadataId(name)];
  XStat* stat = metadata.add_stats();
  stat->set_metadata_id(StatId(stat_name));
  stat->set_bytes_value(bytes);
}

std::string HloProtoBytes(const std::string& name, int64_t id, const std::string& fingerprint) {
  pgle::hlo::HloProto proto;
  auto* module = proto.mutable_hlo_module();
  module->set_name(name);
  module->set_id(id);
  module->set_entry_computation_id(7);
  // A called computation first, whose root has a decoy attribute: only the entry's root counts.
  auto* called = module->add_computations();
  called->set_id(3);
  called->set_root_id(30);
  auto* decoy = called->add_instructions();
  decoy->set_id(30);
  (*decoy->mutable_frontend_attributes()->mutable_map())["fingerprint_before_lhs"] = "decoy";
  auto* entry = module->add_computations();
  entry->set_id(7);
  entry->set_root_id(71);
  entry->add_instructions()->set_id(70);
  auto* root = entry->add_instructions();
  root->set_id(71);
  root->set_name("tuple.71");
  if (!fingerprint.empty()) {
    (*root->mutable_frontend_attributes()->mutable_map())["fingerprint_before_lhs"] = fingerprint;
  }
  return proto.SerializeAsString();
}

}  // namespace pgle::testing
