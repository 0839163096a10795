"""The Python conversion API on a real CPU trace: results, determinism, options and every error."""

import glob
import os
import shutil
import tempfile

from absl.testing import absltest

from profiling import _pgle
from profiling import conversion
from profiling import cpu_trace

_STEPS = 3


class ConversionTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.logdir = os.path.join(cls.tmp, "log")
    cls.run_dir = cpu_trace.trace_train_steps(cls.logdir, steps=_STEPS)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp)
    super().tearDownClass()

  def test_cpu_trace_with_include_host(self):
    result = conversion.convert_detailed(self.run_dir, include_host=True)
    self.assertGreater(len(result.entries), 5)
    names = [e.name for e in result.entries]
    self.assertEqual(names, sorted(names))
    # The step has no loops: every instruction ran once per traced step.
    self.assertEqual({e.samples for e in result.entries}, {_STEPS})
    self.assertTrue(all(e.cost_us > 0 for e in result.entries))
    self.assertEqual(len(result.trace_files), 1)

  def test_same_trace_same_bytes_and_text_agrees(self):
    first = conversion.convert(self.run_dir, include_host=True)
    self.assertEqual(first, conversion.convert(self.run_dir, include_host=True))
    text = conversion.convert(self.run_dir, include_host=True, text=True)
    self.assertIn(b"costs {", text)
    self.assertEqual(_pgle.parse_profile(text, True), _pgle.parse_profile(first))

  def test_logdir_means_its_newest_run(self):
    self.assertEqual(conversion.resolve_run_dir(self.logdir), self.run_dir)
    self.assertEqual(
      conversion.convert(self.logdir, include_host=True),
      conversion.convert(self.run_dir, include_host=True),
    )

  def test_cpu_trace_without_include_host_explains(self):
    with self.assertRaisesRegex(conversion.NoDeviceEventsError, "include_host"):
      conversion.convert(self.run_dir)
    self.assertTrue(issubclass(conversion.NoDeviceEventsError, ValueError))

  def test_statistics_over_two_runs(self):
    # The same run twice: every statistic of two equal values is that value.
    mean = dict(_pgle.parse_profile(conversion.convert(self.run_dir, include_host=True)))
    for kwargs in (
      {"percentile": 90},
      {"aggregation": conversion.Aggregation.MEDIAN},
      {"aggregation": conversion.Aggregation.MAX},
    ):
      twice = conversion.convert_detailed([self.run_dir, self.run_dir], include_host=True, **kwargs)
      self.assertEqual(twice.num_groups, 2)
      for e in twice.entries:
        self.assertAlmostEqual(e.cost_us, mean[e.name], delta=1e-9 * mean[e.name])
        self.assertEqual((e.samples, e.groups), (2 * _STEPS, 2))

  def test_contradicting_and_invalid_aggregation(self):
    with self.assertRaisesRegex(conversion.InvalidArgumentError, "contradict"):
      conversion.convert(self.run_dir, 50, aggregation=conversion.Aggregation.MIN)
    with self.assertRaisesRegex(ValueError, r"percentile must be in \[0, 100\]"):
      conversion.convert(self.run_dir, 150, include_host=True)

  def test_missing_directory(self):
    with self.assertRaisesRegex(FileNotFoundError, "does not exist"):
      conversion.convert(os.path.join(self.tmp, "nope"))

  def test_directory_without_trace(self):
    empty = self.create_tempdir().full_path
    with self.assertRaisesRegex(conversion.TraceNotFoundError, r"no \*xplane.pb trace"):
      conversion.convert(empty)

  def test_truncated_and_foreign_files(self):
    (trace,) = glob.glob(os.path.join(self.run_dir, "*.xplane.pb"))
    with open(trace, "rb") as f:
      data = f.read()
    for name, content in (("truncated", data[: len(data) // 2]), ("json", b'{"traceEvents": []}')):
      run = self.create_tempdir(name).full_path
      with open(os.path.join(run, "host.xplane.pb"), "wb") as f:
        f.write(content)
      with self.assertRaisesRegex(conversion.TraceFormatError, "host.xplane.pb"):
        conversion.convert(run, include_host=True)

  def test_write_and_read_profile(self):
    data = conversion.convert(self.run_dir, include_host=True)
    path = conversion.write_profile(data, os.path.join(self.tmp, "out", "profile.pbtxt"))
    with self.assertRaises(ValueError):  # Binary bytes in a .pbtxt file are not text format.
      conversion.read_profile(path)
    conversion.write_profile(conversion.convert(self.run_dir, include_host=True, text=True), path)
    self.assertEqual(conversion.read_profile(path), _pgle.parse_profile(data))


if __name__ == "__main__":
  absltest.main()
