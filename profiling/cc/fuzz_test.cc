// Random and damaged inputs must end in a PgleError or a result, never in a crash, a hang or a
// std::exception of another kind. Deterministic seeds, so a failure reproduces.

#include <random>
#include <string>

#include "gtest/gtest.h"
#include "profiling/cc/convert.h"
#include "profiling/cc/errors.h"
#include "profiling/cc/profile.h"
#include "profiling/cc/xspace_builder.h"

namespace pgle {
namespace {

using testing::HloProtoBytes;
using testing::PlaneBuilder;
using testing::Ref;

std::string ValidTrace() {
  tensorflow::profiler::XSpace space;
  auto* plane = space.add_planes();
  plane->set_name("/device:GPU:0");
  PlaneBuilder gpu(plane);
  auto* line = gpu.AddLine("Stream #1", 12);
  for (int i = 0; i < 20; ++i) {
    gpu.AddEvent(line, "fusion." + std::to_string(i % 4), i * 1000000, 500000 + i,
                 {{"hlo_op", Ref{"fusion." + std::to_string(i % 4)}},
                  {"hlo_module", Ref{"jit_step"}},
                  {"program_id", int64_t{3}},
                  {"scope_range_id", int64_t{i / 2}}});
  }
  auto* metadata = space.add_planes();
  metadata->set_name("/host:metadata");
  PlaneBuilder(metadata).AddMetadataBytes("jit_step(3)", "Hlo Proto",
                                          HloProtoBytes("jit_step", 3, "fp"));
  return space.SerializeAsString();
}

// Runs the converter on `bytes`; fails the test on anything but success or a PgleError.
void ConvertSafely(const std::string& bytes) {
  try {
    ConvertResult result = ConvertXSpaces({bytes}, {});
    EXPECT_FALSE(result.entries.empty());
  } catch (const PgleError&) {
  }
  try {
    ParseProfile(bytes);
  } catch (const PgleError&) {
  }
}

TEST(FuzzTest, ValidTraceConverts) {
  EXPECT_EQ(ConvertXSpaces({ValidTrace()}, {}).entries.size(), 4u);
}

TEST(FuzzTest, EveryTruncationOfAValidTrace) {
  const std::string bytes = ValidTrace();
  for (size_t n = 0; n < bytes.size(); ++n) ConvertSafely(bytes.substr(0, n));
}

TEST(FuzzTest, RandomByteFlipsOfAValidTrace) {
  const std::string bytes = ValidTrace();
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string damaged = bytes;
    for (int flips = 1 + trial % 4; flips > 0; --flips) {
      damaged[rng() % damaged.size()] = static_cast<char>(rng());
    }
    ConvertSafely(damaged);
  }
}

TEST(FuzzTest, RandomBytes) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes(rng() % 256, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    ConvertSafely(bytes);
  }
}

}  // namespace
}  // namespace pgle
