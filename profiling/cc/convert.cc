#include "profiling/cc/convert.h"

#include <sstream>
#include <utility>

#include "profiling/cc/errors.h"
#include "profiling/cc/module_fingerprints.h"
#include "profiling/cc/trace_files.h"

namespace pgle {
namespace {

// One host's trace after reading, before names are resolved.
struct HostTrace {
  std::string label;  // File path or "xspace #i", for messages.
  size_t group;
  HostSpans spans;
};

std::string Join(const std::vector<std::string>& items) {
  std::ostringstream out;
  for (size_t i = 0; i < items.size(); ++i) out << (i ? ", " : "") << items[i];
  return items.empty() ? "none" : out.str();
}

// Why `host` gave no cost, and what to do about it.
std::string ExplainNoEvents(const HostTrace& host, PlaneSelection selection) {
  std::ostringstream out;
  out << host.label << " has no HLO instruction events";
  if (host.spans.planes_read().empty()) {
    out << ": it has no device plane (its planes: " << Join(host.spans.planes_seen())
        << "). XLA's converter reads only /device:GPU:*, else /device:TPU:*, else /device:CUSTOM:* "
           "planes.";
    if (selection == PlaneSelection::kDevice) {
      out << " A trace taken on CPU holds its ops on /host:CPU: convert with include_host=True "
             "(CLI: --include_host) to read it, or trace on a GPU.";
    }
  } else {
    out << " in its planes " << Join(host.spans.planes_read())
        << " (an event counts when it has both `hlo_op` and `hlo_module` stats). Trace steps that "
           "run a "
           "jitted function after it has compiled, and stop the trace after they finished "
           "(jax.block_until_ready).";
  }
  return out.str();
}

ConvertResult Finish(std::vector<HostTrace> hosts, size_t num_groups,
                     const FingerprintMap& fingerprints, const ConvertOptions& options) {
  std::vector<HostCosts> groups(num_groups);
  std::vector<std::vector<std::string>> why_empty(num_groups);
  for (HostTrace& host : hosts) {
    HostCosts costs = host.spans.Resolve(fingerprints);
    if (costs.empty()) why_empty[host.group].push_back(ExplainNoEvents(host, options.planes));
    HostCosts& group = groups[host.group];
    for (auto& [name, cost] : costs) {
      CostSum& sum = group[name];
      sum.sum_us += cost.sum_us;
      sum.count += cost.count;
    }
    host.spans = HostSpans();  // Free the spans as soon as they are counted.
  }
  // A run without any event would silently shift every percentile: an error. A single host
  // without events (a coordinator process) is normal, so per-host groups that are empty are left
  // out, unless all are.
  std::vector<HostCosts> kept;
  std::vector<std::string> reasons;
  for (size_t g = 0; g < num_groups; ++g) {
    if (groups[g].empty()) {
      reasons.insert(reasons.end(), why_empty[g].begin(), why_empty[g].end());
      if (!options.group_by_host) break;
    } else {
      kept.push_back(std::move(groups[g]));
    }
  }
  if (kept.empty() || (!options.group_by_host && kept.size() < num_groups)) {
    std::ostringstream out;
    out << "no instruction costs in " << (kept.empty() ? "the trace" : "one of the runs") << ". ";
    for (size_t i = 0; i < reasons.size(); ++i) out << (i ? " " : "") << reasons[i];
    out << " No profile was written (XLA would silently use an empty one).";
    throw NoDeviceEventsError(out.str());
  }
  ConvertResult result;
  result.num_groups = kept.size();
  result.entries = Aggregate(kept, options.aggregation);
  return result;
}

}  // namespace

ConvertResult ConvertRunDirs(const std::vector<std::string>& run_dirs,
                             const ConvertOptions& options) {
  ValidateAggregation(options.aggregation);
  if (run_dirs.empty()) {
    throw InvalidArgumentError(
        "no run directory given: pass <logdir>/plugins/profile/<run>/ of each run");
  }
  std::vector<HostTrace> hosts;
  std::vector<std::string> files_read;
  FingerprintMap fingerprints;
  size_t num_groups = 0;
  for (const std::string& run_dir : run_dirs) {
    for (const std::string& path : ListTraceFiles(run_dir)) {
      // Each trace is parsed, reduced to its spans and freed before the next: peak memory is one
      // trace, not all of them.
      const LazyXSpace space = ReadXSpaceFile(path);
      CollectFingerprints(space.headers(), &fingerprints);
      const size_t group = options.group_by_host ? num_groups++ : num_groups;
      hosts.push_back({path, group, ExtractSpans(space, options.planes)});
      files_read.push_back(path);
    }
    if (!options.group_by_host) ++num_groups;
  }
  ConvertResult result = Finish(std::move(hosts), num_groups, fingerprints, options);
  result.trace_files = std::move(files_read);
  return result;
}

ConvertResult ConvertXSpaces(const std::vector<std::string>& xspaces,
                             const ConvertOptions& options) {
  ValidateAggregation(options.aggregation);
  if (xspaces.empty()) throw InvalidArgumentError("no serialized XSpace given");
  std::vector<HostTrace> hosts;
  FingerprintMap fingerprints;
  for (size_t i = 0; i < xspaces.size(); ++i) {
    const std::string label = "xspace #" + std::to_string(i);
    const LazyXSpace space = ParseXSpace(xspaces[i], label);
    CollectFingerprints(space.headers(), &fingerprints);
    hosts.push_back({label, i, ExtractSpans(space, options.planes)});
  }
  return Finish(std::move(hosts), xspaces.size(), fingerprints, options);
}

namespace {

ProfileResult ToProfile(ConvertResult conversion, ProfileFormat format, bool keep_entries) {
  ProfileResult result;
  result.num_costs = conversion.entries.size();
  std::vector<InstructionCost> costs;
  costs.reserve(conversion.entries.size());
  for (ProfileEntry& entry : conversion.entries) {
    result.num_samples += entry.samples;
    costs.push_back({keep_entries ? entry.name : std::move(entry.name), entry.cost_us});
  }
  result.profile = SerializeProfile(std::move(costs), format);
  if (!keep_entries) conversion.entries.clear();
  result.conversion = std::move(conversion);
  return result;
}

}  // namespace

ProfileResult ConvertRunDirsToProfile(const std::vector<std::string>& run_dirs,
                                      const ConvertOptions& options, ProfileFormat format,
                                      bool keep_entries) {
  return ToProfile(ConvertRunDirs(run_dirs, options), format, keep_entries);
}

ProfileResult ConvertXSpacesToProfile(const std::vector<std::string>& xspaces,
                                      const ConvertOptions& options, ProfileFormat format,
                                      bool keep_entries) {
  return ToProfile(ConvertXSpaces(xspaces, options), format, keep_entries);
}

}  // namespace pgle
