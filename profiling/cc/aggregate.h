#ifndef PROFILING_CC_AGGREGATE_H_
#define PROFILING_CC_AGGREGATE_H_

// One cost per instruction from the costs of several groups (runs, or hosts).
//
// XLA's converter pools every instance of every host it is given and takes the mean (kMean here).
// Auto PGLE instead converts each profiling run on its own and then, per instruction, takes a
// percentile of the per-run means: sorted ascending, the value at index int(p / 100 * (n - 1))
// (xla/python/aggregate_profile). kPercentile reproduces that rule; kMedian (the average of the two
// middle values for an even count), kMin and kMax are the plain statistics.

#include <cstdint>
#include <string>
#include <vector>

#include "profiling/cc/xspace_events.h"

namespace pgle {

enum class Aggregation { kMean, kPercentile, kMedian, kMin, kMax };

struct AggregationSpec {
  Aggregation kind = Aggregation::kMean;
  double percentile = 0;  // Used by kPercentile only; in [0, 100].
};

struct ProfileEntry {
  std::string name;
  double cost_us = 0;
  int64_t samples = 0;  // Instances measured, over all groups.
  int64_t groups = 0;   // Groups in which the instruction ran at least once.
};

// XLA's percentile rule over `values` (which it sorts). Throws InvalidArgumentError for an empty
// list or a percentile outside [0, 100].
double XlaPercentile(std::vector<double> values, double percentile);

double Median(std::vector<double> values);

// Throws InvalidArgumentError if `spec` is invalid (percentile outside [0, 100], or not finite).
void ValidateAggregation(const AggregationSpec& spec);

// One entry per instruction name over `groups`, sorted by name. An instruction missing from some
// groups is aggregated over the groups that have it, as in XLA.
std::vector<ProfileEntry> Aggregate(const std::vector<HostCosts>& groups,
                                    const AggregationSpec& spec);

}  // namespace pgle

#endif  // PROFILING_CC_AGGREGATE_H_
