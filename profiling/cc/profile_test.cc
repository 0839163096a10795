#include "profiling/cc/profile.h"

#include <cmath>
#include <limits>
#include <string>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "profiling/cc/profiled_instructions.pb.h"

namespace pgle {
namespace {

using ::tensorflow::profiler::ProfiledInstructionsProto;

std::string MakeProfile(std::initializer_list<std::pair<const char*, double>> costs) {
  ProfiledInstructionsProto proto;
  for (const auto& [name, cost_us] : costs) {
    auto* cost = proto.add_costs();
    cost->set_name(name);
    cost->set_cost_us(cost_us);
  }
  return proto.SerializeAsString();
}

TEST(ParseProfileTest, ReadsCostsSortedByName) {
  Profile profile = ParseProfile(MakeProfile({{"fp::fusion.2", 7.5}, {"fp::all-reduce.1", 120.0}}));
  ASSERT_EQ(profile.costs.size(), 2u);
  EXPECT_EQ(profile.costs[0].name, "fp::all-reduce.1");
  EXPECT_DOUBLE_EQ(profile.costs[0].cost_us, 120.0);
  EXPECT_EQ(profile.costs[1].name, "fp::fusion.2");
  EXPECT_DOUBLE_EQ(profile.costs[1].cost_us, 7.5);
  EXPECT_EQ(profile.num_latencies, 0u);
}

TEST(ParseProfileTest, EmptyInputIsAnEmptyProfile) {
  // An empty message is valid protobuf; callers that need costs check the count themselves.
  EXPECT_TRUE(ParseProfile("").costs.empty());
}

TEST(ParseProfileTest, RejectsTruncatedBytes) {
  std::string bytes = MakeProfile({{"a.very.long.instruction.name", 1.0}});
  EXPECT_THROW(ParseProfile(bytes.substr(0, bytes.size() / 2)), ProfileError);
}

TEST(ParseProfileTest, RejectsInvalidCosts) {
  EXPECT_THROW(ParseProfile(MakeProfile({{"dot.1", -1.0}})), ProfileError);
  EXPECT_THROW(ParseProfile(MakeProfile({{"dot.1", std::nan("")}})), ProfileError);
  EXPECT_THROW(ParseProfile(MakeProfile({{"", 1.0}})), ProfileError);
}

TEST(CanonicalProfileBytesTest, OrderOfEntriesDoesNotChangeBytes) {
  std::string a = CanonicalProfileBytes(MakeProfile({{"b", 2.0}, {"a", 1.0}, {"c", 3.0}}));
  std::string b = CanonicalProfileBytes(MakeProfile({{"c", 3.0}, {"a", 1.0}, {"b", 2.0}}));
  EXPECT_EQ(a, b);
  ProfiledInstructionsProto parsed;
  ASSERT_TRUE(parsed.ParseFromString(a));
  ASSERT_EQ(parsed.costs_size(), 3);
  EXPECT_EQ(parsed.costs(0).name(), "a");
  EXPECT_EQ(parsed.costs(2).name(), "c");
}

TEST(SerializeProfileTest, BinaryIsSortedAndOrderIndependent) {
  std::string a = SerializeProfile({{"b", 2.0}, {"a", 1.0}}, ProfileFormat::kBinary);
  std::string b = SerializeProfile({{"a", 1.0}, {"b", 2.0}}, ProfileFormat::kBinary);
  EXPECT_EQ(a, b);
  Profile profile = ParseProfile(a);
  ASSERT_EQ(profile.costs.size(), 2u);
  EXPECT_EQ(profile.costs[0].name, "a");
}

TEST(SerializeProfileTest, TextParsesBackToTheSameDoubles) {
  const double awkward = 0.1 + 0.2;  // Needs 17 significant digits to round-trip.
  std::string text =
      SerializeProfile({{"fp::fusion.1", awkward}, {"dot", 1e-300}}, ProfileFormat::kText);
  EXPECT_NE(text.find("name: \"dot\""), std::string::npos) << text;
  ProfiledInstructionsProto parsed;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &parsed)) << text;
  ASSERT_EQ(parsed.costs_size(), 2);
  EXPECT_EQ(parsed.costs(0).name(), "dot");
  EXPECT_EQ(parsed.costs(0).cost_us(), 1e-300);
  EXPECT_EQ(parsed.costs(1).cost_us(), awkward);
  EXPECT_EQ(ParseProfile(text, ProfileFormat::kText).costs[1].cost_us, awkward);
  EXPECT_THROW(ParseProfile("costs { nme: 1 }", ProfileFormat::kText), ProfileError);
}

}  // namespace
}  // namespace pgle
