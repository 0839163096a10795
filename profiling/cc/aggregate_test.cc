#include "profiling/cc/aggregate.h"

#include "gtest/gtest.h"
#include "profiling/cc/errors.h"

namespace pgle {
namespace {

TEST(XlaPercentileTest, TruncatedIndexIntoSortedValues) {
  const std::vector<double> values = {40, 10, 30, 20};  // Sorted: 10 20 30 40.
  EXPECT_EQ(XlaPercentile(values, 0), 10);
  EXPECT_EQ(XlaPercentile(values, 50), 20);  // int(0.5 * 3) = 1, not the interpolated 25.
  EXPECT_EQ(XlaPercentile(values, 66), 20);  // int(1.98) = 1.
  EXPECT_EQ(XlaPercentile(values, 67), 30);  // int(2.01) = 2.
  EXPECT_EQ(XlaPercentile(values, 90), 30);  // int(2.7) = 2.
  EXPECT_EQ(XlaPercentile(values, 100), 40);
  EXPECT_EQ(XlaPercentile({7}, 90), 7);
}

TEST(XlaPercentileTest, RejectsOutOfRange) {
  EXPECT_THROW(XlaPercentile({1, 2}, -1), InvalidArgumentError);
  EXPECT_THROW(XlaPercentile({1, 2}, 100.5), InvalidArgumentError);
  EXPECT_THROW(XlaPercentile({}, 50), InvalidArgumentError);
}

TEST(MedianTest, MiddleOrMeanOfTheTwoMiddles) {
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
}

// Two runs: "a" ran twice in run 0 (1 and 3 us) and once in run 1 (8 us); "b" only in run 1.
std::vector<HostCosts> TwoRuns() {
  return {HostCosts{{"a", {4.0, 2}}}, HostCosts{{"a", {8.0, 1}}, {"b", {5.0, 1}}}};
}

TEST(AggregateTest, MeanPoolsAllInstancesLikeXlasConverter) {
  auto entries = Aggregate(TwoRuns(), {Aggregation::kMean});
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].name, "a");
  EXPECT_DOUBLE_EQ(entries[0].cost_us, 12.0 / 3);  // Not the mean of run means (5).
  EXPECT_EQ(entries[0].samples, 3);
  EXPECT_EQ(entries[0].groups, 2);
  EXPECT_EQ(entries[1].name, "b");
  EXPECT_EQ(entries[1].groups, 1);
}

TEST(AggregateTest, StatisticsAreOverPerRunMeans) {
  auto cost_of_a = [](AggregationSpec spec) { return Aggregate(TwoRuns(), spec)[0].cost_us; };
  EXPECT_EQ(cost_of_a({Aggregation::kPercentile, 90}), 2);  // Run means 2, 8: index int(0.9) = 0.
  EXPECT_EQ(cost_of_a({Aggregation::kPercentile, 100}), 8);
  EXPECT_EQ(cost_of_a({Aggregation::kMedian}), 5);
  EXPECT_EQ(cost_of_a({Aggregation::kMin}), 2);
  EXPECT_EQ(cost_of_a({Aggregation::kMax}), 8);
}

TEST(AggregateTest, OutputIsSortedByName) {
  std::vector<HostCosts> groups = {
      HostCosts{{"z", {1, 1}}, {"a", {1, 1}}, {"m", {1, 1}}, {"b", {1, 1}}}};
  auto entries = Aggregate(groups, {});
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "m", "z"}));
}

TEST(AggregateTest, InvalidPercentileIsAnErrorNotAnEmptyProfile) {
  EXPECT_THROW(Aggregate(TwoRuns(), {Aggregation::kPercentile, 101}), InvalidArgumentError);
}

}  // namespace
}  // namespace pgle
