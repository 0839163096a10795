"""A SIGTERM mid-run stops `main` within the steps in flight plus the save, as a preemption's grace
period needs (Kubernetes and SLURM send SIGKILL ~30 s after SIGTERM).

The experiment's step takes about a second on two CPU cores (tests/fault_experiments.py's
SlowStepLm) and its summaries and saves are 200 steps apart, so nothing but the run-ahead bound
makes the loop wait for the device between them: without the bound the save first waited for every
step dispatched so far (measured: 64 s after a SIGTERM 15 s into the run, at step 37).
"""

import os
import re
import signal
import subprocess
import sys
import time

from absl.testing import absltest

from paxml import checkpoint_integrity
from paxml import trainer

_K = trainer.MAX_STEPS_IN_FLIGHT
_SAVE_AND_EXIT_SECONDS = 20  # The save of ~8 MB and the process's exit, on a loaded machine.


def _log_seconds(line: str) -> float:
  """Seconds of the day of an absl log line ('I1128 00:10:42.467182 ...')."""
  hours, minutes, seconds = line.split()[1].split(":")
  return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


class SigtermTest(absltest.TestCase):
  def test_a_sigterm_mid_run_saves_and_exits_within_the_steps_in_flight(self):
    job_log_dir = self.create_tempdir().full_path
    log_path = os.path.join(self.create_tempdir().full_path, "stderr.txt")
    with open(log_path, "w") as log:
      child = subprocess.Popen(
        [
          sys.executable,
          "-m",
          "paxml.main",
          "--exp=tests.fault_experiments.SlowStepLm",
          f"--job_log_dir={job_log_dir}",
        ],
        stderr=log,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
      )
    try:
      deadline = time.monotonic() + 300
      while "Training from step 0" not in open(log_path).read():
        self.assertIsNone(child.poll(), open(log_path).read()[-3000:])
        self.assertLess(time.monotonic(), deadline, "the trainer did not start in 300 s")
        time.sleep(0.2)
      time.sleep(20)  # Compilation and a few steps.
      signalled = time.monotonic()
      child.send_signal(signal.SIGTERM)
      # Without the bound this would take (steps dispatched) x (step time): minutes.
      returncode = child.wait(timeout=120)
      exited = time.monotonic()
    finally:
      if child.poll() is None:
        child.kill()
        child.wait()
    text = open(log_path).read()
    self.assertEqual(returncode, 0, text[-3000:])
    started = _log_seconds(next(l for l in text.splitlines() if "Training from step 0" in l))
    received = _log_seconds(next(l for l in text.splitlines() if "Received signal 15" in l))
    stop_line = next(l for l in text.splitlines() if "on SIGTERM; checkpoint saved" in l)
    step = int(re.search(r"Stopping at step (\d+)", stop_line).group(1))
    checkpoint_integrity.verify_files(
      os.path.join(job_log_dir, "checkpoints", f"checkpoint_{step:08d}"), step
    )
    self.assertGreater(step, _K + 1, "the SIGTERM landed before the run was under way")
    # An upper bound of the step time: the run's steps before the signal over its time (which
    # includes compiling), counting only those certainly finished before it.
    step_seconds = (received - started) / max(step - _K, 1)
    self.assertGreaterEqual(step_seconds, 0.5, "the step is too fast to test run-ahead")
    elapsed = exited - signalled
    self.assertLessEqual(
      elapsed,
      (_K + 1) * step_seconds + _SAVE_AND_EXIT_SECONDS,
      f"stopped at step {step} {elapsed:.1f} s after SIGTERM; steps take ~{step_seconds:.2f} s",
    )


if __name__ == "__main__":
  absltest.main()
