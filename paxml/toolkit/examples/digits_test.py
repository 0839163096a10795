"""The bobbin-style digits example: train, be preempted, resume, evaluate the best."""

import os
import subprocess
import sys

from absl.testing import absltest

from paxml.toolkit.examples import digits


def _run_script(log_dir: str, *flags: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    [
      sys.executable,
      "-P",
      "-m",
      "paxml.toolkit.examples.digits",
      f"--log_dir_path={log_dir}",
      *flags,
    ],
    capture_output=True,
    text=True,
    timeout=600,
    env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
  )


class DigitsExampleTest(absltest.TestCase):
  def test_preempted_run_resumes_from_its_last_save_and_best_is_evaluated(self):
    log_dir = self.create_tempdir().full_path
    # SIGTERM right after the (asynchronous) save of step 60 was started.
    killed = _run_script(log_dir, "--max_steps=120", "--eval_interval=60", "--terminate_at_step=60")
    self.assertEqual(killed.returncode, -15, killed.stderr[-2000:])
    self.assertEqual(os.listdir(os.path.join(log_dir, "all_ckpts")), ["checkpoint_00000060"])
    # The restart resumes at step 60 (not 0) and trains to 120.
    results = digits.run(log_dir, max_steps=120, eval_interval=60)
    self.assertGreater(results["dev"], 0.8)  # Chance is 0.1.
    self.assertGreaterEqual(results["best_dev"], results["dev"])
    self.assertCountEqual(
      os.listdir(os.path.join(log_dir, "tensorboard")), ["train", "dev", "test"]
    )
    best = digits.evaluate_best(log_dir)
    self.assertIn(best["step"], (60, 120))
    self.assertGreater(best["test"], 0.8)

  def test_last_save_of_a_script_that_just_returns_is_complete(self):
    # bobbin's examples save at the last step and return at once.
    log_dir = self.create_tempdir().full_path
    done = _run_script(log_dir, "--max_steps=30", "--eval_interval=30")
    self.assertEqual(done.returncode, 0, done.stderr[-2000:])
    self.assertEqual(os.listdir(os.path.join(log_dir, "all_ckpts")), ["checkpoint_00000030"])
    self.assertEqual(digits.evaluate_best(log_dir)["step"], 30)


if __name__ == "__main__":
  absltest.main()
