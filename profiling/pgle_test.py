"""The CLI end to end on a CPU trace: convert -> report -> flags, and its help."""

import contextlib
import io
import os

from absl.testing import absltest

from profiling import cpu_trace
from profiling import pgle


def _run(*argv):
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = pgle.main(list(argv))
  return code, out.getvalue(), err.getvalue()


class PgleCliTest(absltest.TestCase):
  def test_help_shows_the_whole_workflow(self):
    with self.assertRaises(SystemExit):
      _run("--help")
    help_text = pgle.build_parser().format_help()
    for step in (
      "pgle -- convert",
      "pgle -- report",
      "pgle -- flags",
      "JAX_ENABLE_PGLE",
      "Found profile, using profile guided latency estimator",
      "--include_host",
    ):
      self.assertIn(step, help_text)

  def test_convert_report_flags(self):
    tmp = self.create_tempdir().full_path
    logdir = os.path.join(tmp, "log")
    cpu_trace.trace_train_steps(logdir, steps=2)
    profile = os.path.join(tmp, "profile.pbtxt")

    code, out, err = _run("convert", logdir, "-o", profile)
    self.assertEqual(code, 1)
    self.assertIn("--include_host", err)
    self.assertFalse(os.path.exists(profile))  # Never an empty profile.

    code, out, _ = _run("convert", logdir, "-o", profile, "--include_host", "-v")
    self.assertEqual(code, 0)
    self.assertIn("wrote", out)
    self.assertIn(" x2 ", out)
    with open(profile) as f:
      self.assertTrue(f.read().startswith("costs {"))

    hlo = os.path.join(tmp, "module.txt")
    with open(hlo, "w") as f:
      f.write(cpu_trace.compiled_hlo_text())
    code, out, _ = _run("report", profile, "--hlo", hlo, "--top", "3")
    self.assertEqual(code, 0)
    self.assertIn("Top 3 by cost", out)
    self.assertIn("scheduled instructions have a measured cost", out)

    code, out, _ = _run("flags", profile)
    self.assertEqual(code, 0)
    self.assertEqual(
      out.strip(),
      "--xla_gpu_enable_latency_hiding_scheduler=true "
      f"--xla_gpu_pgle_profile_file_or_directory_path={profile}",
    )

  def test_paths_are_relative_to_where_bazel_run_was_called(self):
    tmp = self.create_tempdir().full_path
    os.environ["BUILD_WORKING_DIRECTORY"] = tmp
    try:
      code, _, err = _run("convert", "missing_run", "-o", "p.pb")
    finally:
      del os.environ["BUILD_WORKING_DIRECTORY"]
    self.assertEqual(code, 1)
    self.assertIn(os.path.join(tmp, "missing_run"), err)


if __name__ == "__main__":
  absltest.main()
