#include "profiling/cc/module_fingerprints.h"

#include "gtest/gtest.h"
#include "profiling/cc/hlo_subset.pb.h"
#include "profiling/cc/xspace_builder.h"

namespace pgle {
namespace {

using testing::HloProtoBytes;
using testing::PlaneBuilder;

TEST(ModuleKeyTest, NameAndProgramId) { EXPECT_EQ(ModuleKey("jit_step", 42), "jit_step(42)"); }

TEST(ModuleFingerprintTest, ReadsTheEntryRootAttributeOnly) {
  EXPECT_EQ(ModuleFingerprint(HloProtoBytes("m", 1, "abc123")), "abc123");
  // The called computation's root carries "decoy"; with no attribute on the entry root there is
  // none.
  EXPECT_EQ(ModuleFingerprint(HloProtoBytes("m", 1, "")), std::nullopt);
}

TEST(ModuleFingerprintTest, DanglingIdsAndGarbageGiveNone) {
  pgle::hlo::HloProto proto;
  proto.ParseFromString(HloProtoBytes("m", 1, "abc"));
  proto.mutable_hlo_module()->set_entry_computation_id(99);
  EXPECT_EQ(ModuleFingerprint(proto.SerializeAsString()), std::nullopt);
  EXPECT_EQ(ModuleFingerprint("\xff\xff\xff"), std::nullopt);
  EXPECT_EQ(ModuleFingerprint(""), std::nullopt);
}

TEST(CollectFingerprintsTest, KeysByModuleNameAndIdFromTheMetadataPlane) {
  tensorflow::profiler::XSpace space;
  PlaneBuilder device(space.add_planes());
  // An HloProto on a device plane is not read: only /host:metadata holds them.
  device.AddMetadataBytes("jit_other(9)", "Hlo Proto", HloProtoBytes("jit_other", 9, "ignored"));
  space.mutable_planes(0)->set_name("/device:GPU:0");
  auto* metadata_plane = space.add_planes();
  metadata_plane->set_name("/host:metadata");
  PlaneBuilder metadata(metadata_plane);
  // The metadata's own name is only a label; the key comes from the proto.
  metadata.AddMetadataBytes("label", "Hlo Proto", HloProtoBytes("jit_step", 5, "fp5"));
  metadata.AddMetadataBytes("jit_init(6)", "Hlo Proto", HloProtoBytes("jit_init", 6, ""));
  metadata.AddMetadataStats("label", {{"program_id", uint64_t{5}}});

  FingerprintMap fingerprints;
  CollectFingerprints(space, &fingerprints);
  EXPECT_EQ(fingerprints, (FingerprintMap{{"jit_step(5)", "fp5"}}));
}

}  // namespace
}  // namespace pgle
