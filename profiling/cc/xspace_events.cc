#include "profiling/cc/xspace_events.h"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <utility>

namespace pgle {
namespace {

using ::tensorflow::profiler::XPlane;
using ::tensorflow::profiler::XSpace;
using ::tensorflow::profiler::XStat;

constexpr std::string_view kDevicePlanePrefixes[] = {
    "/device:GPU:", "/device:TPU:", "/device:CUSTOM:"};
constexpr std::string_view kHostPlaneName = "/host:CPU";
constexpr std::string_view kAsyncOpsLineName = "Async XLA Ops";

// The stats the converter looks at, by name in the plane's stat metadata.
enum class StatKind { kOther, kHloOp, kHloModule, kProgramId, kScopeRangeId };

StatKind KindOfStatName(std::string_view name) {
  if (name == "hlo_op") return StatKind::kHloOp;
  if (name == "hlo_module") return StatKind::kHloModule;
  if (name == "program_id") return StatKind::kProgramId;
  if (name == "scope_range_id") return StatKind::kScopeRangeId;
  return StatKind::kOther;
}

// Metadata id -> V. Traces number their metadata 1, 2, 3, ...: those ids index a vector (a
// lookup per stat of millions of events must be cheap); any other id goes to a hash map.
template <typename V>
class IdMap {
 public:
  static constexpr int64_t kDenseLimit = 1 << 16;

  V* Find(int64_t id) {
    if (id >= 0 && id < kDenseLimit) {
      const size_t i = static_cast<size_t>(id);
      return i < dense_.size() && dense_[i].first ? &dense_[i].second : nullptr;
    }
    auto it = sparse_.find(id);
    return it == sparse_.end() ? nullptr : &it->second;
  }
  V& Insert(int64_t id, V value) {
    if (id >= 0 && id < kDenseLimit) {
      const size_t i = static_cast<size_t>(id);
      if (i >= dense_.size()) dense_.resize(i + 1);
      dense_[i] = {true, std::move(value)};
      return dense_[i].second;
    }
    return sparse_[id] = std::move(value);
  }

 private:
  std::vector<std::pair<bool, V>> dense_;
  std::unordered_map<int64_t, V> sparse_;
};

// Copies each distinct string once; events refer to them by index. Traces repeat the same few
// thousand op names millions of times.
class StringPool {
 public:
  uint32_t Intern(std::string_view s) {
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    const std::string& stored = storage_.emplace_back(s);
    uint32_t id = static_cast<uint32_t>(storage_.size() - 1);
    ids_.emplace(stored, id);
    return id;
  }
  const std::string& Get(uint32_t id) const { return storage_[id]; }
  size_t size() const { return storage_.size(); }

 private:
  std::deque<std::string> storage_;  // A deque never moves its elements: ids_ views stay valid.
  std::unordered_map<std::string_view, uint32_t> ids_;
};

// What names an instruction in the trace: its module, the module's program id, and its op.
struct InstructionKey {
  uint32_t module;  // Interned hlo_module value.
  bool has_program_id;
  int64_t program_id;
  uint32_t op;  // Interned hlo_op value.
  bool operator==(const InstructionKey& o) const {
    return std::tie(module, has_program_id, program_id, op) ==
           std::tie(o.module, o.has_program_id, o.program_id, o.op);
  }
};

struct InstructionKeyHash {
  size_t operator()(const InstructionKey& k) const {
    uint64_t h = k.module;
    for (uint64_t v : {static_cast<uint64_t>(k.has_program_id), static_cast<uint64_t>(k.program_id),
                       static_cast<uint64_t>(k.op)}) {
      h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

// One execution of one instruction: the union of its fragments.
struct Span {
  uint32_t instruction;  // Index of its InstructionKey (in ExtractSpans) or of its final name (in
                         // Resolve).
  int64_t instance;      // scope_range_id, else start time in ps (one int64 space, as in XLA).
  int64_t start_ps;
  int64_t end_ps;
};

// Sorts `spans` by (instruction, instance) and merges each group of fragments into one span over
// [min start, max end]; `num_instructions` bounds the instruction ids. A sort of a flat vector:
// far cheaper than a hash map node per instance. First a counting sort by instruction (a few
// hundred ids); within one instruction, a line's instances come in time order, so most groups are
// already sorted by instance and need no comparison sort.
void MergeFragments(std::vector<Span>* spans, size_t num_instructions) {
  std::vector<size_t> begin(num_instructions + 1, 0);
  for (const Span& span : *spans) ++begin[span.instruction + 1];
  for (size_t i = 0; i < num_instructions; ++i) begin[i + 1] += begin[i];
  std::vector<Span> by_instruction(spans->size());
  std::vector<size_t> next(begin.begin(), begin.end() - 1);
  for (const Span& span : *spans) by_instruction[next[span.instruction]++] = span;
  auto by_instance = [](const Span& a, const Span& b) { return a.instance < b.instance; };
  for (size_t i = 0; i < num_instructions; ++i) {
    auto first = by_instruction.begin() + static_cast<std::ptrdiff_t>(begin[i]);
    auto last = by_instruction.begin() + static_cast<std::ptrdiff_t>(begin[i + 1]);
    if (!std::is_sorted(first, last, by_instance)) std::sort(first, last, by_instance);
  }
  spans->swap(by_instruction);

  size_t out = 0;
  for (size_t i = 0; i < spans->size(); ++i) {
    const Span& s = (*spans)[i];
    if (out > 0) {
      Span& last = (*spans)[out - 1];
      if (last.instruction == s.instruction && last.instance == s.instance) {
        last.start_ps = std::min(last.start_ps, s.start_ps);
        last.end_ps = std::max(last.end_ps, s.end_ps);
        continue;
      }
    }
    (*spans)[out++] = s;
  }
  spans->resize(out);
}

// A stat's value as text, as XLA's XStatVisitor::ToString gives it (for values that are not
// stored as strings, which traces do not use for op and module names).
std::string NonStringStatText(const StatView& stat) {
  switch (stat.value_case()) {
    case XStat::kInt64Value:
      return std::to_string(stat.int64_value());
    case XStat::kUint64Value:
      return std::to_string(stat.uint64_value());
    case XStat::kDoubleValue: {
      char buffer[32];  // absl::StrCat(double): six significant digits.
      snprintf(buffer, sizeof(buffer), "%g", stat.double_value());
      return buffer;
    }
    case XStat::kBytesValue:
      return "<opaque bytes>";
    default:
      return std::string();
  }
}

int64_t StatInt(const StatView& stat) {
  switch (stat.value_case()) {
    case XStat::kInt64Value:
      return stat.int64_value();
    case XStat::kUint64Value:
      return static_cast<int64_t>(stat.uint64_value());
    default:
      return 0;
  }
}

// The planes XLA's converter reads from `space`, by index in trace order.
std::vector<int> SelectPlanes(const XSpace& space, PlaneSelection selection) {
  std::vector<int> planes;
  for (std::string_view prefix : kDevicePlanePrefixes) {
    for (int i = 0; i < space.planes_size(); ++i) {
      if (std::string_view(space.planes(i).name()).substr(0, prefix.size()) == prefix)
        planes.push_back(i);
    }
    if (!planes.empty()) return planes;  // A trace never mixes GPU, TPU and custom devices.
  }
  if (selection == PlaneSelection::kDeviceElseHost) {
    for (int i = 0; i < space.planes_size(); ++i) {
      if (space.planes(i).name() == kHostPlaneName) planes.push_back(i);
    }
  }
  return planes;
}

// The stats of one event that the converter reads, from the event and then from its metadata:
// null where neither has one. They point into the event being read or into metadata_views.
struct EventStats {
  const StatView* op = nullptr;
  const StatView* module = nullptr;
  const StatView* program_id = nullptr;
  const StatView* scope_range_id = nullptr;
};

bool Has(const StatView& stat) { return stat.value_case() != XStat::VALUE_NOT_SET; }

}  // namespace

struct HostSpans::Impl {
  StringPool strings;
  std::vector<InstructionKey> instructions;
  std::unordered_map<InstructionKey, uint32_t, InstructionKeyHash> instruction_ids;
  std::vector<Span>
      spans;  // Sorted by (instruction, instance), one per instance once ExtractSpans returns.
  std::vector<std::string> planes_read;
  std::vector<std::string> planes_seen;

  bool Read(const LazyXSpace& space, PlaneSelection selection);
  bool AddPlane(const LazyXSpace& space, int plane_index);
  uint32_t InstructionId(const InstructionKey& key);
};

uint32_t HostSpans::Impl::InstructionId(const InstructionKey& key) {
  auto [it, inserted] =
      instruction_ids.try_emplace(key, static_cast<uint32_t>(instructions.size()));
  if (inserted) instructions.push_back(key);
  return it->second;
}

// The plane's lines come serialized, read through `space`. False if the fast reader refused some
// of their bytes (see xspace_wire.h); the spans are then incomplete.
bool HostSpans::Impl::AddPlane(const LazyXSpace& space, int plane_index) {
  const XPlane& plane = space.headers().planes(plane_index);
  IdMap<StatKind> kinds;
  bool any_kind = false;
  for (const auto& [id, metadata] : plane.stat_metadata()) {
    StatKind kind = KindOfStatName(metadata.name());
    if (kind != StatKind::kOther) {
      kinds.Insert(id, kind);
      any_kind = true;
    }
  }
  if (!any_kind) return space.CheckLines(plane_index);  // No hlo_op, hlo_module: no event counts.

  auto collect = [&kinds](const StatView& stat, EventStats* found) {
    if (!Has(stat)) return;
    const StatKind* kind = kinds.Find(stat.metadata_id());
    if (kind == nullptr) return;
    switch (*kind) {
      case StatKind::kHloOp:
        found->op = &stat;
        break;
      case StatKind::kHloModule:
        found->module = &stat;
        break;
      case StatKind::kProgramId:
        found->program_id = &stat;
        break;
      case StatKind::kScopeRangeId:
        found->scope_range_id = &stat;
        break;
      case StatKind::kOther:
        break;
    }
  };

  // The interned text of a module or op stat. Reference values (how the tracer stores names) are
  // resolved once per referenced stat metadata, strings are interned without a copy.
  IdMap<uint32_t> ref_text;
  auto text_id = [&](const StatView& stat) -> uint32_t {
    switch (stat.value_case()) {
      case XStat::kStrValue:
        return strings.Intern(stat.str_value());
      case XStat::kRefValue: {
        // A uint64 in the trace; XLA looks it up as an int64 key.
        const int64_t ref = static_cast<int64_t>(stat.ref_value());
        if (const uint32_t* id = ref_text.Find(ref)) return *id;
        auto it = plane.stat_metadata().find(ref);
        return ref_text.Insert(
            ref, strings.Intern(it == plane.stat_metadata().end() ? "" : it->second.name()));
      }
      default:
        return strings.Intern(NonStringStatText(stat));
    }
  };

  // Stats shared by all events of one metadata, collected once per metadata.
  std::deque<StatView> metadata_views;  // A deque never moves its elements: pointers stay valid.
  IdMap<EventStats> metadata_stats;
  auto stats_of_metadata = [&](int64_t metadata_id) -> const EventStats& {
    if (const EventStats* found = metadata_stats.Find(metadata_id)) return *found;
    EventStats found;
    auto metadata = plane.event_metadata().find(metadata_id);
    if (metadata != plane.event_metadata().end()) {
      for (const XStat& stat : metadata->second.stats()) {
        collect(metadata_views.emplace_back(stat), &found);
      }
    }
    return metadata_stats.Insert(metadata_id, found);
  };

  auto add_event = [&](const EventView& event, int64_t line_start_ps) {
    EventStats found;
    for (const StatView& stat : event.stats) collect(stat, &found);  // The event's own stats win.
    const EventStats& shared = stats_of_metadata(event.metadata_id);
    if (found.op == nullptr) found.op = shared.op;
    if (found.module == nullptr) found.module = shared.module;
    if (found.op == nullptr || found.module == nullptr) return;
    if (found.program_id == nullptr) found.program_id = shared.program_id;
    if (found.scope_range_id == nullptr) found.scope_range_id = shared.scope_range_id;

    const int64_t start_ps = line_start_ps + event.offset_ps;
    const InstructionKey key{text_id(*found.module), found.program_id != nullptr,
                             found.program_id != nullptr ? StatInt(*found.program_id) : 0,
                             text_id(*found.op)};
    spans.push_back({InstructionId(key),
                     found.scope_range_id != nullptr ? StatInt(*found.scope_range_id) : start_ps,
                     start_ps, start_ps + event.duration_ps});
  };
  auto is_async_ops = [](const LineHeader& header) {
    return (header.display_name.empty() ? header.name : header.display_name) == kAsyncOpsLineName;
  };

  // Each line is read in one pass, its events with the header fields that came before the first
  // of them. Protobuf writes `display_name` after the events, so when the whole header turns out
  // to skip the line or to start it at another time, the line's spans are dropped and, unless
  // skipped, read again.
  using LineUse = LazyXSpace::LineUse;
  return space.ReadLines(plane_index, [&](std::string_view line) {
    const size_t first_span = spans.size();
    bool any_event = false;
    bool skipped = false;      // As the header fields before the first event said.
    int64_t timestamp_ns = 0;  // Likewise.
    LineHeader header;
    const bool accepted =
        ReadLine(line, &header, [&](const LineHeader& so_far, const EventView& event) {
          if (!any_event) {
            any_event = true;
            skipped = is_async_ops(so_far);
            timestamp_ns = so_far.timestamp_ns;
          }
          if (!skipped) add_event(event, timestamp_ns * 1000);
        });
    if (!accepted) return LineUse::kRefused;
    if (!any_event || (skipped == is_async_ops(header) && timestamp_ns == header.timestamp_ns)) {
      return LineUse::kRead;
    }
    spans.resize(first_span);
    if (is_async_ops(header)) return LineUse::kRead;
    const int64_t line_start_ps = header.timestamp_ns * 1000;
    ForEachEvent(line, [&](const EventView& event) { add_event(event, line_start_ps); });
    return LineUse::kRead;
  });
}

HostSpans::HostSpans() : impl_(std::make_unique<Impl>()) {}
HostSpans::~HostSpans() = default;
HostSpans::HostSpans(HostSpans&&) noexcept = default;
HostSpans& HostSpans::operator=(HostSpans&&) noexcept = default;

size_t HostSpans::size() const { return impl_->spans.size(); }
const std::vector<std::string>& HostSpans::planes_read() const { return impl_->planes_read; }
const std::vector<std::string>& HostSpans::planes_seen() const { return impl_->planes_seen; }

HostCosts HostSpans::Resolve(const FingerprintMap& fingerprints) const {
  // The final name of each instruction.
  StringPool final_names;
  std::vector<uint32_t> name_of(impl_->instructions.size());
  for (size_t i = 0; i < impl_->instructions.size(); ++i) {
    const InstructionKey& key = impl_->instructions[i];
    const std::string& module = impl_->strings.Get(key.module);
    const std::string& op = impl_->strings.Get(key.op);
    // Without a program id XLA looks the bare module name up, which matches no "<name>(<id>)" key
    // unless the name itself looks like one; kept for exactness.
    auto fingerprint =
        fingerprints.find(key.has_program_id ? ModuleKey(module, key.program_id) : module);
    name_of[i] = final_names.Intern(
        fingerprint == fingerprints.end() ? op : fingerprint->second + "::" + op);
  }

  // XLA merges by (final name, instance): different instructions that get one name (modules
  // sharing a fingerprint) merge too. When every instruction has a name of its own, the spans are
  // already one per (name, instance) and are counted as they are.
  std::vector<CostSum> sums(final_names.size());
  auto count = [&sums](const Span& span, uint32_t name) {
    sums[name].sum_us += static_cast<double>(span.end_ps - span.start_ps) / 1e6;
    ++sums[name].count;
  };
  if (final_names.size() == impl_->instructions.size()) {
    for (const Span& span : impl_->spans) count(span, name_of[span.instruction]);
  } else {
    std::vector<Span> renamed = impl_->spans;
    for (Span& span : renamed) span.instruction = name_of[span.instruction];
    MergeFragments(&renamed, final_names.size());
    for (const Span& span : renamed) count(span, span.instruction);
  }
  HostCosts costs;
  for (uint32_t name = 0; name < sums.size(); ++name) {
    if (sums[name].count > 0) costs.emplace(final_names.Get(name), sums[name]);
  }
  return costs;
}

// Reads the spans of `space`; the lines it does not use are checked by `space` so that a damaged
// trace fails as in protobuf. False if the fast reader refused some bytes.
bool HostSpans::Impl::Read(const LazyXSpace& space, PlaneSelection selection) {
  const XSpace& headers = space.headers();
  for (const XPlane& plane : headers.planes()) planes_seen.push_back(plane.name());
  const std::vector<int> selected = SelectPlanes(headers, selection);
  for (int plane = 0; plane < headers.planes_size(); ++plane) {
    if (std::find(selected.begin(), selected.end(), plane) == selected.end()) {
      if (!space.CheckLines(plane)) return false;
      continue;
    }
    planes_read.push_back(headers.planes(plane).name());
    if (!AddPlane(space, plane)) return false;
  }
  return true;
}

HostSpans ExtractSpans(const LazyXSpace& space, PlaneSelection selection) {
  HostSpans result;
  if (!result.impl_->Read(space, selection)) {
    // Bytes that only protobuf reads exactly (or rejects): start again from its parse.
    result = HostSpans();
    if (!result.impl_->Read(space.Canonical(), selection)) {
      throw std::logic_error(
          "the converter refused protobuf's own serialization of a trace; please report this");
    }
  }
  // Fragments of one instance may lie on different lines and planes: merged once all are read.
  MergeFragments(&result.impl_->spans, result.impl_->instructions.size());
  result.impl_->spans.shrink_to_fit();
  return result;
}

}  // namespace pgle
