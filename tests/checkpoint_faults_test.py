"""Checkpoints that cannot be silently wrong, tested as a user meets them: train, damage the
job_log_dir, run again.

One short training run (6 steps, a checkpoint every 2) is made once; each test works on a copy.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest

from paxml import checkpoint_integrity
from paxml import checkpoints
from paxml import eval_lib
from paxml import job_lock
from paxml import main
from paxml import trainer
from paxml.testing import binaries
from paxml.testing import compile_cache
from tests import fault_experiments

# Every run (and the `python -m paxml.main` children) compiles FaultsLm's programs: the
# later compiles read the first's.
compile_cache.use_for_this_test()


FaultsLm = fault_experiments.FaultsLm
FaultsLm8 = fault_experiments.FaultsLm8
DivergingLm = fault_experiments.DivergingLm
_EXP = "--exp=tests.fault_experiments."


def _step_dir(job_log_dir, step):
  return os.path.join(job_log_dir, "checkpoints", f"checkpoint_{step:08d}")


def _largest_state_file(step_dir):
  files = [
    f
    for f in glob.glob(os.path.join(step_dir, "state", "**"), recursive=True)
    if os.path.isfile(f) and "_METADATA" not in f
  ]
  return max(files, key=os.path.getsize)


def _flip_bit(path):
  with open(path, "r+b") as f:
    data = bytearray(f.read())
    data[len(data) // 2] ^= 0x10
    f.seek(0)
    f.write(data)


def _truncate(path):
  os.truncate(path, os.path.getsize(path) // 2)


def _garble_input_position(step_dir):
  path = os.path.join(step_dir, "train_input", "metadata")
  with open(path) as f:
    text = f.read()
  with open(path, "w") as f:
    f.write(text.replace("6", "2") if "6" in text else text + " ")


class CheckpointFaultsTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.trained = tempfile.mkdtemp(dir=absltest.get_default_test_tmpdir())
    trainer.train_and_evaluate(FaultsLm(), cls.trained)

  def _copy(self):
    job_log_dir = os.path.join(self.create_tempdir().full_path, "job")
    shutil.copytree(self.trained, job_log_dir)
    return job_log_dir

  def test_every_step_has_a_manifest_that_verifies(self):
    for step in (0, 2, 4, 6):
      manifest = checkpoint_integrity.verify_files(_step_dir(self.trained, step), step)
      self.assertIn("train_input", " ".join(manifest["files"]))
      self.assertTrue(any(k.startswith("mdl_vars/params/") for k in manifest["arrays"]))
    self.assertFalse(os.path.exists(os.path.join(self.trained, job_lock.LOCK_FILE)))

  def test_damaged_latest_is_moved_aside_and_the_previous_one_resumes(self):
    # Each kind of damage is also checked alone in paxml/checkpoint_integrity_test.py.
    damages = {
      "flipped bit": lambda d: _flip_bit(_largest_state_file(d)),
      "truncated array file": lambda d: _truncate(_largest_state_file(d)),
      "deleted _METADATA": lambda d: os.remove(os.path.join(d, "state", "_METADATA")),
      "changed input position": _garble_input_position,
    }
    for name, damage in damages.items():
      with self.subTest(name):
        job_log_dir = self._copy()
        damage(_step_dir(job_log_dir, 6))
        with self.assertLogs("absl", "INFO") as logs:
          final = trainer.train_and_evaluate(FaultsLm8(), job_log_dir)
        text = "\n".join(logs.output)
        warnings = [l for l in logs.output if l.startswith("WARNING") and "corrupt" in l]
        self.assertLen(warnings, 1, text)
        self.assertIn("checkpoint step 6 is corrupt", warnings[0])
        self.assertIn("Restored checkpoint at step 4", text)
        self.assertEqual(final["step"], 8)
        # Moved aside, never deleted; the run went on from step 4 and saved 6 and 8 again.
        self.assertTrue(
          os.path.isdir(os.path.join(job_log_dir, "checkpoints_corrupt", "checkpoint_00000006"))
        )
        checkpoint_integrity.verify_files(_step_dir(job_log_dir, 8), 8)

  def test_an_explicit_corrupt_step_is_an_error_not_a_fallback(self):
    job_log_dir = self._copy()
    _flip_bit(_largest_state_file(_step_dir(job_log_dir, 4)))
    with self.assertRaisesRegex(main.UsageError, "checkpoint step 4 is corrupt"):
      main.run("fault_experiments.FaultsLm", job_log_dir, "decode_once", restore_checkpoint_step=4)
    # Readers never move the trainer's files.
    self.assertTrue(os.path.isdir(_step_dir(job_log_dir, 4)))

  def test_eval_job_skips_a_corrupt_latest_and_reads_only_the_params(self):
    job_log_dir = self._copy()
    _flip_bit(_largest_state_file(_step_dir(job_log_dir, 6)))
    with self.assertLogs("absl", "INFO") as logs:
      result = eval_lib.run_job(FaultsLm(), job_log_dir, "decode_once")
    self.assertEqual(result["steps"], [4])
    self.assertIn("checkpoint step 6 is corrupt", "\n".join(logs.output))
    self.assertIn("restored the params of checkpoint step 4", "\n".join(logs.output))
    self.assertTrue(os.path.isdir(_step_dir(job_log_dir, 6)))  # Left in place.

  def test_all_checkpoints_corrupt_is_an_error(self):
    job_log_dir = self._copy()
    for step in (0, 2, 4, 6):
      os.remove(os.path.join(_step_dir(job_log_dir, step), "state", "_METADATA"))
    with self.assertRaisesRegex(checkpoints.CheckpointError, "no checkpoint .* passed"):
      trainer.train_and_evaluate(FaultsLm8(), job_log_dir)
    self.assertLen(os.listdir(os.path.join(job_log_dir, "checkpoints_corrupt")), 4)

  def test_a_failed_background_save_stops_the_run_at_once(self):
    job_log_dir = self.create_tempdir().full_path
    original = checkpoint_integrity.write_manifest

    def full_disk(step_dir, step, arrays):
      raise OSError(28, "No space left on device", step_dir)

    checkpoint_integrity.write_manifest = full_disk
    try:
      with self.assertRaisesRegex(
        checkpoints.CheckpointError, "step 0 .* failed: disk full"
      ) as raised:
        trainer.train_and_evaluate(FaultsLm(), job_log_dir)
    finally:
      checkpoint_integrity.write_manifest = original
    self.assertEqual(len(str(raised.exception).splitlines()), 1)
    # Reported in the step after the failed save of step 0, not at the next save (step 2).
    self.assertFalse(os.path.exists(_step_dir(job_log_dir, 2)))

  def test_an_exception_right_after_a_save_leaves_that_save_complete(self):
    job_log_dir = self.create_tempdir().full_path

    class FailBeforeStep3:
      def before_step(self, step):
        if step == 3:
          raise RuntimeError("boom")

      def after_step(self, step, outputs):
        pass

      def close(self):
        pass

    with self.assertRaisesRegex(RuntimeError, "boom"):
      trainer.train_and_evaluate(FaultsLm(), job_log_dir, profiler=FailBeforeStep3())
    # Step 2 was saved in the background just before; the exception waited for it.
    checkpoint_integrity.verify_files(_step_dir(job_log_dir, 2), 2)
    self.assertFalse(os.path.exists(os.path.join(job_log_dir, job_lock.LOCK_FILE)))

  def test_a_run_that_only_skips_steps_stops_with_an_error(self):
    job_log_dir = self.create_tempdir().full_path
    with self.assertRaisesRegex(trainer.TrainingDivergedError, "all skipped"):
      trainer.train_and_evaluate(DivergingLm(), job_log_dir)

  def test_a_second_trainer_on_a_live_lease_stops_with_one_line(self):
    job_log_dir = self._copy()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
      with open(os.path.join(job_log_dir, job_lock.LOCK_FILE), "w") as f:
        json.dump({"host": os.uname().nodename, "pid": holder.pid, "start_time": 1e10}, f)
      with self.assertRaisesRegex(job_lock.JobLockError, f"PID {holder.pid} on host"):
        trainer.train_and_evaluate(FaultsLm8(), job_log_dir)
    finally:
      holder.kill()
      holder.wait()
    # Nothing was touched: no step beyond 6, the lease is still the holder's.
    self.assertFalse(os.path.exists(_step_dir(job_log_dir, 8)))
    # The holder is gone now: its stale lease is taken over with a warning.
    with self.assertLogs("absl", "WARNING") as logs:
      trainer.train_and_evaluate(FaultsLm8(), job_log_dir)
    self.assertIn("Took over", "\n".join(logs.output))
    self.assertFalse(os.path.exists(os.path.join(job_log_dir, job_lock.LOCK_FILE)))


class MisspeltFieldTest(absltest.TestCase):
  def test_an_unread_field_one_edit_from_a_read_one_is_a_warning(self):
    with self.assertLogs("absl", "WARNING") as logs:
      with self.assertRaisesRegex(main.UsageError, "devices"):  # The mesh, not the typo.
        main.run("fault_experiments.TypoLm", self.create_tempdir().full_path)
    self.assertIn(
      "TypoLm.NUM_TRIAN_STEPS is never read; did you mean NUM_TRAIN_STEPS?", "\n".join(logs.output)
    )


class OneLineErrorsTest(absltest.TestCase):
  """The command line: `error: ...` on the last line, exit status 1, no traceback."""

  def _assert_one_line_error(self, status, stderr, pattern):
    self.assertEqual(status, 1, stderr[-3000:])
    self.assertNotIn("Traceback", stderr)
    self.assertRegex(stderr.strip().splitlines()[-1], "^error: " + pattern)

  def test_missing_restore_step_lists_the_steps(self):
    job_log_dir = self.create_tempdir().full_path
    status, stderr = binaries.run_main(_EXP + "FaultsLm", f"--job_log_dir={job_log_dir}")
    self.assertEqual(status, 0, stderr[-3000:])
    # The process exited right after its final save, yet that checkpoint is complete.
    checkpoint_integrity.verify_files(_step_dir(job_log_dir, 6), 6)
    status, stderr = binaries.run_main(
      _EXP + "FaultsLm",
      f"--job_log_dir={job_log_dir}",
      "--mode=decode_once",
      "--restore_checkpoint_step=5",
    )
    self._assert_one_line_error(status, stderr, r"no checkpoint at step 5 .* \[0, 2, 4, 6\]")

  def test_eval_on_an_empty_directory_times_out(self):
    status, stderr = binaries.run_main(
      _EXP + "FaultsLm",
      f"--job_log_dir={self.create_tempdir().full_path}",
      "--mode=eval",
      "--eval_wait_timeout=1",
    )
    self._assert_one_line_error(status, stderr, "no checkpoint appeared .* within 1s")

  def test_diverging_run_exits_with_one_line(self):
    status, stderr = binaries.run_main(
      _EXP + "DivergingLm", f"--job_log_dir={self.create_tempdir().full_path}"
    )
    self._assert_one_line_error(status, stderr, "the last .* steps .* were all skipped")


if __name__ == "__main__":
  absltest.main()
