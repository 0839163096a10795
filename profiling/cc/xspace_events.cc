#include "profiling/cc/xspace_events.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>

namespace pgle {
namespace {

using ::tensorflow::profiler::XPlane;
using ::tensorflow::profiler::XSpace;
using ::tensorflow::profiler::XStat;

constexpr std::string_view kDevicePlanePrefixes[] = {"/device:GPU:", "/device:TPU:", "/device:CUSTOM:"};
constexpr std::string_view kHostPlaneName = "/host:CPU";
constexpr std::string_view kAsyncOpsLineName = "Async XLA Ops";

// The stats the converter looks at, by name in the plane's stat metadata.
enum class StatKind { kOther, kHloOp, kHloModule, kProgramId, kScopeRangeId };

StatKind KindOfStatName(std::string_view name) {
  if (name == "hlo_op") return StatKind::kHloOp;
  if (name == "hlo_module") return StatKind::kHloModule;
  if (name == "program_id") return StatKind::kProgramId;
  if (name == "scope_range_id") return StatKind::kScopeRangeId;
  return StatKind::kOther;
}

// Copies each distinct string once; events refer to them by index. Traces repeat the same few
// thousand op names millions of times.
class StringPool {
 public:
  uint32_t Intern(std::string_view s) {
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    const std::string& stored = storage_.emplace_back(s);
    uint32_t id = static_cast<uint32_t>(storage_.size() - 1);
    ids_.emplace(stored, id);
    return id;
  }
  const std::string& Get(uint32_t id) const { return storage_[id]; }

 private:
  std::deque<std::string> storage_;  // A deque never moves its elements: ids_ views stay valid.
  std::unordered_map<std::string_view, uint32_t> ids_;
};

struct SpanKey {
  uint32_t module;  // Interned hlo_module value.
  bool has_program_id;
  int64_t program_id;
  uint32_t op;  // Interned hlo_op value.
  int64_t instance;  // scope_range_id, else start time in ps (one int64 space, as in XLA).
  bool operator==(const SpanKey& o) const {
    return std::tie(module, has_program_id, program_id, op, instance) ==
           std::tie(o.module, o.has_program_id, o.program_id, o.op, o.instance);
  }
};

struct SpanKeyHash {
  size_t operator()(const SpanKey& k) const {
    uint64_t h = k.module;
    for (uint64_t v : {static_cast<uint64_t>(k.has_program_id), static_cast<uint64_t>(k.program_id),
                       static_cast<uint64_t>(k.op), static_cast<uint64_t>(k.instance)}) {
      h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

struct Span {
  int64_t start_ps;
  int64_t end_ps;
  void Merge(const Span& other) {
    start_ps = std::min(start_ps, other.start_ps);
    end_ps = std::max(end_ps, other.end_ps);
  }
};

// A stat's value as text, as XLA's XStatVisitor::ToString gives it.
std::string StatText(const XStat& stat, const XPlane& plane) {
  switch (stat.value_case()) {
    case XStat::kStrValue:
      return stat.str_value();
    case XStat::kRefValue: {
      auto it = plane.stat_metadata().find(static_cast<int64_t>(stat.ref_value()));
      return it == plane.stat_metadata().end() ? std::string() : it->second.name();
    }
    case XStat::kInt64Value:
      return std::to_string(stat.int64_value());
    case XStat::kUint64Value:
      return std::to_string(stat.uint64_value());
    case XStat::kDoubleValue: {
      char buffer[32];  // absl::StrCat(double): six significant digits.
      snprintf(buffer, sizeof(buffer), "%g", stat.double_value());
      return buffer;
    }
    case XStat::kBytesValue:
      return "<opaque bytes>";
    case XStat::VALUE_NOT_SET:
      break;
  }
  return std::string();
}

int64_t StatInt(const XStat& stat) {
  switch (stat.value_case()) {
    case XStat::kInt64Value:
      return stat.int64_value();
    case XStat::kUint64Value:
      return static_cast<int64_t>(stat.uint64_value());
    default:
      return 0;
  }
}

// The planes XLA's converter reads from `space`, in trace order.
std::vector<const XPlane*> SelectPlanes(const XSpace& space, PlaneSelection selection) {
  std::vector<const XPlane*> planes;
  for (std::string_view prefix : kDevicePlanePrefixes) {
    for (const XPlane& plane : space.planes()) {
      if (std::string_view(plane.name()).substr(0, prefix.size()) == prefix) planes.push_back(&plane);
    }
    if (!planes.empty()) return planes;  // A trace never mixes GPU, TPU and custom devices.
  }
  if (selection == PlaneSelection::kDeviceElseHost) {
    for (const XPlane& plane : space.planes()) {
      if (plane.name() == kHostPlaneName) planes.push_back(&plane);
    }
  }
  return planes;
}

}  // namespace

struct HostSpans::Impl {
  StringPool strings;
  std::unordered_map<SpanKey, Span, SpanKeyHash> spans;
  std::vector<std::string> planes_read;
  std::vector<std::string> planes_seen;

  void AddPlane(const XPlane& plane);
};

void HostSpans::Impl::AddPlane(const XPlane& plane) {
  std::unordered_map<int64_t, StatKind> kinds;
  for (const auto& [id, metadata] : plane.stat_metadata()) {
    StatKind kind = KindOfStatName(metadata.name());
    if (kind != StatKind::kOther) kinds.emplace(id, kind);
  }
  if (kinds.empty()) return;  // No stat named hlo_op, hlo_module: no event can count.

  struct EventStats {
    const XStat* op = nullptr;
    const XStat* module = nullptr;
    const XStat* program_id = nullptr;
    const XStat* scope_range_id = nullptr;
  };
  auto collect = [&kinds](const auto& stats, EventStats* found) {
    for (const XStat& stat : stats) {
      if (stat.value_case() == XStat::VALUE_NOT_SET) continue;
      auto it = kinds.find(stat.metadata_id());
      if (it == kinds.end()) continue;
      switch (it->second) {
        case StatKind::kHloOp: found->op = &stat; break;
        case StatKind::kHloModule: found->module = &stat; break;
        case StatKind::kProgramId: found->program_id = &stat; break;
        case StatKind::kScopeRangeId: found->scope_range_id = &stat; break;
        case StatKind::kOther: break;
      }
    }
  };

  for (const auto& line : plane.lines()) {
    const std::string& shown = line.display_name().empty() ? line.name() : line.display_name();
    if (shown == kAsyncOpsLineName) continue;
    const int64_t line_start_ps = line.timestamp_ns() * 1000;
    for (const auto& event : line.events()) {
      EventStats found;
      auto metadata = plane.event_metadata().find(event.metadata_id());
      if (metadata != plane.event_metadata().end()) collect(metadata->second.stats(), &found);
      collect(event.stats(), &found);  // After the metadata's: the event's own stats win.
      if (found.op == nullptr || found.module == nullptr) continue;

      const Span span{line_start_ps + event.offset_ps(), line_start_ps + event.offset_ps() + event.duration_ps()};
      SpanKey key{strings.Intern(StatText(*found.module, plane)), found.program_id != nullptr,
                  found.program_id ? StatInt(*found.program_id) : 0, strings.Intern(StatText(*found.op, plane)),
                  found.scope_range_id ? StatInt(*found.scope_range_id) : span.start_ps};
      auto [it, inserted] = spans.try_emplace(key, span);
      if (!inserted) it->second.Merge(span);
    }
  }
}

HostSpans::HostSpans() : impl_(std::make_unique<Impl>()) {}
HostSpans::~HostSpans() = default;
HostSpans::HostSpans(HostSpans&&) noexcept = default;
HostSpans& HostSpans::operator=(HostSpans&&) noexcept = default;

size_t HostSpans::size() const { return impl_->spans.size(); }
const std::vector<std::string>& HostSpans::planes_read() const { return impl_->planes_read; }
const std::vector<std::string>& HostSpans::planes_seen() const { return impl_->planes_seen; }

HostCosts HostSpans::Resolve(const FingerprintMap& fingerprints) const {
  // The final name of each (module, program id, op), built once per distinct triple.
  StringPool final_names;
  std::unordered_map<SpanKey, uint32_t, SpanKeyHash> name_of;
  auto final_name = [&](SpanKey key) {
    key.instance = 0;
    auto it = name_of.find(key);
    if (it != name_of.end()) return it->second;
    const std::string& module = impl_->strings.Get(key.module);
    const std::string& op = impl_->strings.Get(key.op);
    // Without a program id XLA looks the bare module name up, which matches no "<name>(<id>)" key
    // unless the name itself looks like one; kept for exactness.
    auto fingerprint = fingerprints.find(key.has_program_id ? ModuleKey(module, key.program_id) : module);
    uint32_t id = final_names.Intern(fingerprint == fingerprints.end() ? op : fingerprint->second + "::" + op);
    name_of.emplace(key, id);
    return id;
  };

  // XLA merges by (final name, instance): different modules sharing one fingerprint merge too.
  std::unordered_map<SpanKey, Span, SpanKeyHash> merged;
  for (const auto& [key, span] : impl_->spans) {
    SpanKey final_key{final_name(key), false, 0, 0, key.instance};
    auto [it, inserted] = merged.try_emplace(final_key, span);
    if (!inserted) it->second.Merge(span);
  }
  HostCosts costs;
  for (const auto& [key, span] : merged) {
    CostSum& cost = costs[final_names.Get(key.module)];
    cost.sum_us += static_cast<double>(span.end_ps - span.start_ps) / 1e6;
    ++cost.count;
  }
  return costs;
}

HostSpans ExtractSpans(const XSpace& space, PlaneSelection selection) {
  HostSpans result;
  for (const XPlane& plane : space.planes()) result.impl_->planes_seen.push_back(plane.name());
  for (const XPlane* plane : SelectPlanes(space, selection)) {
    result.impl_->planes_read.push_back(plane->name());
    result.impl_->AddPlane(*plane);
  }
  return result;
}

}  // namespace pgle
