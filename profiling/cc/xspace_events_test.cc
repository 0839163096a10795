#include "profiling/cc/xspace_events.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "profiling/cc/errors.h"
#include "profiling/cc/xspace_builder.h"

namespace pgle {
namespace {

using tensorflow::profiler::XSpace;
using testing::PlaneBuilder;
using testing::Ref;

constexpr int64_t kUs = 1000 * 1000;  // Picoseconds per microsecond.

PlaneBuilder AddPlane(XSpace* space, const std::string& name) {
  auto* plane = space->add_planes();
  plane->set_name(name);
  return PlaneBuilder(plane);
}

// Stats of an HLO event as the GPU tracer writes them: the op name as a reference.
testing::Stats Hlo(const std::string& op, int64_t program_id = 1) {
  return {{"hlo_op", Ref{op}}, {"hlo_module", Ref{"jit_step"}}, {"program_id", program_id}};
}

HostSpans Extract(const XSpace& space, PlaneSelection selection) {
  return ExtractSpans(LazyXSpace::Parse(space.SerializeAsString(), "test trace"), selection);
}

HostCosts Costs(const XSpace& space, PlaneSelection selection = PlaneSelection::kDevice,
                const FingerprintMap& fingerprints = {}) {
  return Extract(space, selection).Resolve(fingerprints);
}

double Mean(const HostCosts& costs, const std::string& name) {
  auto it = costs.find(name);
  if (it == costs.end()) return -1;
  return it->second.sum_us / static_cast<double>(it->second.count);
}

TEST(ExtractSpansTest, MeanDurationPerInstructionInMicroseconds) {
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  auto* line = gpu.AddLine("Stream #13", /*timestamp_ns=*/5);
  gpu.AddEvent(line, "fusion.1", 0, 2 * kUs, Hlo("fusion.1"));
  gpu.AddEvent(line, "fusion.1", 10 * kUs, 4 * kUs, Hlo("fusion.1"));
  gpu.AddEvent(line, "dot.2", 20 * kUs, 1500 * 1000, Hlo("dot.2"));
  HostCosts costs = Costs(space);
  ASSERT_EQ(costs.size(), 2u);
  EXPECT_EQ(costs["fusion.1"].count, 2);
  EXPECT_DOUBLE_EQ(Mean(costs, "fusion.1"), 3.0);
  EXPECT_DOUBLE_EQ(Mean(costs, "dot.2"), 1.5);
}

TEST(ExtractSpansTest, EventNeedsBothHloOpAndHloModule) {
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  auto* line = gpu.AddLine("Stream #1");
  gpu.AddEvent(line, "a", 0, kUs, {{"hlo_op", Ref{"a"}}});
  gpu.AddEvent(line, "b", 0, kUs, {{"hlo_module", Ref{"jit_step"}}});
  gpu.AddEvent(line, "end: c", 0, kUs, {});
  EXPECT_TRUE(Costs(space).empty());
}

TEST(ExtractSpansTest, StatsFromMetadataAndEventWins) {
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  gpu.AddMetadataStats(
      "kernel", {{"hlo_op", std::string("from_metadata")}, {"hlo_module", std::string("m")}});
  auto* line = gpu.AddLine("Stream #1");
  gpu.AddEvent(line, "kernel", 0, kUs);
  gpu.AddEvent(line, "kernel", 5 * kUs, 3 * kUs, {{"hlo_op", std::string("from_event")}});
  HostCosts costs = Costs(space);
  EXPECT_DOUBLE_EQ(Mean(costs, "from_metadata"), 1.0);
  EXPECT_DOUBLE_EQ(Mean(costs, "from_event"), 3.0);
}

TEST(ExtractSpansTest, SkipsTheAsyncOpsLineByDisplayNameElseName) {
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  gpu.AddEvent(gpu.AddLine("Async XLA Ops"), "a", 0, kUs, Hlo("async_by_name"));
  gpu.AddEvent(gpu.AddLine("line 7", 0, "Async XLA Ops"), "b", 0, kUs, Hlo("async_by_display"));
  // A display name replaces the name: this line is read.
  gpu.AddEvent(gpu.AddLine("Async XLA Ops", 0, "Stream #2"), "c", 0, kUs, Hlo("shown_as_stream"));
  HostCosts costs = Costs(space);
  ASSERT_EQ(costs.size(), 1u);
  EXPECT_TRUE(costs.count("shown_as_stream"));
}

TEST(ExtractSpansTest, FragmentsWithOneScopeRangeIdMergeToTheirEnclosingSpan) {
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  auto* line = gpu.AddLine("Stream #1");
  auto with_scope = [](int64_t scope) {
    return testing::Stats{
        {"hlo_op", Ref{"fusion.3"}}, {"hlo_module", Ref{"m"}}, {"scope_range_id", scope}};
  };
  // Instance 1: three kernels from 0 to 10 us. Instance 2: one kernel of 2 us.
  gpu.AddEvent(line, "k1", 0, 2 * kUs, with_scope(1));
  gpu.AddEvent(line, "k2", 3 * kUs, 2 * kUs, with_scope(1));
  gpu.AddEvent(gpu.AddLine("Stream #2"), "k3", 8 * kUs, 2 * kUs, with_scope(1));
  gpu.AddEvent(line, "k1", 20 * kUs, 2 * kUs, with_scope(2));
  HostCosts costs = Costs(space);
  EXPECT_EQ(costs["fusion.3"].count, 2);
  EXPECT_DOUBLE_EQ(Mean(costs, "fusion.3"), (10.0 + 2.0) / 2);
}

TEST(ExtractSpansTest, WithoutScopeIdEventsStartingTogetherAreOneInstance) {
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  // Same absolute start (line timestamps differ, offsets compensate): one instance of 5 us.
  gpu.AddEvent(gpu.AddLine("Stream #1", /*timestamp_ns=*/1000), "a", 0, 2 * kUs,
               Hlo("all-reduce.1"));
  gpu.AddEvent(gpu.AddLine("Stream #2", /*timestamp_ns=*/0), "a", 1000 * 1000, 5 * kUs,
               Hlo("all-reduce.1"));
  HostCosts costs = Costs(space);
  EXPECT_EQ(costs["all-reduce.1"].count, 1);
  EXPECT_DOUBLE_EQ(Mean(costs, "all-reduce.1"), 5.0);
}

// The wire form of the one-plane `space` with `suffix` appended to its first line's bytes: field
// orders protobuf never writes, which it parses all the same.
std::string WithFirstLineSuffix(const XSpace& space, const std::string& suffix) {
  auto len_field = [](char tag, const std::string& payload) {
    std::string out(1, tag);
    for (size_t size = payload.size();; size >>= 7) {
      out.push_back(static_cast<char>(size < 0x80 ? size : (size & 0x7f) | 0x80));
      if (size < 0x80) break;
    }
    return out + payload;
  };
  tensorflow::profiler::XPlane plane = space.planes(0);
  std::string lines;
  for (int i = 0; i < plane.lines_size(); ++i) {
    lines += len_field('\x1a', plane.lines(i).SerializeAsString() + (i == 0 ? suffix : ""));
  }
  plane.clear_lines();
  return len_field('\x0a', plane.SerializeAsString() + lines);  // XSpace.planes, XPlane.lines.
}

TEST(ExtractSpansTest, ALineTimestampAfterItsEventsStillShiftsThem) {
  // As above, but Stream #1's timestamp comes after its events: the reader meets them first.
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  gpu.AddEvent(gpu.AddLine("Stream #1"), "a", 0, 2 * kUs, Hlo("all-reduce.1"));
  gpu.AddEvent(gpu.AddLine("Stream #2"), "a", 1000 * 1000, 5 * kUs, Hlo("all-reduce.1"));
  const std::string timestamp_1000 = "\x18\xe8\x07";  // XLine.timestamp_ns (3) = 1000.
  const std::string bytes = WithFirstLineSuffix(space, timestamp_1000);
  tensorflow::profiler::XSpace parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  ASSERT_EQ(parsed.planes(0).lines(0).timestamp_ns(), 1000);
  HostCosts costs =
      ExtractSpans(LazyXSpace::Parse(bytes, "t"), PlaneSelection::kDevice).Resolve({});
  EXPECT_EQ(costs["all-reduce.1"].count, 1);
  EXPECT_DOUBLE_EQ(Mean(costs, "all-reduce.1"), 5.0);
  // Without the timestamp the two events start 1 us apart: two instances.
  EXPECT_EQ(Costs(space)["all-reduce.1"].count, 2);
}

TEST(ExtractSpansTest, GpuPlanesWinOverTpuAndCustom) {
  XSpace space;
  PlaneBuilder custom = AddPlane(&space, "/device:CUSTOM:0");
  custom.AddEvent(custom.AddLine("l"), "x", 0, kUs, Hlo("custom_op"));
  PlaneBuilder tpu = AddPlane(&space, "/device:TPU:0");
  tpu.AddEvent(tpu.AddLine("l"), "x", 0, kUs, Hlo("tpu_op"));
  for (const char* name : {"/device:GPU:0", "/device:GPU:1"}) {
    PlaneBuilder gpu = AddPlane(&space, name);
    gpu.AddEvent(gpu.AddLine("l"), "x", 0, kUs, Hlo(std::string("gpu_op") + name[12]));
  }
  HostSpans spans = Extract(space, PlaneSelection::kDevice);
  EXPECT_EQ(spans.planes_read(), (std::vector<std::string>{"/device:GPU:0", "/device:GPU:1"}));
  HostCosts costs = spans.Resolve({});
  EXPECT_TRUE(costs.count("gpu_op0") && costs.count("gpu_op1"));
  EXPECT_EQ(costs.size(), 2u);
}

TEST(ExtractSpansTest, CustomPlanesWhenNoGpuOrTpu) {
  XSpace space;
  PlaneBuilder custom = AddPlane(&space, "/device:CUSTOM:0");
  custom.AddEvent(custom.AddLine("l"), "x", 0, kUs, Hlo("custom_op"));
  EXPECT_TRUE(Costs(space).count("custom_op"));
}

TEST(ExtractSpansTest, HostPlaneOnlyWhenAskedAndNoDevicePlane) {
  XSpace space;
  PlaneBuilder host = AddPlane(&space, "/host:CPU");
  host.AddEvent(host.AddLine("worker"), "dot.1", 0, kUs, Hlo("dot.1"));
  EXPECT_TRUE(Costs(space, PlaneSelection::kDevice).empty());
  EXPECT_TRUE(Costs(space, PlaneSelection::kDeviceElseHost).count("dot.1"));
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  gpu.AddEvent(gpu.AddLine("l"), "x", 0, kUs, Hlo("gpu_op"));
  HostCosts costs = Costs(space, PlaneSelection::kDeviceElseHost);
  EXPECT_EQ(costs.size(), 1u);
  EXPECT_TRUE(costs.count("gpu_op"));
}

TEST(ResolveTest, PrefixesTheFingerprintOfModuleNameAndProgramId) {
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  auto* line = gpu.AddLine("l");
  gpu.AddEvent(line, "x", 0, kUs, Hlo("fusion.1", /*program_id=*/7));
  gpu.AddEvent(line, "x", 0, kUs,
               Hlo("fusion.1", /*program_id=*/8));  // Module without fingerprint.
  // Program id as uint64, as some tracers write it.
  gpu.AddEvent(
      line, "x", 0, kUs,
      {{"hlo_op", Ref{"dot.2"}}, {"hlo_module", Ref{"jit_step"}}, {"program_id", uint64_t{7}}});
  HostCosts costs = Costs(space, PlaneSelection::kDevice, {{"jit_step(7)", "fp"}});
  EXPECT_TRUE(costs.count("fp::fusion.1"));
  EXPECT_TRUE(costs.count("fusion.1"));
  EXPECT_TRUE(costs.count("fp::dot.2"));
  EXPECT_EQ(costs.size(), 3u);
}

TEST(ResolveTest, ModulesSharingAFingerprintMergeInstancesLikeXla) {
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  auto* line = gpu.AddLine("l");
  gpu.AddEvent(line, "x", 0, kUs, Hlo("fusion.1", 1));
  gpu.AddEvent(line, "x", 0, 3 * kUs, Hlo("fusion.1", 2));
  HostCosts costs =
      Costs(space, PlaneSelection::kDevice, {{"jit_step(1)", "fp"}, {"jit_step(2)", "fp"}});
  EXPECT_EQ(costs["fp::fusion.1"].count, 1);
  EXPECT_DOUBLE_EQ(Mean(costs, "fp::fusion.1"), 3.0);
}

TEST(ExtractSpansTest, NumericAndMissingRefValuesAsXlaPrintsThem) {
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  auto* line = gpu.AddLine("l");
  gpu.AddEvent(line, "x", 0, kUs, {{"hlo_op", int64_t{12}}, {"hlo_module", std::string("m")}});
  auto* event = gpu.AddEvent(line, "y", 0, kUs,
                             {{"hlo_op", std::string("?")}, {"hlo_module", std::string("m")}});
  event->mutable_stats(0)->set_ref_value(999);  // Dangling reference: the empty name.
  HostCosts costs = Costs(space);
  EXPECT_TRUE(costs.count("12"));
  EXPECT_TRUE(costs.count(""));
}

TEST(ExtractSpansTest, MetadataIdsFarFromOneTwoThreeWork) {
  // Traces number metadata 1, 2, 3, ...; any int64 id is valid all the same.
  XSpace space;
  auto* plane = space.add_planes();
  plane->set_name("/device:GPU:0");
  const int64_t op_id = int64_t{1} << 40, module_id = -5, name_id = 70000,
                event_id = int64_t{1} << 50;
  (*plane->mutable_stat_metadata())[op_id].set_name("hlo_op");
  (*plane->mutable_stat_metadata())[module_id].set_name("hlo_module");
  (*plane->mutable_stat_metadata())[name_id].set_name("fusion.9");
  auto* metadata_stat = (*plane->mutable_event_metadata())[event_id].add_stats();
  metadata_stat->set_metadata_id(module_id);
  metadata_stat->set_str_value("m");
  auto* event = plane->add_lines()->add_events();
  event->set_metadata_id(event_id);
  event->set_duration_ps(4 * kUs);
  auto* op_stat = event->add_stats();
  op_stat->set_metadata_id(op_id);
  op_stat->set_ref_value(static_cast<uint64_t>(name_id));
  HostCosts costs = Costs(space);
  ASSERT_EQ(costs.size(), 1u);
  EXPECT_DOUBLE_EQ(Mean(costs, "fusion.9"), 4.0);
}

TEST(ExtractSpansTest, InterleavedInstancesOfManyOpsMergeEachToItsOwn) {
  // Fragments of one instance far apart in the trace, other ops' instances in between.
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  auto* line = gpu.AddLine("Stream #1");
  auto* other_line = gpu.AddLine("Stream #2");
  for (int64_t instance = 0; instance < 50; ++instance) {
    for (int op = 0; op < 3; ++op) {
      testing::Stats stats = Hlo("op" + std::to_string(op));
      stats.push_back({"scope_range_id", instance});
      // A fragment of (1 + op) us at 100 us * instance, and one ending 1 us later on the other
      // line.
      gpu.AddEvent(line, "k", instance * 100 * kUs, (1 + op) * kUs, stats);
      gpu.AddEvent(other_line, "k", instance * 100 * kUs + op * kUs, 2 * kUs, stats);
    }
  }
  HostCosts costs = Costs(space);
  ASSERT_EQ(costs.size(), 3u);
  for (int op = 0; op < 3; ++op) {
    const std::string name = "op" + std::to_string(op);
    EXPECT_EQ(costs[name].count, 50);
    EXPECT_DOUBLE_EQ(Mean(costs, name), std::max(1.0 + op, op + 2.0));
  }
}

TEST(ExtractSpansTest, ReadsThroughProtobufWhatTheFastReaderRefuses) {
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  auto* line = gpu.AddLine("Stream #1");
  gpu.AddEvent(line, "a", 0, 2 * kUs, Hlo("fusion.1"));
  gpu.AddEvent(line, "a", 10 * kUs, 4 * kUs, Hlo("fusion.1"));
  // An unknown group field (number 20, one varint inside) appended to the last event: protobuf
  // skips it, the fast reader leaves it to protobuf. Its bytes: start tag, field 1 = 1, end tag.
  const std::string group = "\xa3\x01\x08\x01\xa4\x01";
  XSpace with_group = space;
  auto* event = with_group.mutable_planes(0)->mutable_lines(0)->mutable_events(1);
  ASSERT_TRUE(
      event->ParseFromString(event->SerializeAsString() + group));  // Kept as an unknown field.
  ASSERT_FALSE(LazyXSpace::Parse(with_group.SerializeAsString(), "t").CheckLines(0));
  HostCosts costs = Costs(with_group);
  EXPECT_EQ(costs["fusion.1"].count, 2);
  EXPECT_DOUBLE_EQ(Mean(costs, "fusion.1"), 3.0);
}

TEST(ExtractSpansTest, DamageInALineNotReadIsStillAFormatError) {
  XSpace space;
  PlaneBuilder gpu = AddPlane(&space, "/device:GPU:0");
  gpu.AddEvent(gpu.AddLine("Stream #1"), "a", 0, kUs, Hlo("fusion.1"));
  PlaneBuilder host = AddPlane(&space, "/host:CPU");
  host.AddEvent(host.AddLine("python"), "step", 0, kUs, {{"note", std::string("fine")}});
  std::string bytes = space.SerializeAsString();
  const size_t at = bytes.find("fine");
  ASSERT_NE(at, std::string::npos);
  bytes[at] = '\xff';  // Invalid UTF-8 in a string stat of the host plane, which is not read.
  EXPECT_THROW(ExtractSpans(LazyXSpace::Parse(bytes, "t"), PlaneSelection::kDevice),
               TraceFormatError);
}

}  // namespace
}  // namespace pgle
