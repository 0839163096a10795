"""Tests of checkpoint saving, naming, pruning and restoring."""

import os

from absl.testing import absltest
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from paxml import checkpoints


class _State(flax.struct.PyTreeNode):
  step: jax.Array
  params: dict


def _state(step: int, scale: float = 1.0) -> _State:
  return _State(
      step=jnp.asarray(step, jnp.int32),
      params={"w": jnp.arange(6.0).reshape(2, 3) * scale, "b": jnp.ones(3) * scale},
  )


def _abstract(state):
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
      jax.eval_shape(lambda: state),
  )


def _step_dirs(directory):
  return sorted(os.listdir(directory))


class CheckpointerTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.job_log_dir = self.create_tempdir().full_path

  def _checkpointer(self, interval=5, keep=10):
    return checkpoints.Checkpointer(
        self.job_log_dir, save_interval_steps=interval, max_to_keep=keep
    )

  def test_saves_first_and_every_interval_with_8_digit_names(self):
    with self._checkpointer(interval=5) as ckpt:
      saved = [s for s in range(13) if ckpt.save(s, _state(s), {"num_batches": s})]
    self.assertEqual(saved, [0, 5, 10])
    directory = os.path.join(self.job_log_dir, "checkpoints")
    self.assertEqual(
        _step_dirs(directory),
        ["checkpoint_00000000", "checkpoint_00000005", "checkpoint_00000010"],
    )
    for name in _step_dirs(directory):
      self.assertRegex(name, r"^checkpoint_\d{8}$")
      step_dir = os.path.join(directory, name)
      items = [d for d in os.listdir(step_dir)
               if os.path.isdir(os.path.join(step_dir, d)) and not d.startswith("_")]
      self.assertCountEqual(items, ["state", "train_input"])

  def test_restore_returns_what_was_saved(self):
    with self._checkpointer() as ckpt:
      ckpt.save(0, _state(0), {"seed": 2**100, "num_batches": 0})
      ckpt.save(5, _state(5, scale=3.0), {"seed": 2**100, "num_batches": 5})
    # A new Checkpointer, as after a restart.
    with self._checkpointer() as ckpt:
      self.assertEqual(ckpt.latest_step(), 5)
      restored = ckpt.restore(_abstract(_state(0)))
      self.assertEqual(restored.step, 5)
      self.assertIsInstance(restored.state, _State)
      self.assertEqual(int(restored.state.step), 5)
      np.testing.assert_array_equal(restored.state.params["w"], _state(5, 3.0).params["w"])
      np.testing.assert_array_equal(restored.state.params["b"], _state(5, 3.0).params["b"])
      self.assertEqual(restored.input_state, {"seed": 2**100, "num_batches": 5})
      older = ckpt.restore(_abstract(_state(0)), step=0)
      np.testing.assert_array_equal(older.state.params["b"], np.ones(3))

  def test_no_checkpoint_restores_nothing(self):
    with self._checkpointer() as ckpt:
      self.assertIsNone(ckpt.latest_step())
      self.assertIsNone(ckpt.restore(_abstract(_state(0))))

  def test_max_to_keep_prunes_the_oldest(self):
    with self._checkpointer(interval=5, keep=2) as ckpt:
      for s in range(0, 20, 5):
        self.assertTrue(ckpt.save(s, _state(s), {}))
      ckpt.close()
      self.assertEqual(ckpt.all_steps(), [10, 15])
    self.assertEqual(
        _step_dirs(os.path.join(self.job_log_dir, "checkpoints")),
        ["checkpoint_00000010", "checkpoint_00000015"],
    )

  def test_force_saves_off_interval_but_never_an_old_step(self):
    with self._checkpointer(interval=5) as ckpt:
      self.assertTrue(ckpt.save(0, _state(0), {}))
      self.assertFalse(ckpt.save(3, _state(3), {}))
      self.assertTrue(ckpt.save(3, _state(3), {}, force=True))
      self.assertFalse(ckpt.save(0, _state(0), {}))
      ckpt.close()
      self.assertEqual(ckpt.all_steps(), [0, 3])

  def test_state_may_be_donated_right_after_save(self):
    # The trainer saves, then donates the same buffers to the next step. The
    # save must have copied them first, or the checkpoint holds garbage.
    state = _state(5, scale=2.0)
    want = np.asarray(state.params["w"]).copy()
    overwrite = jax.jit(
        lambda s: jax.tree.map(lambda x: x * 0 - 7, s), donate_argnums=0
    )
    with self._checkpointer() as ckpt:
      ckpt.save(5, state, {})
      new_state = overwrite(state)
      self.assertTrue(state.params["w"].is_deleted())
      del new_state
    with self._checkpointer() as ckpt:
      restored = ckpt.restore(_abstract(_state(0)))
    np.testing.assert_array_equal(restored.state.params["w"], want)


if __name__ == "__main__":
  absltest.main()
