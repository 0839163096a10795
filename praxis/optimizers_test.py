"""Tests for praxis.optimizers against hand-written numpy update rules."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

from praxis import optimizers
from praxis import schedules
from praxis import sharding

P = jax.sharding.PartitionSpec
RNG = np.random.RandomState(0)
PARAMS = {
  "dense": {"w": RNG.randn(3, 4).astype(np.float32), "b": RNG.randn(4).astype(np.float32)},
  "ln": {"scale": (1 + 0.1 * RNG.randn(4)).astype(np.float32)},
}
GRADS = [jax.tree.map(lambda p: RNG.randn(*p.shape).astype(np.float32), PARAMS) for _ in range(4)]


def _flat(tree):
  return {
    optimizers.param_path(p): np.asarray(v, np.float64)
    for p, v in jax.tree_util.tree_leaves_with_path(tree)
  }


def _run(cfg, grads=GRADS, params=PARAMS):
  """Applies the optimizer built from cfg to `grads` in turn; returns params after each step."""
  tx = optimizers.build(cfg, params)
  state = tx.init(params)
  step = jax.jit(lambda g, s, p: tx.update(g, s, p))
  history = []
  for g in grads:
    updates, state = step(g, state, params)
    params = optax.apply_updates(params, updates)
    history.append(_flat(params))
  return history, state


def _numpy_run(update_rule, grads=GRADS, params=PARAMS):
  """Same with `update_rule(name, t, p, g, slots) -> new p` in float64 numpy."""
  p = _flat(params)
  slots = {name: {} for name in p}
  history = []
  for t, g in enumerate(grads, start=1):
    g = _flat(g)
    p = {name: update_rule(name, t, p[name], g[name], slots[name]) for name in p}
    history.append(dict(p))
  return history


class OptimizersTest(absltest.TestCase):
  def assertHistoriesClose(self, got, expected, rtol=1e-5, atol=1e-6):
    for t, (g_step, e_step) in enumerate(zip(got, expected)):
      for name in e_step:
        np.testing.assert_allclose(
          g_step[name], e_step[name], rtol=rtol, atol=atol, err_msg=f"step {t + 1}, {name}"
        )

  def test_adam_matches_numpy_with_pax_defaults(self):
    cfg = optimizers.Adam.HParams.config(learning_rate=0.1)
    opt = cfg.Instantiate()
    self.assertEqual((opt.beta1, opt.beta2, opt.epsilon), (0.9, 0.999, 1e-6))

    def adam(name, t, p, g, s, b1=0.9, b2=0.999, eps=1e-6, lr=0.1):
      s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
      s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
      u = (s["m"] / (1 - b1**t)) / (np.sqrt(s["v"] / (1 - b2**t)) + eps)
      u = u / max(1.0, np.sqrt(np.mean(u * u)) / 1.0)  # Pax's clip_threshold = 1
      return p - lr * u

    self.assertHistoriesClose(_run(cfg)[0], _numpy_run(adam))

  def test_adam_update_capping(self):
    # clip_threshold 0.3 binds: every tensor's update RMS is cut to 0.3 (times lr).
    cfg = optimizers.Adam.HParams.config(learning_rate=1.0, beta2=0.99, clip_threshold=0.3)

    def adam(name, t, p, g, s, b1=0.9, b2=0.99, eps=1e-6):
      s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
      s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
      u = (s["m"] / (1 - b1**t)) / (np.sqrt(s["v"] / (1 - b2**t)) + eps)
      return p - u / max(1.0, np.sqrt(np.mean(u * u)) / 0.3)

    self.assertHistoriesClose(_run(cfg)[0], _numpy_run(adam))

  def test_adamw_decoupled_decay_with_exclusion(self):
    lr, wd = 0.05, 0.5
    cfg = optimizers.AdamW.HParams.config(
      learning_rate=lr,
      weight_decay=wd,
      clip_threshold=0.0,
      weight_decay_exclude=optimizers.EXCLUDE_BIASES_AND_NORMS,
    )

    def adamw(name, t, p, g, s, b1=0.9, b2=0.999, eps=1e-6):
      s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
      s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
      u = (s["m"] / (1 - b1**t)) / (np.sqrt(s["v"] / (1 - b2**t)) + eps)
      decays = name == "dense/w"  # b and ln/scale are excluded
      return p - lr * (u + (wd * p if decays else 0.0))

    got = _run(cfg)[0]
    self.assertHistoriesClose(got, _numpy_run(adamw))
    # The exclusion matters: without it the bias would differ.
    cfg_all = cfg.clone().set(weight_decay_exclude=None)
    self.assertGreater(np.abs(_run(cfg_all)[0][-1]["dense/b"] - got[-1]["dense/b"]).max(), 1e-3)

  def test_decay_mask_paths(self):
    mask = optimizers.decay_mask(optimizers.EXCLUDE_BIASES_AND_NORMS, PARAMS)
    self.assertEqual(mask, {"dense": {"w": True, "b": False}, "ln": {"scale": False}})
    # A name that merely ends in "b" is still decayed; only whole path components match.
    mask = optimizers.decay_mask(
      optimizers.EXCLUDE_BIASES_AND_NORMS, {"emb": 0.0, "x/b": 0.0, "per_dim_scale": 0.0}
    )
    self.assertEqual(mask, {"emb": True, "x/b": False, "per_dim_scale": False})

  def test_sgd_momentum(self):
    for nesterov in (False, True):
      cfg = optimizers.Sgd.HParams.config(learning_rate=0.1, momentum=0.9, nesterov=nesterov)

      def sgd(name, t, p, g, s, mu=0.9, lr=0.1):
        s["t"] = g + mu * s.get("t", 0)
        return p - lr * (g + mu * s["t"] if nesterov else s["t"])

      self.assertHistoriesClose(_run(cfg)[0], _numpy_run(sgd))

  def test_lion_with_weight_decay(self):
    lr, wd = 0.01, 0.1
    cfg = optimizers.Lion.HParams.config(learning_rate=lr, weight_decay=wd)

    def lion(name, t, p, g, s, b1=0.9, b2=0.99):
      m = s.get("m", 0)
      u = np.sign(b1 * m + (1 - b1) * g)
      s["m"] = b2 * m + (1 - b2) * g
      return p - lr * (u + wd * p)

    self.assertHistoriesClose(_run(cfg)[0], _numpy_run(lion))

  def test_adafactor_first_step_factored(self):
    # A 4x6 matrix factored with min_dim_size_to_factor=2. Step 1: decay 1 - 1**-0.8 = 0, so the
    # row/column statistics are the means of g^2 + eps.
    p = {"w": RNG.randn(4, 6).astype(np.float32)}
    g = {"w": RNG.randn(4, 6).astype(np.float32)}
    lr, eps = 0.1, 1e-30
    cfg = optimizers.Adafactor.HParams.config(learning_rate=lr, min_dim_size_to_factor=2)
    got = _run(cfg, grads=[g], params=p)[0][0]["w"]

    gw, pw = g["w"].astype(np.float64), p["w"].astype(np.float64)
    g2 = gw * gw + eps
    row, col = g2.mean(axis=1), g2.mean(axis=0)  # [4], [6]
    v = np.outer(row, col) / row.mean()  # [4, 6]
    u = gw / np.sqrt(v)
    u = u / max(1.0, np.sqrt(np.mean(u * u)))  # clipping_threshold 1
    u = u * max(np.sqrt(np.mean(pw * pw)), 1e-3)  # multiply_by_parameter_scale
    np.testing.assert_allclose(got, pw - lr * u, rtol=1e-5, atol=1e-6)

  def test_global_norm_clipping(self):
    # SGD without momentum: the update is -lr * g * min(1, c / ||g||).
    big = jax.tree.map(lambda g: 10 * g, GRADS[0])
    small = jax.tree.map(lambda g: 1e-3 * g, GRADS[0])
    c, lr = 1.0, 0.5
    cfg = optimizers.Sgd.HParams.config(learning_rate=lr, clip_gradient_norm_to_value=c)
    for grads in (big, small):
      norm = np.sqrt(sum(np.sum(np.square(v)) for v in _flat(grads).values()))
      got = _run(cfg, grads=[grads])[0][0]
      for name, g in _flat(grads).items():
        expected = _flat(PARAMS)[name] - lr * g * min(1.0, c / norm)
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-7, err_msg=name)

  def test_pax_single_norm_clipping_and_l2(self):
    # SGD: each tensor clipped to norm c on its own, then + l2 * p (vectors skipped).
    c, lr, l2 = 0.5, 0.1, 0.01
    cfg = optimizers.Sgd.HParams.config(
      learning_rate=lr,
      clip_gradient_single_norm_to_value=c,
      l2_regularizer_weight=l2,
      skip_lp_1d_vectors=True,
    )
    got = _run(cfg, grads=[GRADS[0]])[0][0]
    params = _flat(PARAMS)
    for name, g in _flat(GRADS[0]).items():
      clipped = g * min(1.0, c / np.linalg.norm(g))
      reg = l2 * params[name] if params[name].ndim > 1 else 0.0
      np.testing.assert_allclose(
        got[name], params[name] - lr * (clipped + reg), rtol=1e-5, atol=1e-7, err_msg=name
      )
    with self.assertRaisesRegex(ValueError, "one of"):
      optimizers.build(
        optimizers.Sgd.HParams.config(
          clip_gradient_norm_to_value=1.0, clip_gradient_single_norm_to_value=1.0
        )
      )

  def test_sharded_adafactor_adam_decay(self):
    # Pax's set_default_adafactor: decay_method='adam' with decay_adam=0.99 has decay
    # 0.99 * (1 - 0.99**(t-1)) / (1 - 0.99**t) at t = step + 1: 0 at the first step, so the
    # factored statistics are the means of g^2 + eps, as Adafactor's first step; no momentum
    # state yet matters (beta1 = 0.9 of a zero start, not debiased).
    p = {"w": RNG.randn(4, 6).astype(np.float32)}
    g = {"w": RNG.randn(4, 6).astype(np.float32)}
    lr, eps = 0.1, 1e-30
    cfg = optimizers.ShardedAdafactor.HParams.config(
      learning_rate=lr, decay_method="adam", decay_adam=0.99, beta1=0.9, min_dim_size_to_factor=2
    )
    got = _run(cfg, grads=[g], params=p)[0][0]["w"]
    gw, pw = g["w"].astype(np.float64), p["w"].astype(np.float64)
    g2 = gw * gw + eps
    row, col = g2.mean(axis=1), g2.mean(axis=0)
    u = gw / np.sqrt(np.outer(row, col) / row.mean())
    u = u / max(1.0, np.sqrt(np.mean(u * u)))  # clip_threshold 1
    np.testing.assert_allclose(got, pw - lr * 0.1 * u, rtol=1e-5, atol=1e-6)
    self.assertAlmostEqual(
      float(optimizers._decay_rate_adam(1, 0.99)), 0.99 * 0.01 / (1 - 0.99**2), places=6
    )
    with self.assertRaisesRegex(ValueError, "decay_method"):
      optimizers.build(optimizers.ShardedAdafactor.HParams.config())

  def test_ema_after_k_steps(self):
    decay = 0.8
    cfg = optimizers.Sgd.HParams.config(learning_rate=0.1, momentum=0.5, ema_decay=decay)
    history, state = _run(cfg)
    ema = _flat(PARAMS)
    for params in history:  # the EMA starts at the initial params and follows each new value
      ema = {n: decay * ema[n] + (1 - decay) * params[n] for n in ema}
    got = _flat(optimizers.ema_params(state))
    for name in ema:
      np.testing.assert_allclose(got[name], ema[name], rtol=1e-5, atol=1e-6, err_msg=name)
    with self.assertRaisesRegex(ValueError, "ema_decay > 0"):
      optimizers.ema_params(_run(optimizers.Sgd.HParams.config())[1])

  def test_schedule_and_current_learning_rate(self):
    cfg = optimizers.Sgd.HParams.config(
      learning_rate=2.0, lr_schedule=schedules.Linear.HParams.config(start=(0, 0.0), limit=(4, 1.0))
    )
    history, state = _run(cfg, grads=GRADS[:3])
    # Update k (0-based) used lr 2 * k / 4: the first one is 0, so params stay the same.
    first = history[0]
    for name, value in _flat(PARAMS).items():
      np.testing.assert_allclose(first[name], value, err_msg=name)
    second = history[1]
    for name, g in _flat(GRADS[1]).items():
      np.testing.assert_allclose(second[name], first[name] - 0.5 * g, rtol=1e-5, err_msg=name)
    # After 3 updates the next one uses 2 * 3/4.
    self.assertAlmostEqual(float(optimizers.current_learning_rate(cfg, state)), 1.5, places=6)
    self.assertAlmostEqual(float(optimizers.learning_rate_fn(cfg)(10)), 2.0, places=6)

  def test_lm_cloud_adam(self):
    # Pax's set_default_adam for lm_cloud, as a config; warm-up 4000 from 0.
    cfg = optimizers.Adam.HParams.config(
      learning_rate=2.5e-4,
      beta2=0.99,
      weight_decay=1e-3,
      clip_gradient_norm_to_value=5.0,
      lr_schedule=schedules.LinearRampupExponentialDecay.HParams.config(
        warmup_steps=4000, decay_start=4001, decay_end=300000, min_ratio=0.1, max=1.0
      ),
    )
    lr = optimizers.learning_rate_fn(cfg)
    np.testing.assert_allclose(
      [float(lr(s)) for s in (0, 300, 4000, 300000)],
      [0.0, 2.5e-4 * 300 / 4000, 2.5e-4, 2.5e-5],
      rtol=1e-6,
    )

  def test_boxed_params_under_eval_shape(self):
    import flax.linen as nn  # pylint: disable=g-import-not-at-top

    boxed = {
      "w": nn.LogicallyPartitioned(jnp.zeros((256, 256)), ("embed", "mlp")),
      "b": nn.LogicallyPartitioned(jnp.zeros((256,)), ("mlp",)),
    }
    mesh = sharding.make_mesh((1, 1, 1))
    for cfg in (
      optimizers.Adam.HParams.config(
        weight_decay=0.1, ema_decay=0.9, weight_decay_exclude=r"(^|/)b$"
      ),
      optimizers.Adafactor.HParams.config(),
    ):
      tx = optimizers.build(cfg, boxed)
      state = jax.eval_shape(tx.init, boxed)
      # Every statistic of the parameters' rank is sharded like its parameter.
      shardings = sharding.logical_to_shardings(state, mesh)
      leaves = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, nn.Partitioned))
      specs = [s.spec for s in jax.tree.leaves(shardings)]
      self.assertLen(specs, len(leaves))
      for leaf, spec in zip(leaves, specs):
        if isinstance(leaf, nn.Partitioned) and leaf.value.ndim == len(leaf.names):
          self.assertEqual(spec, sharding.logical_to_mesh_spec(leaf.names))
      if isinstance(cfg.Instantiate(), optimizers.Adam):  # mu, nu and the EMA of w
        self.assertLen([s for s in specs if s == P("data", "mdl")], 3)
      else:  # Adafactor factors w: its row / column statistics are replicated.
        self.assertNotIn(P("data", "mdl"), specs)
    self.assertEqual(optimizers.decay_mask(r"(^|/)b$", boxed)["b"].value, False)

  def test_bad_configs(self):
    with self.assertRaises(AttributeError):
      optimizers.Adam.HParams.config().beta_1 = 0.5
    with self.assertRaisesRegex(ValueError, "ema_decay must be in"):
      optimizers.build(optimizers.Adam.HParams.config(ema_decay=1.0))
    with self.assertRaises(Exception):
      optimizers.build(optimizers.Adam.HParams.config(weight_decay=0.1, weight_decay_exclude="("))
    with self.assertRaisesRegex(TypeError, "optimizer config"):
      optimizers.build(schedules.Constant())


if __name__ == "__main__":
  absltest.main()
