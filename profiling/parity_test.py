"""Our converter against jaxlib's own (XLA's C++), on CPU traces of a real jitted train step.

jaxlib reads only device planes, so each trace's /host:CPU plane is relabelled /device:GPU:0 or
/device:CUSTOM:0 (XLA's CPU thunks record the same hlo_op / hlo_module stats there). A
`fingerprint_before_lhs` is added to the train step's HloProto in /host:metadata, as XLA's GPU
scheduler would, so that the `<fingerprint>::` naming is compared too. jaxlib's output is in hash
order: profiles are compared as {name: cost}.
"""

import glob
import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
from jax._src.lib import _profiler as jaxlib_profiler

from profiling import _pgle
from profiling import conversion
from profiling import cpu_trace
from profiling import trace_relabel

_RELATIVE_TOLERANCE = 1e-9
_FINGERPRINT = "0123abcd"
_RUNS = 3


def _as_dict(costs) -> dict[str, float]:
  costs = list(costs)
  as_dict = dict(costs)
  assert len(as_dict) == len(costs), "duplicate names in a profile"
  return as_dict


class ParityTest(parameterized.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.host_traces = []  # Serialized XSpaces as written, one per run of 3 steps.
    for i in range(_RUNS):
      run_dir = cpu_trace.trace_train_steps(os.path.join(cls.tmp, f"log{i}"), steps=3)
      (path,) = glob.glob(os.path.join(run_dir, "*.xplane.pb"))
      with open(path, "rb") as f:
        cls.host_traces.append(f.read())

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp)
    super().tearDownClass()

  def assertSameProfile(self, ours: dict[str, float], theirs: dict[str, float]):
    self.assertGreater(len(theirs), 5, "jaxlib found too few instructions to compare anything")
    self.assertEqual(sorted(ours), sorted(theirs))
    for name, cost in theirs.items():
      self.assertAlmostEqual(ours[name], cost, delta=_RELATIVE_TOLERANCE * abs(cost), msg=name)

  def _write_run(self, name: str, traces: list[bytes]) -> str:
    run_dir = os.path.join(self.tmp, name)
    os.makedirs(run_dir)
    for i, data in enumerate(traces):
      with open(os.path.join(run_dir, f"host{i}.xplane.pb"), "wb") as f:
        f.write(data)
    return run_dir

  @parameterized.product(
    plane=["/device:GPU:0", "/device:CUSTOM:0"], fingerprint=[None, _FINGERPRINT]
  )
  def test_serialized_xspace_matches_get_fdo_profile(self, plane, fingerprint):
    data = trace_relabel.relabel(self.host_traces[0], plane, fingerprint)
    theirs = _as_dict(_pgle.parse_profile(jaxlib_profiler.get_fdo_profile(data)))
    ours = conversion.convert_xspaces([data])
    self.assertSameProfile(_as_dict((e.name, e.cost_us) for e in ours.entries), theirs)
    prefixed = [n for n in theirs if n.startswith(_FINGERPRINT + "::")]
    self.assertEqual(len(prefixed), len(theirs) if fingerprint else 0)

  @parameterized.parameters("/device:GPU:0", "/device:CUSTOM:0")
  def test_multi_host_directory_matches_get_profiled_instructions_proto(self, plane):
    traces = [trace_relabel.relabel(t, plane, _FINGERPRINT) for t in self.host_traces[:2]]
    run_dir = self._write_run(f"two_hosts_{plane[8:-2]}", traces)
    theirs = _as_dict(_pgle.parse_profile(jaxlib_profiler.get_profiled_instructions_proto(run_dir)))
    ours = conversion.convert(run_dir)
    self.assertSameProfile(_as_dict(_pgle.parse_profile(ours)), theirs)
    # Ours is sorted by name on the wire; jaxlib's is in hash order.
    names = [name for name, _ in _pgle.parse_profile(ours)]
    self.assertEqual(names, sorted(names))

  def test_host_plane_mode_reads_what_jaxlib_reads_on_a_device_plane(self):
    relabelled = trace_relabel.relabel(self.host_traces[1], "/device:GPU:0", None)
    theirs = _as_dict(_pgle.parse_profile(jaxlib_profiler.get_fdo_profile(relabelled)))
    ours = conversion.convert_xspaces([self.host_traces[1]], include_host=True)
    self.assertSameProfile(_as_dict((e.name, e.cost_us) for e in ours.entries), theirs)

  @parameterized.parameters(0, 25, 50, 90, 100)
  def test_percentile_matches_aggregate_profiled_instructions(self, percentile):
    traces = [trace_relabel.relabel(t, "/device:GPU:0", _FINGERPRINT) for t in self.host_traces]
    per_run = [jaxlib_profiler.get_fdo_profile(t) for t in traces]
    theirs = _as_dict(
      _pgle.parse_profile(jaxlib_profiler.aggregate_profiled_instructions(per_run, percentile))
    )
    ours = conversion.convert_xspaces(traces, percentile)
    self.assertEqual(ours.num_groups, _RUNS)
    self.assertSameProfile(_as_dict((e.name, e.cost_us) for e in ours.entries), theirs)

  def test_percentile_over_run_directories(self):
    traces = [trace_relabel.relabel(t, "/device:CUSTOM:0", None) for t in self.host_traces]
    run_dirs = [self._write_run(f"run{i}", [t]) for i, t in enumerate(traces)]
    per_run = [jaxlib_profiler.get_profiled_instructions_proto(d) for d in run_dirs]
    theirs = _as_dict(
      _pgle.parse_profile(jaxlib_profiler.aggregate_profiled_instructions(per_run, 90))
    )
    ours = conversion.convert(run_dirs, percentile=90)
    self.assertSameProfile(_as_dict(_pgle.parse_profile(ours)), theirs)


if __name__ == "__main__":
  absltest.main()
