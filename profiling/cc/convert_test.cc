#include "profiling/cc/convert.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "profiling/cc/errors.h"
#include "profiling/cc/test_dir.h"
#include "profiling/cc/xspace_builder.h"

namespace pgle {
namespace {
namespace fs = std::filesystem;
using ::pgle::testing::FreshDir;

using tensorflow::profiler::XSpace;
using testing::HloProtoBytes;
using testing::PlaneBuilder;
using testing::Ref;

constexpr int64_t kUs = 1000 * 1000;

// One host's trace: `durations_us` of "fusion.1" of module jit_step(3) on `plane_name`, and, if
// `with_metadata`, the module's HloProto with fingerprint "fp".
XSpace HostTrace(const std::vector<int64_t>& durations_us, bool with_metadata = true,
                 const std::string& plane_name = "/device:GPU:0") {
  XSpace space;
  auto* plane = space.add_planes();
  plane->set_name(plane_name);
  PlaneBuilder device(plane);
  auto* line = device.AddLine("Stream #1");
  int64_t t = 0;
  for (int64_t d : durations_us) {
    device.AddEvent(
        line, "fusion.1", t, d * kUs,
        {{"hlo_op", Ref{"fusion.1"}}, {"hlo_module", Ref{"jit_step"}}, {"program_id", int64_t{3}}});
    t += 100 * kUs;
  }
  if (with_metadata) {
    auto* metadata_plane = space.add_planes();
    metadata_plane->set_name("/host:metadata");
    PlaneBuilder(metadata_plane)
        .AddMetadataBytes("jit_step(3)", "Hlo Proto", HloProtoBytes("jit_step", 3, "fp"));
  }
  return space;
}

void Write(const fs::path& path, const XSpace& space) {
  std::ofstream(path, std::ios::binary) << space.SerializeAsString();
}

TEST(ConvertRunDirsTest, PoolsHostsAndPrefixesFingerprintsFromAnyHost) {
  fs::path run = FreshDir("pooled");
  Write(run / "host0.xplane.pb", HostTrace({1, 3}));
  // host1 has no metadata plane; its events still get the prefix from host0's HloProto.
  Write(run / "host1.xplane.pb", HostTrace({8}, /*with_metadata=*/false));
  ConvertResult result = ConvertRunDirs({run.string()}, {});
  ASSERT_EQ(result.entries.size(), 1u);
  EXPECT_EQ(result.entries[0].name, "fp::fusion.1");
  EXPECT_DOUBLE_EQ(result.entries[0].cost_us, 4.0);
  EXPECT_EQ(result.entries[0].samples, 3);
  EXPECT_EQ(result.trace_files.size(), 2u);
  EXPECT_EQ(result.num_groups, 1u);
}

TEST(ConvertRunDirsTest, PercentileOverRunsOrHosts) {
  fs::path run0 = FreshDir("run0"), run1 = FreshDir("run1"), run2 = FreshDir("run2");
  Write(run0 / "h.xplane.pb", HostTrace({2}));
  Write(run1 / "h.xplane.pb", HostTrace({4}));
  Write(run2 / "a.xplane.pb", HostTrace({10}));
  Write(run2 / "b.xplane.pb", HostTrace({20}));  // Run mean 15.
  ConvertOptions options;
  options.aggregation = {Aggregation::kPercentile, 90};  // Sorted 2 4 15: index int(1.8) = 1.
  auto by_run = ConvertRunDirs({run0.string(), run1.string(), run2.string()}, options);
  EXPECT_EQ(by_run.num_groups, 3u);
  EXPECT_DOUBLE_EQ(by_run.entries[0].cost_us, 4);
  options.group_by_host = true;  // Sorted 2 4 10 20: index int(2.7) = 2.
  auto by_host = ConvertRunDirs({run0.string(), run1.string(), run2.string()}, options);
  EXPECT_EQ(by_host.num_groups, 4u);
  EXPECT_DOUBLE_EQ(by_host.entries[0].cost_us, 10);
}

std::string NoEventsMessage(const std::vector<std::string>& dirs,
                            const ConvertOptions& options = {}) {
  try {
    ConvertRunDirs(dirs, options);
  } catch (const NoDeviceEventsError& e) {
    return e.what();
  }
  return "";
}

TEST(ConvertRunDirsTest, CpuTraceNeedsIncludeHostAndSaysSo) {
  fs::path run = FreshDir("cpu");
  Write(run / "h.xplane.pb", HostTrace({1}, true, "/host:CPU"));
  std::string message = NoEventsMessage({run.string()});
  EXPECT_NE(message.find("no device plane"), std::string::npos) << message;
  EXPECT_NE(message.find("/host:CPU, /host:metadata"), std::string::npos) << message;
  EXPECT_NE(message.find("include_host"), std::string::npos) << message;
  ConvertOptions options;
  options.planes = PlaneSelection::kDeviceElseHost;
  EXPECT_EQ(ConvertRunDirs({run.string()}, options).entries[0].name, "fp::fusion.1");
}

TEST(ConvertRunDirsTest, DevicePlaneWithoutHloEvents) {
  fs::path run = FreshDir("no_hlo");
  Write(run / "h.xplane.pb", HostTrace({}));
  std::string message = NoEventsMessage({run.string()});
  EXPECT_NE(message.find("in its planes /device:GPU:0"), std::string::npos) << message;
  EXPECT_NE(message.find("No profile was written"), std::string::npos) << message;
}

TEST(ConvertRunDirsTest, OneEmptyRunAmongOthersIsAnError) {
  fs::path good = FreshDir("good"), bad = FreshDir("bad");
  Write(good / "h.xplane.pb", HostTrace({1}));
  Write(bad / "h.xplane.pb", HostTrace({}));
  EXPECT_NE(NoEventsMessage({good.string(), bad.string()}).find("one of the runs"),
            std::string::npos);
  // Per host, an idle host is left out.
  ConvertOptions options;
  options.group_by_host = true;
  EXPECT_EQ(ConvertRunDirs({good.string(), bad.string()}, options).num_groups, 1u);
}

TEST(ConvertRunDirsTest, MissingDirectoryAndBadPercentile) {
  EXPECT_THROW(ConvertRunDirs({(FreshDir("x") / "missing").string()}, {}), TraceNotFoundError);
  EXPECT_THROW(ConvertRunDirs({}, {}), InvalidArgumentError);
  ConvertOptions options;
  options.aggregation = {Aggregation::kPercentile, -5};
  EXPECT_THROW(ConvertRunDirs({"anything"}, options), InvalidArgumentError);
}

TEST(ConvertXSpacesTest, EachSerializedSpaceIsOneGroup) {
  ConvertOptions options;
  options.aggregation = {Aggregation::kMax};
  auto result = ConvertXSpaces(
      {HostTrace({1}).SerializeAsString(), HostTrace({5, 7}).SerializeAsString()}, options);
  EXPECT_EQ(result.num_groups, 2u);
  EXPECT_DOUBLE_EQ(result.entries[0].cost_us, 6);
  EXPECT_THROW(ConvertXSpaces({"\x0a\x05zz"}, {}), TraceFormatError);
}

}  // namespace
}  // namespace pgle
