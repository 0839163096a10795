"""A script written against Pax's library API (trainer_lib, learners, checkpoints), run as is.

The model is a two-layer linear regression; each update is checked against plain SGD computed
here with jax.grad of a hand-written loss, and frozen (bprop-excluded) layers must not move.
"""

import functools
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from paxml import checkpoints
from paxml import learners
from paxml import tasks_lib
from paxml import trainer_lib
from praxis import base_hyperparams
from praxis import base_model
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import schedules
from praxis.layers import linears

NestedMap = py_utils.NestedMap
LR = 0.1


class TwoLayerRegression(base_model.BaseModel):
  """y_hat = (x @ proj) @ head; loss = mean squared error."""

  input_dims: int = 4
  hidden_dims: int = 3

  def setup(self):
    self.create_child(
      "proj",
      pax_fiddle.Config(linears.Linear, input_dims=self.input_dims, output_dims=self.hidden_dims),
    )
    self.create_child(
      "head", pax_fiddle.Config(linears.Linear, input_dims=self.hidden_dims, output_dims=1)
    )

  def compute_predictions(self, input_batch):
    return self.head(self.proj(input_batch.inputs))  # [B, 1]

  def compute_loss(self, predictions, input_batch):
    loss = jnp.mean(jnp.square(predictions[:, 0] - input_batch.targets))
    return NestedMap(loss=(loss, jnp.array(1.0))), NestedMap()


def _task(**learner_fields):
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name="regression_task")
  task_p.model = pax_fiddle.Config(TwoLayerRegression, name="regression")
  lp = task_p.train.learner
  lp.loss_name = "loss"
  lp.optimizer = pax_fiddle.Config(
    optimizers.Sgd, learning_rate=LR, lr_schedule=pax_fiddle.Config(schedules.Constant)
  )
  for name, value in learner_fields.items():
    setattr(lp, name, value)
  return base_hyperparams.instantiate(task_p)


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  return NestedMap(
    inputs=rng.normal(size=(8, 4)).astype(np.float32),
    targets=rng.normal(size=(8,)).astype(np.float32),
  )


def _reference_loss(params, batch):
  """The model's loss written out by hand (praxis Linear: x @ w)."""
  hidden = batch.inputs @ params["proj"]["w"]
  pred = hidden @ params["head"]["w"]
  return jnp.mean(jnp.square(pred[:, 0] - batch.targets))


class PaxLibraryScriptTest(absltest.TestCase):
  def _init(self, task, batch):
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), batch)
    state, provenance = trainer_lib.initialize_model_state(task, jax.random.PRNGKey(0), shapes)
    self.assertEqual(provenance.mdl_vars["params"]["proj"]["w"], "random_init")
    return state

  def test_train_save_restore_as_a_pax_script(self):
    task = _task()
    batch = _batch()
    state = self._init(task, batch)
    self.assertEqual(int(state.step), 0)
    self.assertLen(state.opt_states, 1)
    step_fn = jax.jit(functools.partial(trainer_lib.train_step_single_learner, task))
    key = jax.random.PRNGKey(1)

    params = jax.tree.map(np.asarray, state.mdl_vars["params"])
    losses = []
    for _ in range(3):
      expected_loss, grads = jax.value_and_grad(_reference_loss)(params, batch)
      params = jax.tree.map(lambda p, g: p - LR * g, params, grads)  # plain SGD
      state, out = step_fn(state, key, batch)
      np.testing.assert_allclose(out.loss, expected_loss, rtol=1e-5)
      losses.append(float(out.loss))
    for got, want in zip(jax.tree.leaves(state.mdl_vars["params"]), jax.tree.leaves(params)):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    self.assertLess(losses[-1], losses[0])
    self.assertIn("learning/lr_aggregate_scalar", out.summary_tensors)

    _, eval_out = trainer_lib.eval_step_single_learner(task, state.to_eval_state(), key, batch)
    np.testing.assert_allclose(
      eval_out.weighted_scalars["loss"][0], _reference_loss(params, batch), rtol=1e-5
    )

    with tempfile.TemporaryDirectory() as tmp:
      ckpt_dir = f"{tmp}/checkpoints"
      store = checkpoints.save_checkpoint(state, ckpt_dir)
      store.wait_until_finished()
      store.close()
      shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
      restored = checkpoints.restore_checkpoint(shapes, ckpt_dir)
    self.assertEqual(int(restored.step), 3)
    for got, want in zip(jax.tree.leaves(restored.mdl_vars), jax.tree.leaves(state.mdl_vars)):
      np.testing.assert_array_equal(got, want)

  def _frozen_run(self, **learner_fields):
    task = _task(**learner_fields)
    batch = _batch(1)
    state = self._init(task, batch)
    before = jax.tree.map(np.asarray, state.mdl_vars["params"])
    step_fn = jax.jit(functools.partial(trainer_lib.train_step_single_learner, task))
    for i in range(2):
      state, _ = step_fn(state, jax.random.PRNGKey(i), batch)
    after = state.mdl_vars["params"]
    np.testing.assert_array_equal(after["proj"]["w"], before["proj"]["w"])
    self.assertGreater(float(jnp.max(jnp.abs(after["head"]["w"] - before["head"]["w"]))), 1e-4)
    # The head trains exactly as plain SGD would with proj held fixed.
    params = before
    for _ in range(2):
      grads = jax.grad(_reference_loss)(params, batch)
      params = {
        "proj": params["proj"],
        "head": {"w": params["head"]["w"] - LR * grads["head"]["w"]},
      }
    np.testing.assert_allclose(after["head"]["w"], params["head"]["w"], rtol=1e-5, atol=1e-6)

  def test_bprop_variable_exclusion_freezes_the_matched_layer(self):
    self._frozen_run(bprop_variable_exclusion=[".*proj.*"])

  def test_bprop_variable_inclusion_trains_only_the_matched_layer(self):
    self._frozen_run(bprop_variable_inclusion=[".*head.*"])

  def test_inclusion_and_exclusion_together_is_an_error(self):
    task = _task(bprop_variable_exclusion=[".*proj.*"], bprop_variable_inclusion=[".*head.*"])
    with self.assertRaisesRegex(ValueError, "not both"):
      self._init(task, _batch())

  def test_train_state_metadata_shapes_match_the_state(self):
    task = _task(bprop_variable_exclusion=[".*proj.*"])
    batch = _batch()
    metadata = trainer_lib.create_train_state_metadata(task, batch)
    state = self._init(task, batch)
    self.assertEqual(jax.tree.structure(metadata.unpadded_global_shapes), jax.tree.structure(state))
    self.assertIsNone(metadata.partition_specs)  # No mesh on the model.
    self.assertIsInstance(task.learners[0], learners.Learner)


if __name__ == "__main__":
  absltest.main()
