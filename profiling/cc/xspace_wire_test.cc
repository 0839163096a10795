#include "profiling/cc/xspace_wire.h"

#include <cstring>
#include <string>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "profiling/cc/errors.h"
#include "profiling/cc/xspace_builder.h"

namespace pgle {
namespace {

using tensorflow::profiler::XLine;
using tensorflow::profiler::XSpace;
using tensorflow::profiler::XStat;
using testing::PlaneBuilder;
using testing::Ref;

// --- Hand-written wire bytes, for what protobuf's serializer never writes. ---

std::string Varint(uint64_t value) {
  std::string out;
  while (value >= 0x80) {
    out.push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
  return out;
}
std::string Tag(uint32_t number, uint32_t wire_type) {
  return Varint((uint64_t{number} << 3) | wire_type);
}
std::string VarintField(uint32_t number, uint64_t value) { return Tag(number, 0) + Varint(value); }
std::string LenField(uint32_t number, const std::string& payload) {
  return Tag(number, 2) + Varint(payload.size()) + payload;
}
std::string Fixed64Field(uint32_t number, double value) {
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &value, 8);
  return Tag(number, 1) + bytes;
}
std::string Fixed32Field(uint32_t number, uint32_t value) {
  std::string bytes(4, '\0');
  std::memcpy(bytes.data(), &value, 4);
  return Tag(number, 5) + bytes;
}
std::string GroupField(uint32_t number, const std::string& inside) {
  return Tag(number, 3) + inside + Tag(number, 4);
}

// The serialized XSpace of one "/device:GPU:0" plane with the serialized lines `lines`.
std::string SpaceWithLines(const std::vector<std::string>& lines) {
  std::string plane = LenField(2, "/device:GPU:0");
  for (const std::string& line : lines) plane += LenField(3, line);
  return LenField(1, plane);
}

// Asserts that the fast reader reads the serialized XLine `bytes` exactly as protobuf parses it.
void ExpectDecodesAsProtobuf(std::string_view bytes) {
  XLine expected;
  ASSERT_TRUE(expected.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())));
  LineHeader header;
  ASSERT_TRUE(DecodeLineHeader(bytes, &header));
  EXPECT_EQ(header.name, expected.name());
  EXPECT_EQ(header.display_name, expected.display_name());
  EXPECT_EQ(header.timestamp_ns, expected.timestamp_ns());
  int index = 0;
  ASSERT_TRUE(ForEachEvent(bytes, [&](const EventView& event) {
    ASSERT_LT(index, expected.events_size());
    const auto& want = expected.events(index++);
    EXPECT_EQ(event.metadata_id, want.metadata_id());
    EXPECT_EQ(event.offset_ps, want.offset_ps());
    EXPECT_EQ(event.duration_ps, want.duration_ps());
    ASSERT_EQ(static_cast<int>(event.stats.size()), want.stats_size());
    for (int s = 0; s < want.stats_size(); ++s) {
      const StatView& got = event.stats[s];
      const XStat& stat = want.stats(s);
      EXPECT_EQ(got.metadata_id(), stat.metadata_id());
      ASSERT_EQ(got.value_case(), stat.value_case());
      switch (stat.value_case()) {
        case XStat::kDoubleValue:
          EXPECT_EQ(got.double_value(), stat.double_value());
          break;
        case XStat::kUint64Value:
          EXPECT_EQ(got.uint64_value(), stat.uint64_value());
          break;
        case XStat::kInt64Value:
          EXPECT_EQ(got.int64_value(), stat.int64_value());
          break;
        case XStat::kRefValue:
          EXPECT_EQ(got.ref_value(), stat.ref_value());
          break;
        case XStat::kStrValue:
          EXPECT_EQ(got.str_value(), stat.str_value());
          break;
        case XStat::kBytesValue:
          EXPECT_EQ(got.str_value(), stat.bytes_value());
          break;
        case XStat::VALUE_NOT_SET:
          break;
      }
    }
  }));
  EXPECT_EQ(index, expected.events_size());
  // ReadLine: the same events and, once the line is read, the same header, in one pass.
  LineHeader read_header;
  int read_events = 0;
  ASSERT_TRUE(ReadLine(bytes, &read_header, [&](const LineHeader&, const EventView& event) {
    ASSERT_LT(read_events, expected.events_size());
    EXPECT_EQ(event.offset_ps, expected.events(read_events).offset_ps());
    EXPECT_EQ(event.stats.size(), expected.events(read_events++).stats_size());
  }));
  EXPECT_EQ(read_events, expected.events_size());
  EXPECT_EQ(read_header.name, expected.name());
  EXPECT_EQ(read_header.display_name, expected.display_name());
  EXPECT_EQ(read_header.timestamp_ns, expected.timestamp_ns());
}

TEST(LazyXSpaceTest, HeadersHoldEverythingButTheLines) {
  XSpace space;
  space.add_hostnames("host-a");
  for (const char* name : {"/host:metadata", "/device:GPU:0"}) {
    auto* plane = space.add_planes();
    plane->set_name(name);
    PlaneBuilder builder(plane);
    builder.AddMetadataStats("k", {{"hlo_op", Ref{"dot.1"}}});
    builder.AddEvent(builder.AddLine("Stream #1", 7), "k", 100, 5, {{"program_id", int64_t{3}}});
    builder.AddEvent(builder.AddLine("Stream #2", 9), "k", 200, 6);
  }
  LazyXSpace lazy = LazyXSpace::Parse(space.SerializeAsString(), "test");
  XSpace without_lines = space;
  for (auto& plane : *without_lines.mutable_planes()) plane.clear_lines();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(lazy.headers(), without_lines))
      << lazy.headers().DebugString();
  for (int p = 0; p < space.planes_size(); ++p) {
    std::vector<std::string_view> lines = lazy.lines(p);
    ASSERT_EQ(static_cast<int>(lines.size()), space.planes(p).lines_size());
    for (size_t l = 0; l < lines.size(); ++l) {
      EXPECT_EQ(lines[l], space.planes(p).lines(static_cast<int>(l)).SerializeAsString());
      ExpectDecodesAsProtobuf(lines[l]);
    }
  }
}

TEST(DecodeTest, EveryStatValueTypeAsProtobuf) {
  XSpace space;
  PlaneBuilder gpu(space.add_planes());
  auto* line = gpu.AddLine("Stream #1", 123456789, "shown");
  gpu.AddEvent(
      line, "a", -5, int64_t{1} << 40,
      {{"s", std::string("text")}, {"r", Ref{"name"}}, {"i", int64_t{-7}}, {"u", ~uint64_t{0}}});
  auto* event = gpu.AddEvent(line, "b", 1, 2);
  event->add_stats()->set_double_value(2.5);
  event->add_stats()->set_bytes_value(std::string("\xff\x00\x01", 3));  // Bytes need not be UTF-8.
  event->add_stats()->set_metadata_id(9);                               // No value.
  line->add_events()->set_num_occurrences(4);
  ExpectDecodesAsProtobuf(line->SerializeAsString());
}

TEST(DecodeTest, WireFormsProtobufNeverWritesDecodeAsProtobufParsesThem) {
  const std::string stat = VarintField(4, 11) +
                           LenField(5, "later_wins") +              // oneof: the string wins
                           VarintField(1, 3) + VarintField(1, 8) +  // last metadata_id wins
                           LenField(3, "x") +                       // uint64 field, wrong wire type
                           Fixed32Field(99, 1) + Fixed64Field(98, 1.0);  // unknown fields
  const std::string event =
      LenField(4, stat) + VarintField(2, 40) + VarintField(5, 2) +  // oneof: offset cleared
      VarintField(3, 9) + LenField(1, "wrong") + VarintField(1, 6) + Varint(uint64_t{3} << 3) +
      Varint(~uint64_t{0}) + VarintField(3, 10) + VarintField(1000, 5) +
      LenField(4, VarintField(1, 2) + Fixed64Field(2, -1.5));
  const std::string event2 =
      VarintField(2, 40) + LenField(4, VarintField(7, 12) + VarintField(3, 13));
  // Events before the timestamp, the name twice, an unknown length-delimited field.
  const std::string line = LenField(4, event) + VarintField(3, 77) + LenField(2, "first") +
                           LenField(2, "second") + LenField(50, "unknown") + LenField(4, event2) +
                           LenField(4, "");
  ExpectDecodesAsProtobuf(line);
  EventView decoded;
  ASSERT_TRUE(DecodeEvent(event, &decoded));
  EXPECT_EQ(decoded.offset_ps, 0);
  EXPECT_EQ(decoded.duration_ps, 10);
  EXPECT_EQ(decoded.stats[0].str_value(), "later_wins");
}

TEST(DecodeTest, VarintsOfEveryLengthAsProtobuf) {
  // Varints of 1 to 10 bytes, at the end of a message and followed by 8 bytes or more (the reader
  // decodes 8 bytes at a time where it can), in event fields and in short integer stats.
  std::vector<uint64_t> values = {0, 1, 127, ~uint64_t{0}, uint64_t{1} << 63};
  for (int bits = 7; bits < 64; bits += 7) {
    values.push_back((uint64_t{1} << bits) - 1);
    values.push_back(uint64_t{1} << bits);
    values.push_back((uint64_t{0x9e3779b97f4a7c15} >> (64 - bits)) | 1);
  }
  std::string line;
  for (uint64_t value : values) {
    const std::string stats = LenField(4, VarintField(1, 5) + VarintField(7, value)) +
                              LenField(4, VarintField(1, 200) + VarintField(4, value)) +
                              LenField(4, VarintField(3, value) + VarintField(1, 6));
    line += LenField(4, VarintField(3, value) + stats + VarintField(2, value));
    line += LenField(4, stats + VarintField(2, value) + VarintField(3, value));
  }
  line += VarintField(3, ~uint64_t{0} >> 1);
  ExpectDecodesAsProtobuf(line);
  // Bits past 64 in a 10-byte varint drop, as in protobuf.
  ExpectDecodesAsProtobuf(LenField(4, Tag(2, 0) + std::string(9, '\xff') + "\x7f"));
}

TEST(DecodeTest, RejectsWhatItLeavesToProtobuf) {
  EventView event;
  EXPECT_FALSE(DecodeEvent(GroupField(20, VarintField(1, 1)), &event));  // A group.
  EXPECT_FALSE(DecodeEvent(VarintField(1, 1).substr(0, 1), &event));     // Truncated.
  EXPECT_FALSE(DecodeEvent(LenField(4, "\x0a\x05zz"), &event));          // Stat overruns.
  EXPECT_FALSE(DecodeEvent(Tag(1, 6) + "x", &event));                    // Wire type 6.
  EXPECT_FALSE(DecodeEvent(Varint(0) + Varint(1), &event));              // Field number 0.
  EXPECT_FALSE(
      DecodeEvent(Tag(1, 0) + std::string(10, '\x80') + "\x01", &event));  // 11-byte varint.
  LineHeader header;
  EXPECT_TRUE(DecodeLineHeader(LenField(2, "\xc3\xa9t\xc3\xa9"), &header));
  EXPECT_FALSE(DecodeLineHeader(LenField(2, "bad \xc3"), &header));  // Invalid UTF-8.
}

TEST(LazyXSpaceTest, WhatTheFastReaderRefusesProtobufReadsInCanonical) {
  // A group inside an event: protobuf keeps it as an unknown field; the fast reader refuses it.
  const std::string event =
      VarintField(1, 4) + GroupField(20, VarintField(1, 1)) + VarintField(3, 6);
  const std::string line = VarintField(3, 2) + LenField(4, event);
  LazyXSpace lazy = LazyXSpace::Parse(SpaceWithLines({line}), "test");
  ASSERT_EQ(lazy.lines(0).size(), 1u);
  EXPECT_FALSE(lazy.CheckLines(0));

  LazyXSpace canonical = lazy.Canonical();
  ASSERT_EQ(canonical.headers().planes_size(), 1);
  EXPECT_EQ(canonical.headers().planes(0).name(), "/device:GPU:0");
  ASSERT_EQ(canonical.lines(0).size(), 1u);
  int events = 0;
  ASSERT_TRUE(ForEachEvent(canonical.lines(0)[0], [&](const EventView& e) {
    EXPECT_EQ(e.metadata_id, 4);
    EXPECT_EQ(e.duration_ps, 6);
    ++events;
  }));
  EXPECT_EQ(events, 1);
}

TEST(LazyXSpaceTest, BytesProtobufRejectsAreAFormatError) {
  const std::string valid =
      SpaceWithLines({LenField(4, VarintField(1, 4) + LenField(4, LenField(5, "op")))});
  EXPECT_NO_THROW(LazyXSpace::Parse(valid, "test").Canonical());
  EXPECT_THROW(LazyXSpace::Parse(valid.substr(0, valid.size() - 1), "test"), TraceFormatError);
  // An unmatched end-group tag.
  EXPECT_THROW(LazyXSpace::Parse(valid + Tag(7, 4), "test"), TraceFormatError);
  // Invalid UTF-8 in a string stat, deep inside a line: the line is refused when read, and
  // protobuf refuses the whole trace.
  LazyXSpace bad = LazyXSpace::Parse(
      SpaceWithLines({LenField(4, LenField(4, LenField(5, "op\xff")))}), "bad trace");
  EXPECT_FALSE(bad.CheckLines(0));
  try {
    bad.Canonical();
    FAIL() << "invalid UTF-8 parsed";
  } catch (const TraceFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("bad trace"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pgle
