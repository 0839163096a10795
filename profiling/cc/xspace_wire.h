#ifndef PROFILING_CC_XSPACE_WIRE_H_
#define PROFILING_CC_XSPACE_WIRE_H_

// A serialized XSpace read without building a protobuf message per event.
//
// Nearly all of a trace's bytes are its lines' events and their stats: millions of tiny messages.
// Parsing them into protobuf objects costs ~7x the file size in memory and most of a conversion's
// time in malloc and free. LazyXSpace parses everything but the lines with protobuf (plane names,
// metadata maps, the HloProtos of /host:metadata) and keeps the lines as bytes, which
// DecodeLineHeader and ForEachEvent read field by field into small views.
//
// Exactness: the fast reader accepts only what it decodes exactly as protobuf would (any field
// order, repeated scalars where the last wins, oneofs where the last member wins, unknown fields
// and known fields of another wire type skipped, strings checked for UTF-8 with protobuf's own
// check). Anything else (groups, malformed bytes) makes a decoder return false; the reader then
// takes LazyXSpace::Canonical(): protobuf's own parse of the whole trace, which either rejects it
// (TraceFormatError) or gives canonical bytes that the fast reader always accepts. A trace is
// read in one pass: its lines are checked as they are decoded, and LazyXSpace's line readers
// (ReadLines, CheckLines) check the lines nobody decodes, so a damaged trace fails as in protobuf
// whichever lines a reader uses.

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "profiling/cc/xplane.pb.h"

namespace pgle {

struct EventView;

// A stat as decoded from the wire; the accessors mirror tensorflow::profiler::XStat.
class StatView {
 public:
  using ValueCase = tensorflow::profiler::XStat::ValueCase;

  StatView() = default;
  explicit StatView(const tensorflow::profiler::XStat& stat);

  int64_t metadata_id() const { return metadata_id_; }
  ValueCase value_case() const { return value_case_; }
  double double_value() const;
  uint64_t uint64_value() const { return bits_; }
  int64_t int64_value() const { return static_cast<int64_t>(bits_); }
  uint64_t ref_value() const { return bits_; }
  std::string_view str_value() const { return text_; }  // Also the bytes value.

 private:
  friend bool DecodeStat(std::string_view bytes, StatView* stat);
  friend bool DecodeEvent(std::string_view bytes, EventView* event);
  int64_t metadata_id_ = 0;
  ValueCase value_case_ = tensorflow::profiler::XStat::VALUE_NOT_SET;
  uint64_t bits_ = 0;      // The integer value, or the double's bits.
  std::string_view text_;  // The string or bytes value.
};

// An event as decoded from the wire. `stats` views the serialized trace.
struct EventView {
  int64_t metadata_id = 0;
  int64_t offset_ps = 0;  // 0 when the oneof holds num_occurrences instead, as in protobuf.
  int64_t duration_ps = 0;
  std::vector<StatView> stats;
};

struct LineHeader {
  std::string_view name;
  std::string_view display_name;
  int64_t timestamp_ns = 0;
};

// Decoders of one serialized message each; false for bytes the fast reader does not accept.
bool DecodeStat(std::string_view bytes, StatView* stat);
bool DecodeEvent(std::string_view bytes, EventView* event);  // Reuses event->stats' capacity.
bool DecodeLineHeader(std::string_view bytes, LineHeader* header);

// Decodes each event of the serialized line `bytes` into one EventView and calls
// `on_event(const EventView&)` with it. False (after the events before it) at a rejected event.
template <typename OnEvent>
bool ForEachEvent(std::string_view bytes, OnEvent&& on_event);

// The whole serialized line `bytes` in one pass: its header fields into `*header` as they come,
// and each event into an EventView, calling `on_event(const LineHeader& so_far, const EventView&)`
// with the header fields met before that event (protobuf itself writes `display_name` after the
// events). False (after the events before it) at rejected bytes.
template <typename OnEvent>
bool ReadLine(std::string_view bytes, LineHeader* header, OnEvent&& on_event);

// Bytes that stay where they are while `owner` lives: a std::string, or a file mapped into memory.
struct SharedBytes {
  std::shared_ptr<const void> owner;
  std::string_view bytes;
};

// One host's trace: planes without their lines, and the lines as bytes (not yet checked).
class LazyXSpace {
 public:
  // Splits `bytes` into planes and lines; parses all but the lines. Throws TraceFormatError
  // (naming `what`) for bytes that protobuf cannot parse as an XSpace, unless the damage is
  // inside a line: that shows when the line is read.
  static LazyXSpace Parse(SharedBytes bytes, const std::string& what);
  static LazyXSpace Parse(std::string bytes, const std::string& what);

  // The same trace as protobuf parses it, re-serialized without unknown fields: every decoder
  // accepts all of its lines. For traces in which a decoder refused something. Throws
  // TraceFormatError if protobuf cannot parse the trace.
  LazyXSpace Canonical() const;

  // The trace with every plane's `lines` left empty.
  const tensorflow::profiler::XSpace& headers() const { return headers_; }
  // The serialized lines of headers().planes(plane), in trace order, not yet checked.
  std::vector<std::string_view> lines(int plane) const;

  // What a ReadLines callback did with the line it was given.
  enum class LineUse {
    kRead,     // Decoded it with ReadLine (or DecodeLineHeader and ForEachEvent): accepted.
    kRefused,  // A decoder returned false.
    kSkipped,  // Did not read it: ReadLines checks its events instead.
  };
  // Hands each serialized line of headers().planes(plane), in trace order, to
  // `on_line(std::string_view line) -> LineUse` (which decodes it, header and events, with
  // ReadLine). False if a line was refused: the caller starts again from Canonical().
  template <typename OnLine>
  bool ReadLines(int plane, OnLine&& on_line) const;
  // Checks every line of a plane that is not read. False if one is refused.
  bool CheckLines(int plane) const;

 private:
  struct Range {
    size_t offset;
    size_t size;
  };
  // Fills this from `bytes_` with the fast reader; false if it does not accept them.
  bool Split();
  std::string_view line(const std::vector<Range>& ranges, size_t i) const {
    return bytes_.bytes.substr(ranges[i].offset, ranges[i].size);
  }

  std::string what_;  // For messages.
  SharedBytes bytes_;
  tensorflow::profiler::XSpace headers_;
  std::vector<std::vector<Range>> lines_;  // By plane: where its lines are in bytes_.
};

// --- Implementation details of ForEachEvent. ---

namespace wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// One field of a serialized message.
struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  uint64_t value = 0;      // Varint and fixed values.
  std::string_view bytes;  // Length-delimited payload.
};

// Reads the fields of one serialized message in order. Forced inline (GCC declines otherwise, and
// it runs for every field of millions of events: ~15% of a conversion).
class Reader {
 public:
  explicit Reader(std::string_view bytes) : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}
  bool done() const { return p_ == end_; }
  const char* position() const { return p_; }

  // The next field; false (for good) at malformed bytes, groups and wire types protobuf rejects.
  [[gnu::always_inline]] bool Next(Field* field) {
    uint64_t tag;
    // A tag is a uint32 of at most 5 bytes; field number 0 is invalid.
    if (!ReadVarint(&tag, 5) || tag > UINT32_MAX || (tag >> 3) == 0) return false;
    field->number = static_cast<uint32_t>(tag >> 3);
    field->wire_type = static_cast<uint32_t>(tag & 7);
    switch (field->wire_type) {
      case kVarint:
        return ReadVarint(&field->value, 10);
      case kFixed64:
      case kFixed32: {
        const size_t size = field->wire_type == kFixed64 ? 8 : 4;
        if (static_cast<size_t>(end_ - p_) < size) return false;
        field->value = 0;
        std::memcpy(&field->value, p_, size);  // Little-endian on every platform this builds for.
        p_ += size;
        return true;
      }
      case kLengthDelimited: {
        uint64_t size;
        if (!ReadVarint(&size, 5) || size > static_cast<uint64_t>(end_ - p_)) return false;
        field->bytes = std::string_view(p_, static_cast<size_t>(size));
        p_ += size;
        return true;
      }
      default:
        return false;  // Groups (3, 4) and the invalid 6 and 7: left to protobuf.
    }
  }

 private:
  // At most `max_bytes` bytes (10 for 64 bits; bits past 64 drop, as in protobuf).
  [[gnu::always_inline]] bool ReadVarint(uint64_t* value, int max_bytes) {
    if (p_ != end_ && static_cast<uint8_t>(*p_) < 0x80) {  // Most tags and values: one byte.
      *value = static_cast<uint8_t>(*p_++);
      return true;
    }
    if (end_ - p_ >= 8) {  // Times and durations in ps: several bytes, decoded 8 at a time.
      // Little-endian, as above.
      uint64_t word;
      std::memcpy(&word, p_, 8);
      const uint64_t stops = ~word & 0x8080808080808080ull;  // A clear top bit ends the varint.
      const int size = stops == 0 ? 9 : (__builtin_ctzll(stops) + 1) / 8;
      if (size <= 8 && size <= max_bytes) {
        uint64_t x = size == 8 ? word : word & ((uint64_t{1} << (8 * size)) - 1);
        x &= 0x7f7f7f7f7f7f7f7full;  // Drop the continuation bits, then close the gaps.
        x = ((x & 0x7f007f007f007f00ull) >> 1) | (x & 0x007f007f007f007full);
        x = ((x & 0x3fff00003fff0000ull) >> 2) | (x & 0x00003fff00003fffull);
        x = ((x & 0x0fffffff00000000ull) >> 4) | (x & 0x000000000fffffffull);
        *value = x;
        p_ += size;
        return true;
      }
    }
    uint64_t result = 0;
    for (int i = 0; i < max_bytes && p_ != end_; ++i) {
      const uint8_t byte = static_cast<uint8_t>(*p_++);
      result |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
      if (byte < 0x80) {
        *value = result;
        return true;
      }
    }
    return false;  // Truncated, or longer than protobuf reads.
  }

  const char* p_;
  const char* end_;
};

// Whether the fast reader accepts the whole serialized line `bytes`, events and stats included.
bool CheckLine(std::string_view bytes);

// Header field numbers of XLine, from xplane.proto.
constexpr uint32_t kLineName = 2, kLineTimestampNs = 3, kLineEvents = 4, kLineDisplayName = 11;

// Protobuf rejects proto3 `string` fields that are not UTF-8 when parsing; so do we.
bool ValidUtf8(std::string_view s);

}  // namespace wire

template <typename OnEvent>
bool ForEachEvent(std::string_view bytes, OnEvent&& on_event) {
  constexpr uint32_t kEvents = 4;  // XLine.events
  EventView event;
  wire::Reader reader(bytes);
  wire::Field field;
  while (!reader.done()) {
    if (!reader.Next(&field)) return false;
    if (field.number != kEvents || field.wire_type != wire::kLengthDelimited) continue;
    if (!DecodeEvent(field.bytes, &event)) return false;
    on_event(static_cast<const EventView&>(event));
  }
  return true;
}

template <typename OnEvent>
bool ReadLine(std::string_view bytes, LineHeader* header, OnEvent&& on_event) {
  *header = LineHeader();
  EventView event;
  wire::Reader reader(bytes);
  wire::Field field;
  while (!reader.done()) {
    if (!reader.Next(&field)) return false;
    switch (field.number) {
      case wire::kLineEvents:
        if (field.wire_type != wire::kLengthDelimited) break;
        if (!DecodeEvent(field.bytes, &event)) return false;
        on_event(static_cast<const LineHeader&>(*header), static_cast<const EventView&>(event));
        break;
      case wire::kLineTimestampNs:
        if (field.wire_type == wire::kVarint)
          header->timestamp_ns = static_cast<int64_t>(field.value);
        break;
      case wire::kLineName:
      case wire::kLineDisplayName:
        if (field.wire_type != wire::kLengthDelimited) break;
        if (!wire::ValidUtf8(field.bytes)) return false;
        (field.number == wire::kLineName ? header->name : header->display_name) = field.bytes;
        break;
      default:
        break;
    }
  }
  return true;
}

template <typename OnLine>
bool LazyXSpace::ReadLines(int plane, OnLine&& on_line) const {
  const std::vector<Range>& ranges = lines_[plane];
  for (size_t i = 0; i < ranges.size(); ++i) {
    const std::string_view bytes = line(ranges, i);
    switch (on_line(bytes)) {
      case LineUse::kRead:
        break;
      case LineUse::kRefused:
        return false;
      case LineUse::kSkipped:
        if (!wire::CheckLine(bytes)) return false;
        break;
    }
  }
  return true;
}

}  // namespace pgle

#endif  // PROFILING_CC_XSPACE_WIRE_H_
