#ifndef PROFILING_CC_MODULE_FINGERPRINTS_H_
#define PROFILING_CC_MODULE_FINGERPRINTS_H_

// Which compiled module an HLO event belongs to, as XLA's GPU scheduler will recognise it.
//
// Profile entries are named `<fingerprint>::<instruction>`; the scheduler keeps an entry only if
// the fingerprint equals the one of the module it is compiling (or the name has no `::`). The
// fingerprint is the frontend attribute `fingerprint_before_lhs` that the scheduler put on the
// entry computation's root instruction; the trace carries the compiled HloProtos in the
// `/host:metadata` plane, one per event metadata, as a bytes stat (named "Hlo Proto").

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "profiling/cc/xplane.pb.h"

namespace pgle {

// "<module name>(<id>)" -> fingerprint. Events name their module by the `hlo_module` stat and the
// `program_id` stat, which is the module's id.
using FingerprintMap = std::unordered_map<std::string, std::string>;

// The key events use for a module: "<name>(<program id>)", XLA's HloModuleNameWithProgramId.
std::string ModuleKey(std::string_view module_name, int64_t program_id);

// The `fingerprint_before_lhs` of a serialized HloProto, if the bytes parse and the entry
// computation's root instruction has it. Modules compiled without the latency-hiding scheduler
// (and every module on CPU) have none.
std::optional<std::string> ModuleFingerprint(std::string_view hlo_proto_bytes);

// Adds the fingerprints of every HloProto in `space`'s "/host:metadata" plane to `fingerprints`.
// Like XLA, every bytes-valued stat of every event metadata is tried as an HloProto; later
// protos with the same key replace earlier ones.
void CollectFingerprints(const tensorflow::profiler::XSpace& space, FingerprintMap* fingerprints);

}  // namespace pgle

#endif  // PROFILING_CC_MODULE_FINGERPRINTS_H_
