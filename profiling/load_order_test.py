"""The extension and TensorFlow in one process, the extension imported first (paxml's order).

TensorFlow exports its own protobuf build; _pgle.py loads the extension so that it keeps using the
system protobuf it was compiled against (parity_test covers TensorFlow imported first).
"""

from absl.testing import absltest

from profiling import _pgle  # Before TensorFlow, on purpose.
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-bad-import-order


class LoadOrderTest(absltest.TestCase):
  def test_both_protobuf_runtimes_work_side_by_side(self):
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/device:GPU:0")
    plane.stat_metadata[1].name = "hlo_op"
    plane.stat_metadata[2].name = "hlo_module"
    line = plane.lines.add(timestamp_ns=1)
    event = line.events.add(metadata_id=1, offset_ps=0, duration_ps=2_500_000)
    event.stats.add(metadata_id=1, str_value="fusion.7")
    event.stats.add(metadata_id=2, str_value="jit_step")
    profile, entries, *_ = _pgle.convert_xspaces(
      [space.SerializeToString()],
      _pgle.PlaneSelection.DEVICE,
      _pgle.Aggregation.MEAN,
      0.0,
      entries=True,
    )
    self.assertEqual(entries, [("fusion.7", 2.5, 1, 1)])
    self.assertEqual(_pgle.parse_profile(profile), [("fusion.7", 2.5)])
    # TensorFlow's own descriptors are untouched by ours (same full names, other runtime).
    self.assertEqual(xplane_pb2.XSpace.FromString(space.SerializeToString()), space)


if __name__ == "__main__":
  absltest.main()
