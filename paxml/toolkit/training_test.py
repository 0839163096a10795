"""The step builder on a BatchNorm model: jit and pmap (4 fake CPU devices)."""

import os

os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
)

from unittest import mock  # pylint: disable=g-import-not-at-top

from absl.testing import absltest  # pylint: disable=g-import-not-at-top
import flax.jax_utils
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml import toolkit

_MOMENTUM = 0.9  # flax BatchNorm: ra = momentum * ra + (1 - momentum) * batch stat.


class BnModel(nn.Module):
  @nn.compact
  def __call__(self, x, *, train: bool):
    x = nn.BatchNorm(use_running_average=not train, momentum=_MOMENTUM)(x)
    self.sow("tensorboard", "x_mean", toolkit.ScalarSummary(x.mean()))
    return nn.Dense(1)(x)[:, 0]


class BnTask(toolkit.TrainTask):
  def __init__(self):
    super().__init__(BnModel(), example_args=(jnp.zeros((2, 3)),), example_kwargs={"train": False})

  def compute_loss(self, params, batch, *, extra_vars, prng_key, step):
    del prng_key, step
    y, mutated = self.model.apply(
      {**extra_vars, "params": params, "tensorboard": {}},
      batch["x"],
      train=True,
      mutable=["batch_stats", "tensorboard"],
    )
    loss = jnp.mean((y - batch["y"]) ** 2)
    return loss, (mutated, {"pred_mean": y.mean()})


def _batch(n=16):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(n, 3)).astype(np.float32) * [1.0, 2.0, 3.0] + [0.5, -1.0, 2.0]
  return {"x": x.astype(np.float32), "y": x.sum(-1).astype(np.float32)}


def _loss_of_params(task, state, batch):
  def loss(params):
    return task.compute_loss(params, batch, extra_vars=state.extra_vars, prng_key=None, step=0)[0]

  return loss


class TrainingStepTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.assertEqual(jax.local_device_count(), 4)
    self.task = BnTask()
    self.tx = optax.sgd(0.1)
    self.state = self.task.initialize_train_state(jax.random.PRNGKey(0), self.tx)
    self.batch = _batch()

  def test_jit_step_updates_batch_stats_and_params(self):
    step_fn = self.task.make_training_step_fn().jit()
    new_state, info = step_fn(self.state, self.batch, jax.random.PRNGKey(1))
    self.assertEqual(int(new_state.step), 1)
    # bobbin's jit path left these at zero.
    np.testing.assert_allclose(
      new_state.extra_vars["batch_stats"]["BatchNorm_0"]["mean"],
      (1 - _MOMENTUM) * self.batch["x"].mean(0),
      rtol=1e-5,
    )
    np.testing.assert_allclose(
      new_state.extra_vars["batch_stats"]["BatchNorm_0"]["var"],
      _MOMENTUM * 1.0 + (1 - _MOMENTUM) * self.batch["x"].var(0),
      rtol=1e-4,
    )
    # Sown summaries are kept as well.
    summary = new_state.extra_vars["tensorboard"]["x_mean"][0]
    self.assertIsInstance(summary, toolkit.ScalarSummary)
    # Parameters moved by -lr * grad, the gradient taken independently here.
    grads = jax.grad(_loss_of_params(self.task, self.state, self.batch))(self.state.params)
    want = jax.tree.map(lambda p, g: p - 0.1 * g, self.state.params, grads)
    jax.tree.map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), new_state.params, want
    )
    np.testing.assert_allclose(
      info.loss, _loss_of_params(self.task, self.state, self.batch)(self.state.params), rtol=1e-6
    )
    self.assertIn("pred_mean", info.loss_aux_out)

  def test_pmap_step_shards_batch_and_averages_grads_and_stats(self):
    step_fn = self.task.make_training_step_fn().pmap("batch")
    replicated = flax.jax_utils.replicate(self.state)
    new_state, info = step_fn(replicated, self.batch, jax.random.PRNGKey(1))
    self.assertEqual(np.shape(info.loss), (4,))
    toolkit.assert_replica_integrity(new_state)
    single = flax.jax_utils.unreplicate(new_state)
    self.assertEqual(int(single.step), 1)
    shards = [jax.tree.map(lambda x, i=i: x[4 * i : 4 * (i + 1)], self.batch) for i in range(4)]
    # Stats: the mean over devices of each shard's statistics.
    want_mean = np.mean([s["x"].mean(0) for s in shards], axis=0)
    want_var = np.mean([s["x"].var(0) for s in shards], axis=0)
    stats = single.extra_vars["batch_stats"]["BatchNorm_0"]
    np.testing.assert_allclose(stats["mean"], (1 - _MOMENTUM) * want_mean, rtol=1e-5)
    np.testing.assert_allclose(stats["var"], _MOMENTUM + (1 - _MOMENTUM) * want_var, rtol=1e-4)
    # Grads: the mean over devices of each shard's gradient.
    grads = [jax.grad(_loss_of_params(self.task, self.state, s))(self.state.params) for s in shards]
    mean_grad = jax.tree.map(lambda *g: np.mean(g, axis=0), *grads)
    want = jax.tree.map(lambda p, g: p - 0.1 * g, self.state.params, mean_grad)
    jax.tree.map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), single.params, want
    )

  def test_errors_explain_what_to_do(self):
    with self.assertRaisesRegex(ValueError, "multiple of # of devices"):
      self.task.make_training_step_fn().pmap("batch")(
        flax.jax_utils.replicate(self.state), _batch(6), jax.random.PRNGKey(0)
      )
    with self.assertRaisesRegex(ValueError, "outside of a pmap context"):
      self.task.make_training_step_fn().pmap("batch").make_base_step_fn()(
        self.state, self.batch, jax.random.PRNGKey(0)
      )

  def test_builder_is_immutable(self):
    base = self.task.make_training_step_fn()
    pmapped = base.pmap("i")
    self.assertIsNone(base.pmap_axis_name)
    self.assertEqual(pmapped.pmap_axis_name, "i")
    self.assertTrue(pmapped.jit().do_jit)
    self.assertFalse(base.do_jit)

  def test_checkpoint_saver_and_restoring_initialize(self):
    directory = self.create_tempdir().full_path
    step_fn = self.task.make_training_step_fn().jit()
    state = self.state
    saver = self.task.make_checkpoint_saver(directory)
    for _ in range(3):
      state, _ = step_fn(state, self.batch, jax.random.PRNGKey(1))
    self.assertTrue(saver(state))
    saver.wait_until_finished()
    restored = self.task.initialize_train_state(
      jax.random.PRNGKey(5), self.tx, checkpoint_path=directory
    )
    self.assertEqual(int(restored.step), 3)
    jax.tree.map(np.testing.assert_array_equal, restored.params, state.params)
    jax.tree.map(
      np.testing.assert_array_equal,
      restored.extra_vars["batch_stats"],
      state.extra_vars["batch_stats"],
    )
    # A missing directory means a fresh start.
    fresh = self.task.initialize_train_state(
      jax.random.PRNGKey(0),
      self.tx,
      checkpoint_path=os.path.join(directory, "nothing_here"),
      compile_init=lambda init: jax.jit(init, static_argnames="train"),
    )
    self.assertEqual(int(fresh.step), 0)

  def test_get_rng_dict_names(self):
    task = toolkit.TrainTask(BnModel(), (), required_rngs=("dropout",))
    rngs = task.get_rng_dict(jax.random.PRNGKey(0), extra_keys=("params",))
    self.assertEqual(sorted(rngs), ["dropout", "params"])
    self.assertFalse(np.array_equal(rngs["dropout"], rngs["params"]))


class ActionsTest(absltest.TestCase):
  def test_progress_publisher_steps_per_sec_and_summaries(self):
    writer = _RecordingWriter()
    publisher = toolkit.PublishTrainingProgress(writer)
    state = toolkit.TrainState.create(
      apply_fn=None,
      params={"w": jnp.ones(1)},
      tx=optax.sgd(1.0),
      extra_vars={"tensorboard": {"layer": {"act": (toolkit.ScalarSummary(2.0),)}}},
    )
    with mock.patch("time.time", return_value=100.0):
      publisher(state.replace(step=10))
    self.assertEqual(writer.scalars, [("summary/layer/act/0", 2.0, 10)])
    with mock.patch("time.time", return_value=110.0):
      publisher(state.replace(step=133))
    self.assertIn(("trainer/steps_per_sec", 12.3, 133), writer.scalars)

  def test_log_writer_logs_through_write_trainer_log(self):
    messages = []

    class Logger:
      def log(self, level, msg, *args):
        messages.append((level, msg % args))

    class Custom(BnTask):
      def write_trainer_log(self, train_state, *, step_info, logger, loglevel):
        logger.log(loglevel, "custom %d", int(train_state.step))

    state = toolkit.TrainState.create(apply_fn=None, params={}, tx=optax.sgd(1.0))
    info = toolkit.StepInfo(loss=np.array([1.0, 2.0]), loss_aux_out=None)
    BnTask().make_log_writer(logger=Logger(), loglevel=20)(state.replace(step=7), step_info=info)
    Custom().make_log_writer(logger=Logger(), loglevel=30)(state.replace(step=8), step_info=info)
    self.assertEqual(messages, [(20, "@step=7, loss=1.500000"), (30, "custom 8")])


class _RecordingWriter:
  def __init__(self):
    self.scalars = []
    self.texts = []

  def scalar(self, tag, value, step):
    self.scalars.append((tag, float(np.asarray(value)), step))

  def text(self, tag, text, step):
    self.texts.append((tag, text, step))


if __name__ == "__main__":
  absltest.main()
