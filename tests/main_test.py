"""Integration test of the entry point: the same `run` that `main` calls, and the CLI."""

import glob
import os
import subprocess
import sys

from absl.testing import absltest

from paxml import experiment_registry
from paxml import main
from paxml.tasks.lm.params import demo


@experiment_registry.register
class TinyDemoLm(demo.DemoLm):
  """DemoLm cut down to seconds: a narrower model, 20 steps."""

  MODEL_DIMS = 32
  NUM_LAYERS = 1
  HIDDEN_DIMS = 64
  SEQ_LEN = 16
  BATCH_SIZE = 8
  LEARNING_RATE = 1e-2  # No time to warm up.
  WARMUP_STEPS = 0
  INPUT_SEED = 1  # The same data every run, so the loss check is not flaky.
  NUM_TRAIN_STEPS = 20
  SAVE_INTERVAL_STEPS = 10
  SUMMARY_INTERVAL_STEPS = 5


@experiment_registry.register
class TinyDemoLm30(TinyDemoLm):
  """The same run, continued to step 30."""

  NUM_TRAIN_STEPS = 30


def _run_cli(*args):
  """Runs `python -m paxml.main ARGS`; returns (exit status, stderr)."""
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
  result = subprocess.run(
      [sys.executable, "-m", "paxml.main", *args],
      env=env, capture_output=True, text=True, timeout=120,
  )
  return result.returncode, result.stderr


class RunTest(absltest.TestCase):

  def test_trains_then_resumes_in_the_same_job_log_dir(self):
    job_log_dir = self.create_tempdir().full_path
    # The test module's name differs between `python -m` and Bazel, so ask
    # the registry for it rather than spelling it out.
    name = experiment_registry.canonical_name(TinyDemoLm)

    first = main.run(name, job_log_dir)

    self.assertEqual(first["step"], 20)
    self.assertLess(first["loss"], 3.0)  # Started near ln(32) = 3.47.
    checkpoints = sorted(os.listdir(os.path.join(job_log_dir, "checkpoints")))
    self.assertEqual(checkpoints, ["checkpoint_00000000", "checkpoint_00000010",
                                   "checkpoint_00000020"])
    self.assertLen(glob.glob(os.path.join(
        job_log_dir, "summaries", "train", "events.out.tfevents.*")), 1)

    with self.assertLogs("absl", "INFO") as logs:
      second = main.run(experiment_registry.canonical_name(TinyDemoLm30), job_log_dir)
    log = "\n".join(logs.output)
    self.assertIn("Restored checkpoint at step 20", log)
    self.assertIn("step 30/30 loss", log)
    self.assertNotIn("step 5/30", log)  # Did not start over.
    self.assertEqual(second["step"], 30)
    self.assertIn("checkpoint_00000030",
                  os.listdir(os.path.join(job_log_dir, "checkpoints")))

  def test_unknown_experiment_raises_with_candidates(self):
    with self.assertRaises(experiment_registry.NotFoundError) as cm:
      main.run("demo.DemoLn", self.create_tempdir().full_path)
    self.assertIn("did you mean: tasks.lm.params.demo.DemoLm", str(cm.exception))

  def test_unimplemented_mode_is_refused_before_any_work(self):
    job_log_dir = self.create_tempdir().full_path
    with self.assertRaisesRegex(main.UsageError, "--mode=eval is not implemented yet"):
      main.run(experiment_registry.canonical_name(TinyDemoLm), job_log_dir, mode="eval")
    self.assertEmpty(os.listdir(job_log_dir))


class CommandLineTest(absltest.TestCase):
  """The real process: exit status and what a person sees on stderr."""

  def test_unknown_experiment_prints_one_line_and_exits_1(self):
    status, stderr = _run_cli("--exp=does.not.Exist",
                              f"--job_log_dir={self.create_tempdir().full_path}")
    self.assertEqual(status, 1)
    self.assertEqual(len(stderr.strip().splitlines()), 1, stderr)
    self.assertTrue(stderr.startswith("error: no experiment named 'does.not.Exist'"),
                    stderr)
    self.assertIn("did you mean: tasks.lm.params.demo.DemoLm", stderr)
    self.assertNotIn("Traceback", stderr)

  def test_eval_mode_prints_one_line_and_exits_1(self):
    status, stderr = _run_cli("--exp=demo.DemoLm", "--mode=eval",
                              f"--job_log_dir={self.create_tempdir().full_path}")
    self.assertEqual(status, 1)
    self.assertEqual(
        stderr.strip(),
        "error: --mode=eval is not implemented yet; only --mode=train is available",
    )

  def test_missing_required_flag_is_a_usage_error(self):
    status, stderr = _run_cli("--exp=demo.DemoLm")
    self.assertNotEqual(status, 0)
    self.assertIn("job_log_dir", stderr)


if __name__ == "__main__":
  absltest.main()
