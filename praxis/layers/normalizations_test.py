"""Tests for praxis.layers.normalizations against flax.linen and numpy, forward and gradient."""

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis.layers import normalizations


def _grads(fn, params, x, cot):
  """Gradients of sum(fn(params, x) * cot) with respect to params and x."""
  return jax.grad(lambda p, v: jnp.sum(fn(p, v) * cot), argnums=(0, 1))(params, x)


class LayerNormTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    # A non-zero mean and a non-unit spread per row, so a missing centering or scaling shows.
    self.x = 3.0 + 2.0 * jax.random.normal(jax.random.key(0), (2, 3, 6))
    self.cot = jax.random.normal(jax.random.key(1), (2, 3, 6))
    self.scale = jax.random.uniform(jax.random.key(2), (6,), minval=0.5, maxval=1.5)
    self.bias = jax.random.normal(jax.random.key(3), (6,))

  def test_matches_flax_layer_norm_forward_and_gradient(self):
    layer = normalizations.LayerNorm.HParams(dim=6, epsilon=1e-5, direct_scale=True).Instantiate()
    variables = layer.init(jax.random.key(0), self.x)
    np.testing.assert_allclose(variables["params"]["scale"], np.ones(6))
    np.testing.assert_allclose(variables["params"]["bias"], np.zeros(6))
    params = {"params": {"scale": self.scale, "bias": self.bias}}
    ref = nn.LayerNorm(epsilon=1e-5)
    np.testing.assert_allclose(
      layer.apply(params, self.x), ref.apply(params, self.x), rtol=1e-5, atol=1e-5
    )
    ours = _grads(layer.apply, params, self.x, self.cot)
    theirs = _grads(ref.apply, params, self.x, self.cot)
    for name in ("scale", "bias"):
      np.testing.assert_allclose(
        ours[0]["params"][name], theirs[0]["params"][name], rtol=1e-4, atol=1e-5
      )
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-4, atol=1e-5)

  def test_matches_numpy_and_options(self):
    x = np.asarray(self.x, np.float64)
    normed = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    scale, bias = np.asarray(self.scale), np.asarray(self.bias)
    cases = {
      # Pax's default: direct_scale=False, y * (1 + scale).
      "default_one_plus_scale": (
        dict(),
        {"scale": scale, "bias": bias},
        normed * (1 + scale) + bias,
      ),
      "direct": (dict(direct_scale=True), {"scale": scale, "bias": bias}, normed * scale + bias),
      "no_bias": (dict(use_bias=False), {"scale": scale}, normed * (1 + scale)),
      "neither": (dict(use_scale=False, use_bias=False), {}, normed),
    }
    for name, (kwargs, params, expected) in cases.items():
      with self.subTest(name):
        layer = normalizations.LayerNorm.HParams(dim=6, **kwargs).Instantiate()
        init = layer.init(jax.random.key(0), self.x).get("params", {})
        self.assertEqual(set(init), set(params))
        out = layer.apply({"params": params}, self.x)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)

  def test_bfloat16_activations_float32_statistics(self):
    layer = normalizations.LayerNorm.HParams(
      dim=6, fprop_dtype=jnp.bfloat16, reductions_in_fp32=True
    ).Instantiate()
    x = (1000.0 + self.x).astype(jnp.bfloat16)  # large offset: bf16 statistics would be poor
    variables = layer.init(jax.random.key(0), x)
    out = layer.apply(variables, x)
    self.assertEqual(out.dtype, jnp.bfloat16)
    xf = np.asarray(x, np.float64)
    expected = (xf - xf.mean(-1, keepdims=True)) / np.sqrt(xf.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(np.asarray(out, np.float32), expected, atol=0.03)


class RmsNormTest(absltest.TestCase):
  def test_matches_flax_rms_norm_forward_and_gradient(self):
    x = 1.0 + jax.random.normal(jax.random.key(0), (4, 5, 8))
    cot = jax.random.normal(jax.random.key(1), (4, 5, 8))
    layer = normalizations.RmsNorm.HParams(dim=8, epsilon=1e-6).Instantiate()
    variables = layer.init(jax.random.key(0), x)
    np.testing.assert_allclose(variables["params"]["scale"], np.ones(8))
    params = {
      "params": {"scale": jax.random.uniform(jax.random.key(2), (8,), minval=0.5, maxval=2.0)}
    }
    ref = nn.RMSNorm(epsilon=1e-6)
    np.testing.assert_allclose(layer.apply(params, x), ref.apply(params, x), rtol=1e-5, atol=1e-5)
    ours = _grads(layer.apply, params, x, cot)
    theirs = _grads(ref.apply, params, x, cot)
    np.testing.assert_allclose(
      ours[0]["params"]["scale"], theirs[0]["params"]["scale"], rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-4, atol=1e-5)
    # And numpy, with the 1 + scale variant.
    layer = normalizations.RmsNorm.HParams(dim=8, direct_scale=False).Instantiate()
    xn, s = np.asarray(x, np.float64), np.asarray(params["params"]["scale"], np.float64)
    expected = xn / np.sqrt(np.mean(xn**2, -1, keepdims=True) + 1e-6) * (1 + s)
    np.testing.assert_allclose(layer.apply(params, x), expected, rtol=1e-5, atol=1e-5)

  def test_no_scale_has_no_weights(self):
    layer = normalizations.RmsNormNoScale.HParams(dim=8).Instantiate()
    x = 1.0 + jax.random.normal(jax.random.key(0), (2, 8))
    self.assertEqual(layer.init(jax.random.key(0), x), {})
    xn = np.asarray(x, np.float64)
    np.testing.assert_allclose(
      layer.apply({}, x), xn / np.sqrt(np.mean(xn**2, -1, keepdims=True) + 1e-6), rtol=1e-5
    )


class BatchNormTest(absltest.TestCase):
  def test_training_matches_flax_batch_norm_and_updates_moving_stats(self):
    x = 2.0 + 3.0 * jax.random.normal(jax.random.key(0), (4, 5, 3))
    cot = jax.random.normal(jax.random.key(1), (4, 5, 3))
    layer = normalizations.BatchNorm.HParams(dim=3, decay=0.9).Instantiate()
    variables = layer.init(jax.random.key(0), x)
    self.assertEqual(sorted(variables["params"]), ["beta", "gamma"])
    self.assertEqual(sorted(variables["non_trainable"]), ["moving_mean", "moving_variance"])
    # Pax's gamma is reparameterised: the scale is 1 + gamma.
    params = {"gamma": jnp.array([-0.5, 0.0, 1.0]), "beta": jnp.array([0.1, -0.2, 0.3])}
    stats = variables["non_trainable"]
    ref = nn.BatchNorm(use_running_average=False, momentum=0.9, epsilon=1e-3)
    ref_params = {"scale": 1.0 + params["gamma"], "bias": params["beta"]}
    ref_stats = {"mean": stats["moving_mean"], "var": stats["moving_variance"]}
    ours_out, ours_new = layer.apply(
      {"params": params, "non_trainable": stats}, x, mutable=["non_trainable"]
    )
    ref_out, ref_new = ref.apply(
      {"params": ref_params, "batch_stats": ref_stats}, x, mutable=["batch_stats"]
    )
    np.testing.assert_allclose(ours_out, ref_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
      ours_new["non_trainable"]["moving_mean"], ref_new["batch_stats"]["mean"], rtol=1e-5
    )
    np.testing.assert_allclose(
      ours_new["non_trainable"]["moving_variance"], ref_new["batch_stats"]["var"], rtol=1e-5
    )

    def ours_fn(p, v):
      return layer.apply({"params": p, "non_trainable": stats}, v)

    def ref_fn(p, v):
      return ref.apply(
        {"params": {"scale": 1.0 + p["gamma"], "bias": p["beta"]}, "batch_stats": ref_stats},
        v,
        mutable=["batch_stats"],
      )[0]

    ours_g, ref_g = _grads(ours_fn, params, x, cot), _grads(ref_fn, params, x, cot)
    for name in ("gamma", "beta"):
      np.testing.assert_allclose(ours_g[0][name], ref_g[0][name], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours_g[1], ref_g[1], rtol=1e-4, atol=1e-5)

    # Eval (JaxContext do_eval) uses the moving statistics, not the batch's.
    new_vars = {"params": params, "non_trainable": ours_new["non_trainable"]}
    mean = np.asarray(ours_new["non_trainable"]["moving_mean"])
    var = np.asarray(ours_new["non_trainable"]["moving_variance"])
    expected = (np.asarray(x) - mean) / np.sqrt(var + 1e-3) * (
      1 + np.asarray(params["gamma"])
    ) + np.asarray(params["beta"])
    with base_layer.JaxContext.new_context(hparams=base_layer.JaxContext.HParams(do_eval=True)):
      np.testing.assert_allclose(layer.apply(new_vars, x), expected, rtol=1e-5, atol=1e-5)

  def test_padded_positions_do_not_count_and_are_zeroed(self):
    x = jax.random.normal(jax.random.key(0), (2, 4, 3))
    paddings = jnp.array([[0, 0, 1, 1], [0, 0, 0, 1]], jnp.float32)
    # Garbage in the padded positions must not change anything at the real ones.
    garbage = jnp.where(paddings[..., None] > 0, 1e3, x)
    layer = normalizations.BatchNorm.HParams(dim=3).Instantiate()
    variables = layer.init(jax.random.key(0), x)
    out = np.asarray(layer.apply(variables, garbage, paddings))
    real = np.asarray(x)[np.asarray(paddings) == 0]  # [5, 3]
    expected = (real - real.mean(0)) / np.sqrt(real.var(0) + 1e-3)
    np.testing.assert_allclose(out[np.asarray(paddings) == 0], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[np.asarray(paddings) == 1], 0.0)


class GroupNormTest(absltest.TestCase):
  def test_matches_numpy_with_paddings(self):
    x = jax.random.normal(jax.random.key(0), (2, 5, 8)) * 2.0 + 1.0
    paddings = jnp.array([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], jnp.float32)
    layer = normalizations.GroupNorm.HParams(
      name="gn", dim=8, num_groups=2, input_rank=3
    ).Instantiate()
    variables = layer.init(jax.random.key(0), x, paddings)
    self.assertEqual(variables["params"]["gamma"].shape, (1, 1, 8))
    gamma = jnp.linspace(-0.5, 0.5, 8).reshape(1, 1, 8)
    params = {"params": {"gamma": gamma, "beta": jnp.zeros((1, 1, 8))}}
    out = np.asarray(layer.apply(params, x, paddings))
    xn, pad = np.asarray(x, np.float64), np.asarray(paddings)
    for b in range(2):
      valid = xn[b][pad[b] == 0]  # [T', 8]
      for g in range(2):
        group = valid[:, 4 * g : 4 * g + 4]
        normed = (group - group.mean()) / np.sqrt(group.var() + 1e-3)
        np.testing.assert_allclose(
          out[b][pad[b] == 0][:, 4 * g : 4 * g + 4],
          normed * (1 + np.asarray(gamma)[0, 0, 4 * g : 4 * g + 4]),
          rtol=1e-4,
          atol=1e-4,
        )
      np.testing.assert_allclose(out[b][pad[b] == 1], 0.0)


if __name__ == "__main__":
  absltest.main()
