"""Tests of Pax's checkpoint path helpers and `save_checkpoint` / `restore_checkpoint`."""

import os
import shutil
import tempfile

from absl.testing import absltest
from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml import checkpoint_paths
from paxml import checkpoints
from paxml import train_states

CheckpointType = checkpoint_paths.CheckpointType


def _state(step: int, scale: float) -> train_states.TrainState:
  params = {"w": jnp.arange(6.0).reshape(2, 3) * scale}
  return train_states.make_train_state(
    jnp.asarray(step, jnp.int32), params, optax.sgd(0.1).init(params), jnp.asarray(1, jnp.int32)
  )


class PathsTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.dir = epath.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, self.dir)

  def test_names(self):
    self.assertEqual(checkpoint_paths.checkpoint_name(42), "checkpoint_00000042")
    self.assertEqual(checkpoint_paths.checkpoint_name(42, CheckpointType.FLAX), "checkpoint_42")
    self.assertEqual(checkpoint_paths.checkpoint_name(42, use_digit_step_subdirectory=True), "42")
    self.assertEqual(
      checkpoint_paths.make_checkpoint_step_dir(self.dir, 3), self.dir / "checkpoint_00000003"
    )
    self.assertEqual(CheckpointType("gda"), CheckpointType.GDA)

  def test_latest_skips_temporary_and_foreign_names(self):
    self.assertIsNone(checkpoint_paths.latest_checkpoint_if_exists(self.dir / "missing"))
    for name in ("checkpoint_00000005", "12", "tmp_123.checkpoint_99", "checkpoint99", "notes"):
      (self.dir / name).write_text("x")
    self.assertEqual(checkpoint_paths.latest_checkpoint(self.dir), self.dir / "12")
    self.assertEqual(checkpoint_paths.retrieve_latest_checkpoint_step(self.dir), 12)
    (self.dir / "12").unlink()
    self.assertEqual(checkpoint_paths.retrieve_latest_checkpoint_step(self.dir), 5)
    empty = self.dir / "empty"
    empty.mkdir()
    with self.assertRaisesRegex(ValueError, "No checkpoints were found"):
      checkpoint_paths.retrieve_latest_checkpoint_step(empty)


class SaveRestoreTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.job_log_dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.job_log_dir)
    self.ckpt_dir = checkpoints.checkpoint_dir(self.job_log_dir)

  def test_round_trip_and_the_trainer_reads_it(self):
    store = checkpoints.save_checkpoint(_state(4, 2.0), self.ckpt_dir)
    store.wait_until_finished()
    store.close()
    self.assertTrue(os.path.isdir(os.path.join(self.ckpt_dir, "checkpoint_00000004")))
    restored = checkpoints.restore_checkpoint(_state(0, 1.0), self.ckpt_dir)
    self.assertEqual(int(restored.step), 4)
    np.testing.assert_array_equal(
      restored.mdl_vars["params"]["w"], _state(0, 2.0).mdl_vars["params"]["w"]
    )
    # The trainer's own restore (with its checksums) reads the same directory.
    abstract = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), _state(0, 1.0)
    )
    with checkpoints.Checkpointer(self.job_log_dir, save_interval_steps=1, max_to_keep=3) as ckpt:
      self.assertEqual(ckpt.restore(abstract).step, 4)

  def test_overwrite_and_errors(self):
    checkpoints.save_checkpoint(_state(4, 2.0), self.ckpt_dir).close()
    with self.assertRaisesRegex(checkpoints.CheckpointError, "overwrite=True"):
      checkpoints.save_checkpoint(_state(4, 3.0), self.ckpt_dir)
    checkpoints.save_checkpoint(_state(4, 3.0), self.ckpt_dir, overwrite=True).close()
    restored = checkpoints.restore_checkpoint(_state(0, 1.0), self.ckpt_dir, step=4)
    self.assertEqual(float(restored.mdl_vars["params"]["w"][0, 1]), 3.0)
    with self.assertRaisesRegex(ValueError, "must be a subclass of"):
      checkpoints.restore_checkpoint((_state(0, 1.0), []), self.ckpt_dir)
    with self.assertRaisesRegex(ValueError, "does not exist"):
      checkpoints.restore_checkpoint(_state(0, 1.0), os.path.join(self.job_log_dir, "nope"))


if __name__ == "__main__":
  absltest.main()
