#ifndef PROFILING_CC_CONVERT_H_
#define PROFILING_CC_CONVERT_H_

// Trace(s) -> one profile: the whole PGLE post-processing step.
//
// With the default options and one run directory this is XLA's converter (what
// jax.experimental.profiler.get_profiled_instructions_proto returns), with the output sorted by
// name. Deliberate differences, each for the user's sake:
//  - Fingerprints are collected from every trace before any name is resolved; XLA resolves host by
//    host in directory-listing order, so a host whose metadata plane lacks a module can come out
//    with or without the prefix depending on the file system.
//  - Nothing found is an error (NoDeviceEventsError) rather than an empty profile.

#include <string>
#include <vector>

#include "profiling/cc/aggregate.h"
#include "profiling/cc/xspace_events.h"

namespace pgle {

struct ConvertOptions {
  PlaneSelection planes = PlaneSelection::kDevice;
  AggregationSpec aggregation;  // kMean: XLA's pooled mean over everything given.
  // A group is what a percentile/median/min/max is taken over: a run directory (the default, like
  // auto PGLE's profiling runs) or, with this set, each host's trace file on its own.
  bool group_by_host = false;
};

struct ConvertResult {
  std::vector<ProfileEntry> entries;  // Sorted by name; never empty.
  std::vector<std::string> trace_files;  // What was read, in order.
  size_t num_groups = 0;
};

// Converts the `*xplane.pb` files directly inside each of `run_dirs`. Throws TraceNotFoundError,
// TraceFormatError, NoDeviceEventsError or InvalidArgumentError (see errors.h).
ConvertResult ConvertRunDirs(const std::vector<std::string>& run_dirs, const ConvertOptions& options);

// Converts serialized XSpaces (what a ProfilerSession returns), each one run of one host; each is
// its own group. Throws like ConvertRunDirs.
ConvertResult ConvertXSpaces(const std::vector<std::string>& xspaces, const ConvertOptions& options);

}  // namespace pgle

#endif  // PROFILING_CC_CONVERT_H_
