"""The converter benchmark end to end at 1 MiB: both converters run, agree, and the report says so."""

import contextlib
import io
import re
from unittest import mock

from absl.testing import absltest

from profiling.benchmarks import convert_benchmark


def _run_main(*args: str) -> tuple[int, str, str]:
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = convert_benchmark.main(["--size_mb=1", "--repeats=1", *args])
  return code, out.getvalue(), err.getvalue()


class CompareTest(absltest.TestCase):
  def test_equal_within_tolerance_returns_the_largest_relative_difference(self):
    largest = convert_benchmark.compare({"a": 1.0, "b": 2.0}, {"a": 1.0 + 1e-12, "b": 2.0})
    self.assertAlmostEqual(largest, 1e-12, delta=1e-15)
    self.assertEqual(convert_benchmark.compare({"a": 3.0}, {"a": 3.0}), 0.0)

  def test_rejects_different_names(self):
    with self.assertRaisesRegex(
      convert_benchmark.ProfileMismatch, r"only in ours \['c'\].*only in jaxlib's \['b'\]"
    ):
      convert_benchmark.compare({"a": 1.0, "c": 2.0}, {"a": 1.0, "b": 2.0})

  def test_rejects_a_cost_off_by_more_than_the_tolerance(self):
    with self.assertRaisesRegex(convert_benchmark.ProfileMismatch, "b: ours 2.000002"):
      convert_benchmark.compare({"a": 1.0, "b": 2.000002}, {"a": 1.0, "b": 2.0})

  def test_rejects_an_empty_profile(self):
    with self.assertRaisesRegex(convert_benchmark.ProfileMismatch, "empty"):
      convert_benchmark.compare({}, {})


class BenchmarkTest(absltest.TestCase):
  def test_report(self):
    code, out, err = _run_main()
    self.assertEqual(code, 0, err)
    fields = dict(line.split(None, 1) for line in out.splitlines())
    self.assertEqual(list(fields), ["trace", "ours", "jaxlib", "ratio", "parity", "machine"])

    size_mib, events, op_events = re.match(
      r"([\d.]+) MiB: ([\d,]+) events on /device:GPU:0, ([\d,]+) of them with hlo_op",
      fields["trace"],
    ).groups()
    self.assertBetween(float(size_mib), 1.0, 1.2)
    self.assertGreater(int(events.replace(",", "")), int(op_events.replace(",", "")))
    self.assertGreater(int(op_events.replace(",", "")), 1000)

    medians = {}
    for which in ("ours", "jaxlib"):
      median, peak, after_import = re.match(
        r"median ([\d.]+) s \(runs [\d.]+\); peak RSS (\d+) MiB \((\d+) MiB after imports\)",
        fields[which],
      ).groups()
      medians[which] = float(median)
      self.assertGreater(medians[which], 0)
      self.assertGreaterEqual(int(peak), int(after_import))
      self.assertGreater(int(after_import), 5)  # At least an interpreter.

    ratio = float(re.match(r"([\d.]+)x \(jaxlib median / ours median", fields["ratio"]).group(1))
    # The ratio comes from unrounded medians; the printed ones are rounded to 1 ms, which at this
    # tiny size moves their quotient a lot. The printed ratio (2 decimals) must lie within what the
    # printed medians allow.
    half_ms = 0.0005
    lowest = (medians["jaxlib"] - half_ms) / (medians["ours"] + half_ms)
    highest = (medians["jaxlib"] + half_ms) / max(medians["ours"] - half_ms, 1e-9)
    self.assertBetween(ratio, lowest - 0.005, highest + 0.005)
    names = int(
      re.match(r"same (\d+) names, cost_us equal within 1e-09 relative", fields["parity"]).group(1)
    )
    self.assertGreater(names, 5)  # The train step's fusions and dots.
    self.assertRegex(
      fields["machine"], r"nproc \d+, load average [\d.]+ at start; our extension built as k8-"
    )

  def test_fails_when_the_converters_disagree(self):
    read_costs = convert_benchmark.read_costs

    def jaxlib_off_by_a_millionth(path):
      costs = read_costs(path)
      return {n: c * (1 + 1e-6) for n, c in costs.items()} if path.endswith("jaxlib.pb") else costs

    with mock.patch.object(convert_benchmark, "read_costs", jaxlib_off_by_a_millionth):
      code, out, err = _run_main("--size_mb=0.2")
    self.assertEqual(code, 1)
    self.assertEqual(out, "")
    self.assertRegex(
      err,
      r"FAIL: our converter and jaxlib's disagree on the benchmark trace: .*relative difference 1e-06",
    )


if __name__ == "__main__":
  absltest.main()
