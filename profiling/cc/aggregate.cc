#include "profiling/cc/aggregate.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "profiling/cc/errors.h"

namespace pgle {

void ValidateAggregation(const AggregationSpec& spec) {
  if (spec.kind != Aggregation::kPercentile) return;
  if (!std::isfinite(spec.percentile) || spec.percentile < 0 || spec.percentile > 100) {
    // XLA returns an empty profile here, which XLA's scheduler then uses silently.
    throw InvalidArgumentError("percentile must be in [0, 100], got " +
                               std::to_string(spec.percentile) +
                               " (90 is auto PGLE's default; 50 is close to the median)");
  }
}

double XlaPercentile(std::vector<double> values, double percentile) {
  ValidateAggregation({Aggregation::kPercentile, percentile});
  if (values.empty()) throw InvalidArgumentError("percentile of no values");
  std::sort(values.begin(), values.end());
  // Truncation, not rounding: XLA assigns the double to an int index.
  const size_t index =
      static_cast<size_t>(percentile / 100.0 * static_cast<double>(values.size() - 1));
  return values[index];
}

double Median(std::vector<double> values) {
  if (values.empty()) throw InvalidArgumentError("median of no values");
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

std::vector<ProfileEntry> Aggregate(const std::vector<HostCosts>& groups,
                                    const AggregationSpec& spec) {
  ValidateAggregation(spec);
  struct Collected {
    std::vector<double> group_means;
    double pooled_sum = 0;
    int64_t samples = 0;
  };
  std::map<std::string, Collected> by_name;  // Ordered: the output is sorted by name.
  for (const HostCosts& group : groups) {
    for (const auto& [name, cost] : group) {
      if (cost.count == 0) continue;
      Collected& c = by_name[name];
      c.group_means.push_back(cost.sum_us / static_cast<double>(cost.count));
      c.pooled_sum += cost.sum_us;
      c.samples += cost.count;
    }
  }
  std::vector<ProfileEntry> entries;
  entries.reserve(by_name.size());
  for (auto& [name, c] : by_name) {
    ProfileEntry entry{name, 0, c.samples, static_cast<int64_t>(c.group_means.size())};
    switch (spec.kind) {
      case Aggregation::kMean:
        entry.cost_us = c.pooled_sum / static_cast<double>(c.samples);
        break;
      case Aggregation::kPercentile:
        entry.cost_us = XlaPercentile(std::move(c.group_means), spec.percentile);
        break;
      case Aggregation::kMedian:
        entry.cost_us = Median(std::move(c.group_means));
        break;
      case Aggregation::kMin:
        entry.cost_us = *std::min_element(c.group_means.begin(), c.group_means.end());
        break;
      case Aggregation::kMax:
        entry.cost_us = *std::max_element(c.group_means.begin(), c.group_means.end());
        break;
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

}  // namespace pgle
