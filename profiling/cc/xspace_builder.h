#ifndef PROFILING_CC_XSPACE_BUILDER_H_
#define PROFILING_CC_XSPACE_BUILDER_H_

// Test helper: writes XSpaces the way the JAX profiler lays them out (stat names in the plane's
// stat metadata, string values often as references to another stat metadata's name), so tests
// state only what matters to them.

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "profiling/cc/hlo_subset.pb.h"
#include "profiling/cc/xplane.pb.h"

namespace pgle::testing {

// A stat value: a string stored inline, a string stored as a reference, or an integer.
struct Ref {
  std::string name;
};
using StatValue = std::variant<std::string, Ref, int64_t, uint64_t>;
using Stats = std::vector<std::pair<std::string, StatValue>>;

class PlaneBuilder {
 public:
  explicit PlaneBuilder(tensorflow::profiler::XPlane* plane) : plane_(plane) {}

  // A new line; events' offsets are relative to `timestamp_ns`.
  tensorflow::profiler::XLine* AddLine(const std::string& name, int64_t timestamp_ns = 0,
                                       const std::string& display_name = "");

  // An event named `name` (its metadata is created once per name) with `stats` on the event.
  tensorflow::profiler::XEvent* AddEvent(tensorflow::profiler::XLine* line, const std::string& name,
                                         int64_t offset_ps, int64_t duration_ps, Stats stats = {});

  // Stats on the metadata of events named `name`, shared by all of them.
  void AddMetadataStats(const std::string& name, Stats stats);

  // A bytes stat on the metadata named `name` (how /host:metadata carries HloProtos).
  void AddMetadataBytes(const std::string& name, const std::string& stat_name,
                        const std::string& bytes);

  int64_t StatId(const std::string& name);
  int64_t EventMetadataId(const std::string& name);

 private:
  void SetStat(tensorflow::profiler::XStat* stat, const std::string& name, const StatValue& value);

  tensorflow::profiler::XPlane* plane_;
};

// A serialized HloProto for module `name`/`id` whose entry root has `fingerprint_before_lhs`
// = `fingerprint` (none if empty).
std::string HloProtoBytes(const std::string& name, int64_t id, const std::string& fingerprint);

}  // namespace pgle::testing

#endif  // PROFILING_CC_XSPACE_BUILDER_H_
