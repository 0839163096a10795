"""Tests PGLE collection during training and running with a profile."""

import os
import subprocess
import sys
import textwrap

from absl.testing import absltest
import jax

from paxml import pgle_collection
from paxml.tasks.lm.params import demo
from profiling import _pgle
from profiling import conversion


class _TinyLm(demo.SyntheticDemoLm):
  """DemoLm shrunk to 8 tiny steps: the trace only needs the train step's instructions."""

  VOCAB_SIZE = 16
  SEQ_LEN = 8
  BATCH_SIZE = 4
  MAX_STRIDE = 2
  INPUT_SEED = 1
  MODEL_DIMS = 16
  NUM_LAYERS = 1
  NUM_HEADS = 2
  HIDDEN_DIMS = 32
  LEARNING_RATE = 1e-2
  WARMUP_STEPS = 0
  NUM_TRAIN_STEPS = 8
  SAVE_INTERVAL_STEPS = 100
  SAVE_MAX_TO_KEEP = 1
  SUMMARY_INTERVAL_STEPS = 4


def _run_fresh_python(code):
  """Runs `code` in a new interpreter, where JAX has not started its backend yet."""
  return subprocess.run(
    [sys.executable, "-c", textwrap.dedent(code)],
    capture_output=True,
    text=True,
    timeout=120,
    env=dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1"),
  )


class StepWindowProfilerTest(absltest.TestCase):
  def test_training_writes_a_profile_of_the_window(self):
    job_log_dir = self.create_tempdir().full_path
    path = pgle_collection.train_and_collect_profile(
      _TinyLm(), job_log_dir, start_step=3, num_steps=2
    )
    self.assertEqual(path, pgle_collection.profile_path(job_log_dir))
    costs = conversion.read_profile(path)
    # The train step's HLO: its matmuls (dot / fusions) must be among the costed instructions.
    self.assertGreater(len(costs), 5)
    self.assertTrue(all(cost > 0 for _, cost in costs))
    self.assertTrue(any("dot" in name or "fusion" in name for name, _ in costs), costs[:10])
    trace_dir = os.path.join(job_log_dir, "pgle", "trace")
    traces = [f for _, _, files in os.walk(trace_dir) for f in files if f.endswith("xplane.pb")]
    self.assertLen(traces, 1)

  def test_window_after_the_last_step_writes_nothing(self):
    job_log_dir = self.create_tempdir().full_path
    with self.assertRaisesRegex(RuntimeError, "did not reach steps 50..51"):
      pgle_collection.train_and_collect_profile(_TinyLm(), job_log_dir, start_step=50, num_steps=2)
    self.assertFalse(os.path.exists(os.path.join(job_log_dir, "pgle")))

  def test_rejects_an_empty_window(self):
    with self.assertRaisesRegex(ValueError, "num_steps >= 1"):
      pgle_collection.StepWindowProfiler("/tmp/unused", start_step=0, num_steps=0)


class UseProfileTest(absltest.TestCase):
  def test_sets_xla_flags_that_xla_accepts(self):
    path = os.path.join(self.create_tempdir().full_path, "profile.pb")
    with open(path, "wb") as f:
      f.write(_pgle.serialize_profile([("dot.1", 12.5)], False))
    result = _run_fresh_python(f"""
        import os, jax
        from paxml import pgle_collection
        pgle_collection.use_profile({path!r})
        jax.devices()  # XLA parses XLA_FLAGS here and aborts on a flag it does not know.
        print("XLA_FLAGS=" + os.environ["XLA_FLAGS"])
        """)
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn(
      "XLA_FLAGS=--xla_force_host_platform_device_count=1 --xla_gpu_enable_latency_hiding_scheduler=true "
      f"--xla_gpu_pgle_profile_file_or_directory_path={path}",
      result.stdout,
    )

  def test_missing_profile_is_an_error_before_any_flag_is_set(self):
    result = _run_fresh_python("""
        import os
        from paxml import pgle_collection
        try:
          pgle_collection.use_profile("/nonexistent/profile.pb")
        except FileNotFoundError as e:
          print("error:", e)
        print("XLA_FLAGS=" + os.environ["XLA_FLAGS"])
        """)
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn("error: profile '/nonexistent/profile.pb' does not exist", result.stdout)
    self.assertIn("XLA_FLAGS=--xla_force_host_platform_device_count=1\n", result.stdout)

  def test_after_backend_start_it_refuses(self):
    jax.devices()
    with self.assertRaisesRegex(RuntimeError, "before JAX initializes its backend"):
      pgle_collection.use_profile("/any/profile.pb")


if __name__ == "__main__":
  absltest.main()
