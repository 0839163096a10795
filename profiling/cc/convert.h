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
#include "profiling/cc/profile.h"
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
  std::vector<ProfileEntry> entries;     // Sorted by name; never empty.
  std::vector<std::string> trace_files;  // What was read, in order.
  size_t num_groups = 0;
};

// Converts the `*xplane.pb` files directly inside each of `run_dirs`. Throws TraceNotFoundError,
// TraceFormatError, NoDeviceEventsError or InvalidArgumentError (see errors.h).
ConvertResult ConvertRunDirs(const std::vector<std::string>& run_dirs,
                             const ConvertOptions& options);

// Converts serialized XSpaces (what a ProfilerSession returns), each one run of one host; each is
// its own group. Throws like ConvertRunDirs.
ConvertResult ConvertXSpaces(const std::vector<std::string>& xspaces,
                             const ConvertOptions& options);

// A conversion's profile, serialized, and what a caller reports about it.
struct ProfileResult {
  std::string profile;  // A ProfiledInstructionsProto in the requested format.
  size_t num_costs = 0;
  int64_t num_samples = 0;   // Executions measured, over all groups.
  ConvertResult conversion;  // Entries only when asked for; trace files and groups always.
};

// ConvertRunDirs / ConvertXSpaces and SerializeProfile in one call, so that a profile crosses into
// Python once, as bytes. `keep_entries` also returns the entries (for listings). Throws like them.
ProfileResult ConvertRunDirsToProfile(const std::vector<std::string>& run_dirs,
                                      const ConvertOptions& options, ProfileFormat format,
                                      bool keep_entries);
ProfileResult ConvertXSpacesToProfile(const std::vector<std::string>& xspaces,
                                      const ConvertOptions& options, ProfileFormat format,
                                      bool keep_entries);

}  // namespace pgle

#endif  // PROFILING_CC_CONVERT_H_
