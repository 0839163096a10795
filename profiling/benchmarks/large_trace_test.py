"""large_trace.grow: the grown trace is valid, as large as asked, and converts to the same profile."""

from absl.testing import absltest
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from profiling import conversion
from profiling.benchmarks import large_trace

_OP, _MODULE, _SCOPE = 1, 2, 3  # Stat metadata ids.


def _space(scope_range_id: bool = False, plane_name: str = "/device:GPU:0") -> bytes:
  """Two streams; `fusion` runs twice (10 us and 30 us: mean 20), `dot` once (5 us)."""
  space = xplane_pb2.XSpace()
  space.planes.add(name="/host:metadata")
  plane = space.planes.add(name=plane_name)
  for stat_id, name in [(_OP, "hlo_op"), (_MODULE, "hlo_module")] + [
    (_SCOPE, "scope_range_id")
  ] * scope_range_id:
    plane.stat_metadata[stat_id].CopyFrom(xplane_pb2.XStatMetadata(id=stat_id, name=name))
  for ref_id, name in [(10, "fusion"), (11, "dot"), (12, "jit_step")]:
    plane.stat_metadata[ref_id].CopyFrom(xplane_pb2.XStatMetadata(id=ref_id, name=name))
  plane.event_metadata[1].CopyFrom(xplane_pb2.XEventMetadata(id=1, name="kernel"))

  def add(line, offset_us, duration_us, op_ref):
    event = line.events.add(
      metadata_id=1, offset_ps=offset_us * 10**6, duration_ps=duration_us * 10**6
    )
    event.stats.add(metadata_id=_OP, ref_value=op_ref)
    event.stats.add(metadata_id=_MODULE, ref_value=12)

  stream1 = plane.lines.add(id=1, name="stream 1", timestamp_ns=1000)
  add(stream1, 0, 10, 10)
  add(stream1, 50, 30, 10)
  stream2 = plane.lines.add(id=2, name="stream 2", timestamp_ns=2000)
  add(stream2, 3, 5, 11)
  stream2.events.add(metadata_id=1, offset_ps=9 * 10**6, duration_ps=10**6)  # Not an op: no stats.
  space.hostnames.append("host0")
  return space.SerializeToString()


def _costs(data: bytes) -> dict[str, float]:
  return {e.name: e.cost_us for e in conversion.convert_xspaces([data]).entries}


class GrowTest(absltest.TestCase):
  def test_grows_to_the_size_with_whole_copies(self):
    original = _space()
    grown = large_trace.grow(original, 20_000)
    self.assertGreaterEqual(len(grown.data), 20_000)
    self.assertLess(len(grown.data), 22_000)
    self.assertEqual(grown.events_per_copy, 4)
    self.assertEqual(grown.events, 4 * grown.copies)
    self.assertEqual(grown.op_events, 3 * grown.copies)

    space = xplane_pb2.XSpace.FromString(grown.data)
    self.assertEqual([p.name for p in space.planes], ["/host:metadata", "/device:GPU:0"])
    self.assertEqual(list(space.hostnames), ["host0"])
    (plane,) = [p for p in space.planes if p.name == grown.plane_name]
    stream1 = plane.lines[0]
    self.assertEqual((stream1.name, stream1.timestamp_ns), ("stream 1", 1000))
    self.assertLen(stream1.events, 2 * grown.copies)
    # The period spans every event of both streams (stream 1's, from 0 to 80 us, cover stream 2's)
    # plus a 1 us gap.
    period_ps = 80 * 10**6 + 10**6
    self.assertEqual(
      [e.offset_ps for e in stream1.events[:4]], [0, 50 * 10**6, period_ps, period_ps + 50 * 10**6]
    )
    self.assertEqual(stream1.events[-1].offset_ps, (grown.copies - 1) * period_ps + 50 * 10**6)
    self.assertEqual(stream1.events[2].stats, stream1.events[0].stats)

  def test_profile_is_unchanged(self):
    original = _space()
    self.assertEqual(_costs(original), {"fusion": 20.0, "dot": 5.0})
    grown = large_trace.grow(original, 50_000)
    self.assertGreater(grown.copies, 100)
    self.assertEqual(_costs(grown.data), {"fusion": 20.0, "dot": 5.0})
    counts = {e.name: e.samples for e in conversion.convert_xspaces([grown.data]).entries}
    self.assertEqual(counts, {"fusion": 2 * grown.copies, "dot": grown.copies})

  def test_rejects_scope_range_ids(self):
    with self.assertRaisesRegex(ValueError, "scope_range_id"):
      large_trace.grow(_space(scope_range_id=True), 10_000)

  def test_rejects_a_trace_without_device_plane(self):
    with self.assertRaisesRegex(ValueError, "no device plane.*relabel"):
      large_trace.grow(_space(plane_name="/host:CPU"), 10_000)


if __name__ == "__main__":
  absltest.main()
