#include "profiling/cc/module_fingerprints.h"

#include <climits>

#include "google/protobuf/io/coded_stream.h"
#include "profiling/cc/hlo_subset.pb.h"

namespace pgle {
namespace {

constexpr char kMetadataPlaneName[] = "/host:metadata";
constexpr char kFingerprintAttribute[] = "fingerprint_before_lhs";

}  // namespace

std::string ModuleKey(std::string_view module_name, int64_t program_id) {
  return std::string(module_name) + "(" + std::to_string(program_id) + ")";
}

namespace {

// XLA parses these with no size or depth limit: large modules nest deeply.
bool ParseHloProto(std::string_view bytes, pgle::hlo::HloProto* proto) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) return false;
  google::protobuf::io::CodedInputStream input(reinterpret_cast<const uint8_t*>(bytes.data()),
                                               static_cast<int>(bytes.size()));
  input.SetRecursionLimit(INT_MAX);
  return proto->ParseFromCodedStream(&input);
}

std::optional<std::string> EntryRootFingerprint(const pgle::hlo::HloModuleProto& module) {
  // XLA finds the entry by id and the root by the computation's root_id. A module it could not
  // rebuild (a dangling id) has no fingerprint there, and none here.
  for (const auto& computation : module.computations()) {
    if (computation.id() != module.entry_computation_id()) continue;
    for (const auto& instruction : computation.instructions()) {
      if (instruction.id() != computation.root_id()) continue;
      const auto& attributes = instruction.frontend_attributes().map();
      auto it = attributes.find(kFingerprintAttribute);
      if (it == attributes.end()) return std::nullopt;
      return it->second;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> ModuleFingerprint(std::string_view hlo_proto_bytes) {
  pgle::hlo::HloProto proto;
  if (!ParseHloProto(hlo_proto_bytes, &proto)) return std::nullopt;
  return EntryRootFingerprint(proto.hlo_module());
}

void CollectFingerprints(const tensorflow::profiler::XSpace& space, FingerprintMap* fingerprints) {
  for (const auto& plane : space.planes()) {
    if (plane.name() != kMetadataPlaneName) continue;
    for (const auto& [id, metadata] : plane.event_metadata()) {
      for (const auto& stat : metadata.stats()) {
        // Like XLA, every bytes stat is tried as an HloProto, whatever its name.
        if (stat.value_case() != tensorflow::profiler::XStat::kBytesValue) continue;
        pgle::hlo::HloProto proto;
        if (!ParseHloProto(stat.bytes_value(), &proto)) continue;
        std::optional<std::string> fingerprint = EntryRootFingerprint(proto.hlo_module());
        if (!fingerprint) continue;
        // Keyed by the proto's own name and id, not by the metadata's display name, as in XLA.
        (*fingerprints)[ModuleKey(proto.hlo_module().name(), proto.hlo_module().id())] =
            *fingerprint;
      }
    }
    return;  // XLA reads only the first plane with this name.
  }
}

}  // namespace pgle
