#include "profiling/cc/xspace_wire.h"

#include <climits>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "google/protobuf/stubs/common.h"
#include "profiling/cc/errors.h"

namespace pgle {
namespace {

using ::tensorflow::profiler::XStat;
using wire::Field;

// Field numbers, from xplane.proto.
constexpr uint32_t kSpacePlanes = 1;
constexpr uint32_t kPlaneLines = 3;
using wire::kLineDisplayName;
using wire::kLineName;
using wire::kLineTimestampNs;
using wire::ValidUtf8;
constexpr uint32_t kEventMetadataId = 1, kEventOffsetPs = 2, kEventDurationPs = 3, kEventStats = 4,
                   kEventNumOccurrences = 5;
constexpr uint32_t kStatMetadataId = 1, kStatDouble = 2, kStatUint64 = 3, kStatInt64 = 4,
                   kStatStr = 5, kStatBytes = 6, kStatRef = 7;

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void AppendLengthDelimited(uint32_t number, std::string_view payload, std::string* out) {
  AppendVarint((uint64_t{number} << 3) | wire::kLengthDelimited, out);
  AppendVarint(payload.size(), out);
  out->append(payload);
}

}  // namespace

StatView::StatView(const XStat& stat)
    : metadata_id_(stat.metadata_id()), value_case_(stat.value_case()) {
  switch (value_case_) {
    case XStat::kDoubleValue: {
      const double value = stat.double_value();
      std::memcpy(&bits_, &value, sizeof(value));
      break;
    }
    case XStat::kUint64Value:
      bits_ = stat.uint64_value();
      break;
    case XStat::kInt64Value:
      bits_ = static_cast<uint64_t>(stat.int64_value());
      break;
    case XStat::kRefValue:
      bits_ = stat.ref_value();
      break;
    case XStat::kStrValue:
      text_ = stat.str_value();
      break;
    case XStat::kBytesValue:
      text_ = stat.bytes_value();
      break;
    case XStat::VALUE_NOT_SET:
      break;
  }
}

double StatView::double_value() const {
  double value;
  std::memcpy(&value, &bits_, sizeof(value));
  return value;
}

namespace {

// A stat written as nearly every stat of a trace is: its metadata_id (one byte) and then one
// integer value (tag and varint), nothing else. False for any other bytes, left to DecodeStat's
// general loop.
[[gnu::always_inline]] inline bool DecodeShortIntegerStat(std::string_view bytes,
                                                          StatView::ValueCase* value_case,
                                                          int64_t* metadata_id, uint64_t* value) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t size = bytes.size();
  constexpr uint8_t kMetadataIdTag = (kStatMetadataId << 3) | wire::kVarint;
  if (size < 4 || size > 13 || p[0] != kMetadataIdTag || p[1] >= 0x80) return false;
  switch (p[2]) {
    case (kStatUint64 << 3) | wire::kVarint:
      *value_case = XStat::kUint64Value;
      break;
    case (kStatInt64 << 3) | wire::kVarint:
      *value_case = XStat::kInt64Value;
      break;
    case (kStatRef << 3) | wire::kVarint:
      *value_case = XStat::kRefValue;
      break;
    default:
      return false;
  }
  // The varint must end at the last byte (at most 10 bytes; bits past 64 drop, as in protobuf).
  uint64_t result = 0;
  for (size_t i = 3; i < size; ++i) {
    const uint8_t byte = p[i];
    result |= static_cast<uint64_t>(byte & 0x7f) << (7 * (i - 3));
    if (byte < 0x80) {
      if (i + 1 != size) return false;
      *metadata_id = p[1];
      *value = result;
      return true;
    }
  }
  return false;
}

}  // namespace

bool DecodeStat(std::string_view bytes, StatView* stat) {
  if (DecodeShortIntegerStat(bytes, &stat->value_case_, &stat->metadata_id_, &stat->bits_)) {
    stat->text_ = std::string_view();
    return true;
  }
  *stat = StatView();
  wire::Reader reader(bytes);
  Field field;
  // Each value field replaces the one before it (a oneof): the last one wins.
  auto set = [&](XStat::ValueCase value_case, uint64_t bits, std::string_view text) {
    stat->value_case_ = value_case;
    stat->bits_ = bits;
    stat->text_ = text;
  };
  while (!reader.done()) {
    if (!reader.Next(&field)) return false;
    const bool varint = field.wire_type == wire::kVarint;
    const bool bytes_field = field.wire_type == wire::kLengthDelimited;
    switch (field.number) {
      case kStatMetadataId:
        if (varint) stat->metadata_id_ = static_cast<int64_t>(field.value);
        break;
      case kStatDouble:
        if (field.wire_type == wire::kFixed64) set(XStat::kDoubleValue, field.value, {});
        break;
      case kStatUint64:
        if (varint) set(XStat::kUint64Value, field.value, {});
        break;
      case kStatInt64:
        if (varint) set(XStat::kInt64Value, field.value, {});
        break;
      case kStatRef:
        if (varint) set(XStat::kRefValue, field.value, {});
        break;
      case kStatStr:
        if (bytes_field) {
          if (!ValidUtf8(field.bytes)) return false;
          set(XStat::kStrValue, 0, field.bytes);
        }
        break;
      case kStatBytes:
        if (bytes_field) set(XStat::kBytesValue, 0, field.bytes);
        break;
      default:
        break;  // Unknown field: skipped, as protobuf does (it keeps it aside).
    }
  }
  return true;
}

bool DecodeEvent(std::string_view bytes, EventView* event) {
  event->metadata_id = 0;
  event->offset_ps = 0;
  event->duration_ps = 0;
  event->stats.clear();
  wire::Reader reader(bytes);
  Field field;
  while (!reader.done()) {
    if (!reader.Next(&field)) return false;
    if (field.number == kEventStats) {
      if (field.wire_type != wire::kLengthDelimited) continue;
      StatView& stat = event->stats.emplace_back();
      if (DecodeShortIntegerStat(field.bytes, &stat.value_case_, &stat.metadata_id_, &stat.bits_))
        continue;  // The common case, inline; DecodeStat takes the rest.
      if (!DecodeStat(field.bytes, &stat)) return false;
      continue;
    }
    if (field.wire_type != wire::kVarint) continue;
    const int64_t value = static_cast<int64_t>(field.value);
    switch (field.number) {
      case kEventMetadataId:
        event->metadata_id = value;
        break;
      case kEventOffsetPs:
        event->offset_ps = value;
        break;
      case kEventNumOccurrences:
        event->offset_ps = 0;
        break;  // Same oneof: clears offset_ps.
      case kEventDurationPs:
        event->duration_ps = value;
        break;
      default:
        break;
    }
  }
  return true;
}

bool DecodeLineHeader(std::string_view bytes, LineHeader* header) {
  *header = LineHeader();
  wire::Reader reader(bytes);
  Field field;
  while (!reader.done()) {
    if (!reader.Next(&field)) return false;
    if (field.number == kLineTimestampNs && field.wire_type == wire::kVarint) {
      header->timestamp_ns = static_cast<int64_t>(field.value);
    } else if ((field.number == kLineName || field.number == kLineDisplayName) &&
               field.wire_type == wire::kLengthDelimited) {
      if (!ValidUtf8(field.bytes)) return false;
      (field.number == kLineName ? header->name : header->display_name) = field.bytes;
    }
  }
  return true;
}

namespace wire {

bool ValidUtf8(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      return google::protobuf::internal::IsStructurallyValidUTF8(s.data(),
                                                                 static_cast<int>(s.size()));
    }
  }
  return true;
}

bool CheckLine(std::string_view bytes) {
  LineHeader header;
  return DecodeLineHeader(bytes, &header) && ForEachEvent(bytes, [](const EventView&) {});
}

}  // namespace wire

bool LazyXSpace::CheckLines(int plane) const {
  const std::vector<Range>& ranges = lines_[plane];
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (!wire::CheckLine(line(ranges, i))) return false;
  }
  return true;
}

std::vector<std::string_view> LazyXSpace::lines(int plane) const {
  std::vector<std::string_view> views;
  views.reserve(lines_[plane].size());
  for (const Range& range : lines_[plane])
    views.push_back(bytes_.bytes.substr(range.offset, range.size));
  return views;
}

bool LazyXSpace::Split() {
  headers_.Clear();
  lines_.clear();
  // The trace without lines, re-serialized for protobuf: every other field, in order.
  std::string header;
  wire::Reader space(bytes_.bytes);
  Field field;
  while (!space.done()) {
    const char* start = space.position();
    if (!space.Next(&field)) return false;
    if (field.number != kSpacePlanes || field.wire_type != wire::kLengthDelimited) {
      header.append(start, space.position());
      continue;
    }
    std::string plane_header;
    std::vector<Range> plane_lines;
    wire::Reader plane(field.bytes);
    Field plane_field;
    while (!plane.done()) {
      const char* plane_start = plane.position();
      if (!plane.Next(&plane_field)) return false;
      if (plane_field.number == kPlaneLines && plane_field.wire_type == wire::kLengthDelimited) {
        const size_t offset = static_cast<size_t>(plane_field.bytes.data() - bytes_.bytes.data());
        plane_lines.push_back({offset, plane_field.bytes.size()});
      } else {
        plane_header.append(plane_start, plane.position());
      }
    }
    AppendLengthDelimited(kSpacePlanes, plane_header, &header);
    lines_.push_back(std::move(plane_lines));
  }
  return headers_.ParseFromString(header) &&
         static_cast<size_t>(headers_.planes_size()) == lines_.size();
}

LazyXSpace LazyXSpace::Parse(SharedBytes bytes, const std::string& what) {
  if (bytes.bytes.size() > static_cast<size_t>(INT_MAX)) {
    throw TraceFormatError(what + " is " + std::to_string(bytes.bytes.size()) +
                           " bytes; protobuf cannot parse messages over 2 GiB. Trace fewer steps.");
  }
  LazyXSpace lazy;
  lazy.what_ = what;
  lazy.bytes_ = std::move(bytes);
  return lazy.Split() ? std::move(lazy) : lazy.Canonical();
}

LazyXSpace LazyXSpace::Parse(std::string bytes, const std::string& what) {
  auto owner = std::make_shared<const std::string>(std::move(bytes));
  const std::string_view view = *owner;
  return Parse(SharedBytes{std::move(owner), view}, what);
}

LazyXSpace LazyXSpace::Canonical() const {
  tensorflow::profiler::XSpace full;
  if (!full.ParseFromArray(bytes_.bytes.data(), static_cast<int>(bytes_.bytes.size()))) {
    throw TraceFormatError(what_ + " is not a serialized XSpace (" +
                           std::to_string(bytes_.bytes.size()) +
                           " bytes that protobuf could not parse): the file is truncated (was the "
                           "trace still being written?) or is not a jax.profiler *.xplane.pb. "
                           "Capture the trace again.");
  }
  // Unknown fields are all that the fast reader could still refuse (groups among them).
  full.DiscardUnknownFields();
  LazyXSpace canonical;
  canonical.what_ = what_;
  auto owner = std::make_shared<const std::string>(full.SerializeAsString());
  canonical.bytes_ = {owner, *owner};
  if (!canonical.Split()) {
    throw std::logic_error("the converter could not split protobuf's own serialization of " +
                           what_ + "; please report this with the trace");
  }
  return canonical;
}

}  // namespace pgle
