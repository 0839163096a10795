#ifndef PROFILING_CC_XSPACE_EVENTS_H_
#define PROFILING_CC_XSPACE_EVENTS_H_

// From one host's trace (an XSpace) to the duration of every executed HLO instruction instance,
// following XLA's converter (xla/python/xplane_to_profile_instructions) rule for rule:
//  - planes: those named "/device:GPU:*", else "/device:TPU:*", else "/device:CUSTOM:*";
//  - lines: all but the one displayed as "Async XLA Ops" (it repeats the ops of the other lines);
//  - events: those with both an `hlo_op` and an `hlo_module` stat, on the event or on its metadata
//    (event stats win), values as strings or as `ref_value`s naming a stat metadata;
//  - instances: fragments of one execution share a `scope_range_id` (a kernel split in several
//    launches); without it, events with the same start time are one instance. An instance spans
//    [min start, max end] of its fragments;
//  - names: `<fingerprint>::<hlo_op>` when the module "<hlo_module>(<program_id>)" has one.
// Beyond XLA, PlaneSelection::kDeviceElseHost reads the "/host:CPU" plane of a trace that has no
// device plane: on CPU, XLA's thunks record the same stats on the host threads' lines.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "profiling/cc/module_fingerprints.h"
#include "profiling/cc/xspace_wire.h"

namespace pgle {

enum class PlaneSelection {
  kDevice,          // Exactly XLA's choice.
  kDeviceElseHost,  // XLA's choice; "/host:CPU" when the trace has no device plane at all.
};

// Sum and number of instance durations of one instruction on one host.
struct CostSum {
  double sum_us = 0;
  int64_t count = 0;
};

// Instruction name (fingerprint-prefixed where known) -> its instances on one host.
using HostCosts = std::unordered_map<std::string, CostSum>;

// The instances of one host, keyed by module and instruction as the trace names them. The names
// are resolved only once every host's fingerprints are known (see Resolve), so that one trace is
// read once and dropped before the next is read.
class HostSpans {
 public:
  HostSpans();
  ~HostSpans();
  HostSpans(HostSpans&&) noexcept;
  HostSpans& operator=(HostSpans&&) noexcept;

  // Number of instances (after merging fragments).
  size_t size() const;
  // Names of the planes the events were read from, for messages.
  const std::vector<std::string>& planes_read() const;
  // Names of all planes of the trace, for messages when nothing was found.
  const std::vector<std::string>& planes_seen() const;

  // Durations per final instruction name. Instances that end up with the same name and instance id
  // (two modules with one fingerprint) merge, as they do in XLA.
  HostCosts Resolve(const FingerprintMap& fingerprints) const;

 private:
  friend HostSpans ExtractSpans(const LazyXSpace&, PlaneSelection);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads every line of `space` once (checking those it does not use). Throws TraceFormatError for a
// trace that protobuf would not parse either.
HostSpans ExtractSpans(const LazyXSpace& space, PlaneSelection selection);

}  // namespace pgle

#endif  // PROFILING_CC_XSPACE_EVENTS_H_
