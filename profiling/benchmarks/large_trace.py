"""Grows a real device-plane trace to a given size by repeating its events, for the converter benchmark.

Each line of the device plane keeps its events and gets more copies of them, copy k shifted by
k * period, where the period spans every event of the plane plus a gap. Without scope_range_id
stats both converters key an execution by (module, program id, op, start time), so each copy is
one more execution of the same instructions: the names stay the same and each mean cost is
unchanged, which lets the benchmark check the two converters against each other on the grown trace.

The copies are written as protobuf wire bytes, not built as Python messages: two million events as
upb messages would take longer to build than either converter takes to read them.
"""

from __future__ import annotations

import dataclasses
import math

from tensorflow.tsl.profiler.protobuf import xplane_pb2

_DEVICE_PLANE_PREFIXES = ("/device:GPU:", "/device:TPU:", "/device:CUSTOM:")
_GAP_PS = 1_000_000  # 1 us between the end of one copy and the start of the next.

# Field numbers of the public xplane.proto (as in profiling/cc/xplane.proto).
_SPACE_PLANES = 1
_PLANE_LINES = 3
_LINE_EVENTS = 4
_EVENT_OFFSET_PS = 2
_VARINT, _LEN = 0, 2  # Wire types.


@dataclasses.dataclass(frozen=True)
class GrownTrace:
  data: bytes  # A serialized XSpace.
  plane_name: str
  events: int  # On the device plane, copies included.
  op_events: int  # Those of `events` with an hlo_op stat: the executions the converters measure.
  events_per_copy: int
  copies: int  # Including the original.


def _varint(value: int) -> bytes:
  value &= (1 << 64) - 1  # A negative int64 is a ten-byte two's complement varint.
  out = bytearray()
  while value > 0x7F:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


def _tag(field: int, wire_type: int) -> bytes:
  return _varint((field << 3) | wire_type)


def _device_plane_index(space: xplane_pb2.XSpace) -> int:
  for prefix in _DEVICE_PLANE_PREFIXES:
    for i, plane in enumerate(space.planes):
      if plane.name.startswith(prefix):
        return i
  names = [plane.name for plane in space.planes]
  raise ValueError(
    f"no device plane ({', '.join(_DEVICE_PLANE_PREFIXES)}) in the trace, only {names}: "
    "relabel a CPU trace's /host:CPU plane first (profiling/trace_relabel.py)"
  )


def _check_repeatable(plane: xplane_pb2.XPlane) -> None:
  if any(m.name == "scope_range_id" for m in plane.stat_metadata.values()):
    raise ValueError(
      f"{plane.name} has scope_range_id stats: copies of an event would share its id "
      "and merge into one span, so repeating events would change the costs"
    )
  for line in plane.lines:
    for event in line.events:
      if event.WhichOneof("data") == "num_occurrences":
        raise ValueError(
          f"{plane.name} line {line.name!r} has aggregated events (num_occurrences): "
          "they have no start time to shift; give a trace of timed events"
        )


class _LineGrower:
  """Writes one line with its events repeated; the events' bytes are encoded once, without offset."""

  def __init__(self, line: xplane_pb2.XLine):
    self.line = line
    self.bodies = []  # (XEvent bytes without offset_ps, offset_ps)
    for event in line.events:
      body = xplane_pb2.XEvent()
      body.CopyFrom(event)
      body.ClearField("offset_ps")
      self.bodies.append((body.SerializeToString(), event.offset_ps))
    self.end_ps = max((e.offset_ps + e.duration_ps for e in line.events), default=0)

  def copy_bytes(self, k: int, period_ps: int) -> bytearray:
    """The `events` fields of copy k (copy 0 is the original)."""
    out = bytearray()
    event_tag, offset_tag = _tag(_LINE_EVENTS, _LEN), _tag(_EVENT_OFFSET_PS, _VARINT)
    shift = k * period_ps
    for body, offset_ps in self.bodies:
      offset = offset_tag + _varint(offset_ps + shift)
      out += event_tag
      out += _varint(len(body) + len(offset))
      out += body
      out += offset
    return out

  def line_bytes(self, copies: int, period_ps: int) -> bytearray:
    skeleton = xplane_pb2.XLine()
    skeleton.CopyFrom(self.line)
    del skeleton.events[:]
    if self.line.events:
      skeleton.duration_ps = max(self.line.duration_ps, (copies - 1) * period_ps + self.end_ps)
    out = bytearray(skeleton.SerializeToString())
    for k in range(copies):
      out += self.copy_bytes(k, period_ps)
    return out


def _period_ps(plane: xplane_pb2.XPlane) -> int:
  starts = [line.timestamp_ns * 1000 + e.offset_ps for line in plane.lines for e in line.events]
  ends = [
    line.timestamp_ns * 1000 + e.offset_ps + e.duration_ps
    for line in plane.lines
    for e in line.events
  ]
  if not starts:
    raise ValueError(f"{plane.name} has no events to repeat")
  return max(ends) - min(starts) + _GAP_PS


def grow(xspace_bytes: bytes, size_bytes: int) -> GrownTrace:
  """`xspace_bytes` with the device plane's events repeated until the XSpace is at least `size_bytes`."""
  space = xplane_pb2.XSpace.FromString(xspace_bytes)
  index = _device_plane_index(space)
  plane = space.planes[index]
  _check_repeatable(plane)
  period_ps = _period_ps(plane)
  growers = [_LineGrower(line) for line in plane.lines]

  # Copy 0 is the smallest (offsets only grow, and so their varints), so this many copies reach
  # the size; the caller sees the exact size of what came out.
  per_copy = sum(len(g.copy_bytes(0, period_ps)) for g in growers)
  copies = max(1, math.ceil((size_bytes - len(xspace_bytes)) / per_copy) + 1)

  skeleton = xplane_pb2.XPlane()
  skeleton.CopyFrom(plane)
  del skeleton.lines[:]
  plane_bytes = bytearray(skeleton.SerializeToString())
  for grower in growers:
    line = grower.line_bytes(copies, period_ps)
    plane_bytes += _tag(_PLANE_LINES, _LEN) + _varint(len(line))
    plane_bytes += line
    del line

  # The XSpace's planes in their order, then its other fields (errors, warnings, hostnames).
  out = bytearray()
  for i, p in enumerate(space.planes):
    data = plane_bytes if i == index else p.SerializeToString()
    out += _tag(_SPACE_PLANES, _LEN) + _varint(len(data))
    out += data
  del space.planes[:]
  out += space.SerializeToString()

  events_per_copy = sum(len(line.events) for line in plane.lines)
  return GrownTrace(
    bytes(out),
    plane.name,
    events_per_copy * copies,
    _op_events(plane) * copies,
    events_per_copy,
    copies,
  )


def _op_events(plane: xplane_pb2.XPlane) -> int:
  op_stat_ids = {i for i, m in plane.stat_metadata.items() if m.name == "hlo_op"}

  def has_op(event):
    stats = list(event.stats) + list(plane.event_metadata[event.metadata_id].stats)
    return any(s.metadata_id in op_stat_ids for s in stats)

  return sum(has_op(e) for line in plane.lines for e in line.events)
