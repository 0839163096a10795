"""Pax's TrainState fields, and checkpoints written in the layout before them still restoring."""

import shutil
import tempfile

from absl.testing import absltest
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml import checkpoints
from paxml import train_state_names
from paxml import train_states
from paxml import warm_start


class _OldTrainState(flax.struct.PyTreeNode):
  """The train state's fields before it took Pax's (what old checkpoints hold)."""

  step: jax.Array
  params: dict
  opt_state: optax.OptState
  skipped_steps: jax.Array


_TX = optax.adam(0.1)


def _params(scale: float) -> dict:
  return {"lm": {"w": jnp.arange(6.0).reshape(2, 3) * scale, "b": jnp.ones(3) * scale}}


def _old(step: int, scale: float) -> _OldTrainState:
  params = _params(scale)
  return _OldTrainState(
    step=jnp.asarray(step, jnp.int32),
    params=params,
    opt_state=_TX.init(params),
    skipped_steps=jnp.asarray(2, jnp.int32),
  )


def _new(step: int, scale: float) -> train_states.TrainState:
  params = _params(scale)
  return train_states.make_train_state(
    jnp.asarray(step, jnp.int32), params, _TX.init(params), jnp.asarray(0, jnp.int32)
  )


def _abstract(state):
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
    jax.eval_shape(lambda: state),
  )


class TrainStateTest(absltest.TestCase):
  def test_fields_new_state_and_eval_state(self):
    state = _new(3, 1.0)
    self.assertEqual(
      [f.name for f in state.__dataclass_fields__.values()],
      ["step", "mdl_vars", "opt_states", "extra_state"],
    )
    self.assertEqual(train_states.TrainState(step=0, mdl_vars={}, opt_states=[]).extra_state, ())
    nxt = state.new_state(_params(2.0), state.opt_states, state.extra_state)
    self.assertEqual(int(nxt.step), 4)
    np.testing.assert_array_equal(nxt.mdl_vars["lm"]["w"], _params(2.0)["lm"]["w"])
    evaluated = state.to_eval_state()
    self.assertEqual((evaluated.opt_states, evaluated.extra_state), ([], ()))
    self.assertIs(evaluated.mdl_vars, state.mdl_vars)


class LegacyCheckpointTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.job_log_dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.job_log_dir)
    with checkpoints.Checkpointer(self.job_log_dir, save_interval_steps=1, max_to_keep=3) as ckpt:
      ckpt.save(7, _old(7, 3.0), {"num_batches": 7}, force=True)
      ckpt.wait_until_finished()

  def test_old_checkpoint_restores_into_pax_fields(self):
    with checkpoints.Checkpointer(self.job_log_dir, save_interval_steps=1, max_to_keep=3) as ckpt:
      restored = ckpt.restore(_abstract(_new(0, 1.0)))
    self.assertIsInstance(restored.state, train_states.TrainState)
    self.assertEqual((restored.step, int(restored.state.step)), (7, 7))
    np.testing.assert_array_equal(
      restored.state.mdl_vars["params"]["lm"]["w"], _params(3.0)["lm"]["w"]
    )
    self.assertEqual(int(restored.state.extra_state[train_states.SKIPPED_STEPS]), 2)
    (adam,) = [s for s in restored.state.opt_states[0] if isinstance(s, optax.ScaleByAdamState)]
    np.testing.assert_array_equal(adam.mu["lm"]["b"], np.zeros(3))
    self.assertEqual(restored.input_state, {"num_batches": 7})

  def test_reader_reads_params_of_both_layouts(self):
    with checkpoints.Checkpointer(self.job_log_dir, save_interval_steps=1, max_to_keep=3) as ckpt:
      ckpt.save(9, _new(9, 5.0), {}, force=True)
      ckpt.wait_until_finished()
    abstract_params = _abstract(_params(1.0))
    with checkpoints.CheckpointReader(self.job_log_dir) as reader:
      for step, scale in ((7, 3.0), (9, 5.0)):
        got_step, params = reader.restore_params(abstract_params, step)
        self.assertEqual(got_step, step)
        np.testing.assert_array_equal(params["lm"]["b"], np.full(3, scale))

  def test_warm_start_names_agree_across_layouts(self):
    new_names = set(warm_start.named_leaves(_new(0, 1.0)))
    old_names = set(warm_start.named_leaves(_old(0, 1.0).__dict__))
    self.assertEqual(new_names, old_names)
    self.assertIn("params/lm/w", new_names)
    self.assertIn("extra_state/skipped_steps", new_names)
    self.assertEqual(train_state_names.pax_name("mdl_vars/params/lm/w"), "params/lm/w")
    self.assertEqual(train_state_names.pax_name("opt_state/0/mu/lm/w"), "opt_states/0/0/mu/lm/w")


if __name__ == "__main__":
  absltest.main()
