"""Exact resume: runs interrupted by SIGKILL mid-save or by SIGTERM continue with the same losses.

The reference is one uninterrupted run. Losses are compared per step, read from the train
summaries (summary every step). On CPU the resumed run recomputes the same steps from the same
saved state, data position and keys, so the tolerance is float32 round-off (rtol 1e-6).
"""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import absltest
import numpy as np

from paxml import checkpoint_integrity
from paxml import trainer
from paxml.testing import compile_cache
from paxml.testing import event_files
from paxml.testing import tiny_lm

# Every run (and the child) compiles the same programs: the later compiles read the first's.
compile_cache.use_for_this_test()

_STEPS = 8


class _TinyLm(tiny_lm.TinyLm):
  """A few seconds of training; a checkpoint every 2 steps and a loss summary every step."""

  INPUT_SEED = 7
  NUM_TRAIN_STEPS = _STEPS
  SAVE_INTERVAL_STEPS = 2
  SAVE_MAX_TO_KEEP = 10
  SUMMARY_INTERVAL_STEPS = 1
  EVAL_INTERVAL_STEPS = None
  DECODE_INTERVAL_STEPS = None


class _KillAfterStep:
  """A trainer profiler hook that sends `sig` to this process before step `step` runs."""

  def __init__(self, step, sig):
    self.step, self.sig = step, sig

  def before_step(self, step):
    if step == self.step:
      os.kill(os.getpid(), self.sig)

  def after_step(self, step, outputs):
    pass

  def close(self):
    pass


class ResumeTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # A new directory: the default test tmpdir outlives runs (outside Bazel it is shared), and a
    # stale checkpoint there would be resumed instead of trained.
    cls.reference_dir = tempfile.mkdtemp(dir=absltest.get_default_test_tmpdir())
    trainer.train_and_evaluate(_TinyLm(), cls.reference_dir)
    (cls.reference,) = event_files.scalars_by_file(cls.reference_dir)
    assert sorted(cls.reference) == list(range(1, _STEPS + 1)), cls.reference

  def _assert_same_losses(self, resumed, steps):
    np.testing.assert_allclose(
      [resumed[s] for s in steps], [self.reference[s] for s in steps], rtol=1e-6
    )

  def test_sigkill_during_a_save_never_picks_the_partial_checkpoint(self):
    job_log_dir = self.create_tempdir().full_path
    # A child process that kills itself with SIGKILL right after the save of step 4 has
    # started (Orbax writes it in the background into a temporary directory).
    code = textwrap.dedent(f"""
        import os, signal
        from paxml import checkpoints, trainer
        from tests import resume_test
        original = checkpoints.Checkpointer.save
        def save(self, step, *args, **kwargs):
          saved = original(self, step, *args, **kwargs)
          if saved and step == 4:
            os.kill(os.getpid(), signal.SIGKILL)
          return saved
        checkpoints.Checkpointer.save = save
        trainer.train_and_evaluate(resume_test._TinyLm(), {job_log_dir!r})
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.run(
      [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    self.assertEqual(child.returncode, -signal.SIGKILL, child.stderr[-3000:])
    names = os.listdir(os.path.join(job_log_dir, "checkpoints"))
    self.assertIn("checkpoint_00000002", names)
    self.assertNotIn("checkpoint_00000004", names)  # Only its temporary directory, if any.

    with self.assertLogs("absl", "INFO") as logs:
      final = trainer.train_and_evaluate(_TinyLm(), job_log_dir)
    self.assertIn("Restored checkpoint at step 2", "\n".join(logs.output))
    self.assertEqual(final["step"], _STEPS)
    resumed = event_files.scalars_by_file(job_log_dir)[-1]
    self.assertEqual(sorted(resumed), list(range(3, _STEPS + 1)))
    self._assert_same_losses(resumed, range(3, _STEPS + 1))

  def test_sigterm_saves_then_stops_and_the_restart_continues_exactly(self):
    job_log_dir = self.create_tempdir().full_path
    # SIGTERM arrives before step 5 runs (odd, so not a regular save step).
    stopped = trainer.train_and_evaluate(
      _TinyLm(), job_log_dir, profiler=_KillAfterStep(5, signal.SIGTERM)
    )
    self.assertEqual(stopped["preempted"], 1.0)
    self.assertEqual(stopped["step"], 6.0)  # Step 5 ran; the check before step 6 saw the flag.
    self.assertIn("checkpoint_00000006", os.listdir(os.path.join(job_log_dir, "checkpoints")))
    # Complete when train_and_evaluate returns: its manifest is written and verifies.
    checkpoint_integrity.verify_files(
      os.path.join(job_log_dir, "checkpoints", "checkpoint_00000006"), 6
    )
    first = event_files.scalars_by_file(job_log_dir)[0]
    self._assert_same_losses(first, range(1, 7))

    final = trainer.train_and_evaluate(_TinyLm(), job_log_dir)
    self.assertEqual(final["step"], _STEPS)
    resumed = event_files.scalars_by_file(job_log_dir)[-1]
    self.assertEqual(sorted(resumed), [7, 8])
    self._assert_same_losses(resumed, [7, 8])


if __name__ == "__main__":
  absltest.main()
