"""Pax's optimizer API (get_grad_transformation and its transformations) against numpy loops."""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
import optax

from praxis import base_hyperparams
from praxis import optimizer_transforms as tx
from praxis import optimizers
from praxis import schedules
from praxis import weight_hparams as wh


def _sgd(**kwargs):
  return base_hyperparams.Config(
    optimizers.ShardedSgd,
    learning_rate=0.5,
    lr_schedule=base_hyperparams.Config(schedules.Constant, value=1.0),
    **kwargs,
  )


def _run(opt, grads, params, var_hparams=None):
  t = opt.get_grad_transformation(var_hparams)
  state = t.init(params)
  for g in grads:
    updates, state = t.update(g, state, params)
    params = optax.apply_updates(params, updates)
  return params, state


class PaxOptimizerApiTest(absltest.TestCase):
  def test_l2_with_skip_collection(self):
    opt = optimizers.instantiate(_sgd(l2_regularizer_weight=0.1))
    params = {"w": jnp.array([1.0, -2.0]), "b": jnp.array([3.0])}
    grads = [{"w": jnp.array([0.5, 0.5]), "b": jnp.array([1.0])}] * 3
    hps = {
      "w": wh.WeightHParams(shape=[2]),
      "b": wh.WeightHParams(
        shape=[1], collections=[wh.WeightHParamsCollection.SKIP_LP_REGULARIZATION]
      ),
    }
    got, _ = _run(opt, grads, params, hps)
    w, b = np.array([1.0, -2.0]), np.array([3.0])
    for g in grads:
      w = w - 0.5 * (np.asarray(g["w"]) + 0.1 * w)
      b = b - 0.5 * np.asarray(g["b"])  # skipped by its collection
    np.testing.assert_allclose(got["w"], w, rtol=1e-6)
    np.testing.assert_allclose(got["b"], b, rtol=1e-6)

  def test_decoupled_weight_decay_follows_the_schedule(self):
    cfg = _sgd(decoupled_weight_decay=0.2)
    cfg.lr_schedule = base_hyperparams.Config(schedules.Linear, start=(0, 1.0), limit=(4, 0.0))
    got, _ = _run(optimizers.instantiate(cfg), [{"w": jnp.array(1.0)}] * 3, {"w": jnp.array(2.0)})
    w = 2.0
    for step in range(3):
      lr = 0.5 * (1 - step / 4)
      w = w - lr * 1.0 - lr * 0.2 * w  # the decay uses the pre-update weight
    self.assertAlmostEqual(float(got["w"]), w, places=5)

  def test_ewc_pulls_back_to_the_first_weights(self):
    opt = optimizers.instantiate(_sgd(ewc_regularizer_weight=0.4))
    grads = [{"w": jnp.array(g)} for g in (1.0, -2.0, 0.5)]
    got, _ = _run(opt, grads, {"w": jnp.array(3.0)})
    w, anchor = 3.0, 3.0
    for g in (1.0, -2.0, 0.5):
      w = w - 0.5 * g - 0.5 * 0.2 * (w - anchor)
    self.assertAlmostEqual(float(got["w"]), w, places=5)

  def test_static_accumulator_applies_the_mean(self):
    acc = optimizers.instantiate(
      base_hyperparams.Config(
        optimizers.ShardedStaticAccumulator,
        optimizer_tpl=base_hyperparams.Config(optimizers.ShardedSgd, momentum=0.5),
        num_sub_batches=2,
        learning_rate=0.1,
        lr_schedule=base_hyperparams.Config(schedules.Constant),
      )
    )
    grads = [1.0, 3.0, -1.0, 5.0, 2.0]
    got, _ = _run(acc, [{"w": jnp.array(g)} for g in grads], {"w": jnp.array(0.0)})
    w, m = 0.0, 0.0
    for pair in ((1.0, 3.0), (-1.0, 5.0)):
      m = 0.5 * m + np.mean(pair)
      w -= 0.1 * m
    self.assertAlmostEqual(float(got["w"]), w, places=6)  # the 5th gradient waits

  def test_ema_of_weights_before_each_update(self):
    opt = optimizers.instantiate(_sgd(ema_decay=0.9))
    got, state = _run(opt, [{"w": jnp.array(1.0)}] * 4, {"w": jnp.array(0.0)})
    ema, w = 0.0, 0.0
    for n in range(4):
      d = min(0.9, (1 + n) / (10 + n))
      ema = ema - (1 - d) * (ema - w)
      w -= 0.5
    self.assertAlmostEqual(float(got["w"]), w)
    self.assertAlmostEqual(float(state[-1].ema["w"]), ema, places=6)

  def test_optax_optimizer_wraps_grad_tx(self):
    cfg = base_hyperparams.Config(
      optimizers.OptaxOptimizer,
      learning_rate=1.0,
      lr_schedule=base_hyperparams.Config(schedules.Constant),
      l1_regularizer_weight=0.5,
      grad_tx=optax.sgd(0.1),
    )
    got, _ = _run(optimizers.instantiate(cfg), [{"w": jnp.array(1.0)}] * 2, {"w": jnp.array(-1.0)})
    w = -1.0
    for _ in range(2):
      w -= 0.1 * (1.0 + 0.5 * np.sign(w))
    self.assertAlmostEqual(float(got["w"]), w, places=6)

  def test_partition_specs_follow_the_weights(self):
    opt = optimizers.instantiate(_sgd(momentum=0.9))
    hps = {"w": wh.WeightHParams(shape=[4, 2], tensor_split_dims_mapping=[-1, 1])}
    t = opt.get_grad_transformation(hps)
    spec = t.init_partition_spec(hps)
    momentum_spec = spec.inner_state[2].m["w"]
    self.assertEqual(momentum_spec.tensor_split_dims_mapping, [-1, 1])
    state = t.init({"w": jnp.zeros([4, 2])})
    specs = tx.partition_params(t, hps, state)
    self.assertEqual(specs[2].m["w"].tensor_split_dims_mapping, [-1, 1])
    self.assertEqual(specs[2].count.tensor_split_dims_mapping, [])

  def test_l1_and_l2_together_are_refused(self):
    with self.assertRaisesRegex(ValueError, "not both"):
      optimizers.instantiate(_sgd(l1_regularizer_weight=0.1, l2_regularizer_weight=0.1))


if __name__ == "__main__":
  absltest.main()
