"""Tests for praxis.layers.normalizations against flax.linen and numpy, forward and gradient."""

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

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
    layer = normalizations.LayerNorm.HParams(dim=6, epsilon=1e-5).Instantiate()
    variables = nn.unbox(layer.init(jax.random.key(0), self.x))
    np.testing.assert_allclose(variables["params"]["scale"], np.ones(6))
    np.testing.assert_allclose(variables["params"]["bias"], np.zeros(6))
    params = {"params": {"scale": self.scale, "bias": self.bias}}
    ref = nn.LayerNorm(epsilon=1e-5)
    np.testing.assert_allclose(layer.apply(params, self.x), ref.apply(params, self.x), rtol=1e-5,
                               atol=1e-5)
    ours = _grads(layer.apply, params, self.x, self.cot)
    theirs = _grads(ref.apply, params, self.x, self.cot)
    for name in ("scale", "bias"):
      np.testing.assert_allclose(ours[0]["params"][name], theirs[0]["params"][name], rtol=1e-4,
                                 atol=1e-5)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-4, atol=1e-5)

  def test_matches_numpy_and_options(self):
    x = np.asarray(self.x, np.float64)
    normed = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    scale, bias = np.asarray(self.scale), np.asarray(self.bias)
    cases = {
        "direct": (dict(), {"scale": scale, "bias": bias}, normed * scale + bias),
        "one_plus_scale": (dict(direct_scale=False), {"scale": scale, "bias": bias},
                           normed * (1 + scale) + bias),
        "no_bias": (dict(use_bias=False), {"scale": scale}, normed * scale),
        "neither": (dict(use_scale=False, use_bias=False), {}, normed),
    }
    for name, (kwargs, params, expected) in cases.items():
      with self.subTest(name):
        layer = normalizations.LayerNorm.HParams(dim=6, **kwargs).Instantiate()
        init = nn.unbox(layer.init(jax.random.key(0), self.x)).get("params", {})
        self.assertEqual(set(init), set(params))
        out = layer.apply({"params": params}, self.x)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)

  def test_bfloat16_activations_float32_statistics(self):
    layer = normalizations.LayerNorm.HParams(dim=6, fprop_dtype=jnp.bfloat16).Instantiate()
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
    variables = nn.unbox(layer.init(jax.random.key(0), x))
    np.testing.assert_allclose(variables["params"]["scale"], np.ones(8))
    params = {"params": {"scale": jax.random.uniform(jax.random.key(2), (8,), minval=0.5,
                                                      maxval=2.0)}}
    ref = nn.RMSNorm(epsilon=1e-6)
    np.testing.assert_allclose(layer.apply(params, x), ref.apply(params, x), rtol=1e-5, atol=1e-5)
    ours = _grads(layer.apply, params, x, cot)
    theirs = _grads(ref.apply, params, x, cot)
    np.testing.assert_allclose(ours[0]["params"]["scale"], theirs[0]["params"]["scale"],
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-4, atol=1e-5)
    # And numpy, with the 1 + scale variant.
    layer = normalizations.RmsNorm.HParams(dim=8, direct_scale=False).Instantiate()
    xn, s = np.asarray(x, np.float64), np.asarray(params["params"]["scale"], np.float64)
    expected = xn / np.sqrt(np.mean(xn**2, -1, keepdims=True) + 1e-6) * (1 + s)
    np.testing.assert_allclose(layer.apply(params, x), expected, rtol=1e-5, atol=1e-5)

  def test_no_scale_has_no_weights(self):
    layer = normalizations.RmsNorm.HParams(dim=8, use_scale=False).Instantiate()
    self.assertEqual(layer.init(jax.random.key(0), jnp.ones((1, 8))), {})


class BatchNormTest(absltest.TestCase):

  def test_training_matches_flax_batch_norm_and_updates_stats(self):
    x = 2.0 + 3.0 * jax.random.normal(jax.random.key(0), (4, 5, 3))
    cot = jax.random.normal(jax.random.key(1), (4, 5, 3))
    layer = normalizations.BatchNorm.HParams(dim=3, momentum=0.9, epsilon=1e-3).Instantiate()
    variables = nn.unbox(layer.init(jax.random.key(0), x))
    params = {"scale": jnp.array([0.5, 1.0, 2.0]), "bias": jnp.array([0.1, -0.2, 0.3])}
    stats = variables["batch_stats"]
    ref = nn.BatchNorm(use_running_average=False, momentum=0.9, epsilon=1e-3)
    ref_vars = {"params": params, "batch_stats": stats}
    ours_out, ours_new = layer.apply({"params": params, "batch_stats": stats}, x,
                                     deterministic=False, mutable=["batch_stats"])
    ref_out, ref_new = ref.apply(ref_vars, x, mutable=["batch_stats"])
    np.testing.assert_allclose(ours_out, ref_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours_new["batch_stats"]["mean"], ref_new["batch_stats"]["mean"],
                               rtol=1e-5)
    np.testing.assert_allclose(ours_new["batch_stats"]["var"], ref_new["batch_stats"]["var"],
                               rtol=1e-5)

    def ours_fn(p, v):
      return layer.apply({"params": p, "batch_stats": stats}, v, deterministic=False)

    def ref_fn(p, v):
      return ref.apply({"params": p, "batch_stats": stats}, v, mutable=["batch_stats"])[0]

    ours_g, ref_g = _grads(ours_fn, params, x, cot), _grads(ref_fn, params, x, cot)
    for name in ("scale", "bias"):
      np.testing.assert_allclose(ours_g[0][name], ref_g[0][name], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours_g[1], ref_g[1], rtol=1e-4, atol=1e-5)

    # Eval uses the running statistics, not the batch's.
    new_vars = {"params": params, "batch_stats": ours_new["batch_stats"]}
    mean = np.asarray(ours_new["batch_stats"]["mean"])
    var = np.asarray(ours_new["batch_stats"]["var"])
    expected = (np.asarray(x) - mean) / np.sqrt(var + 1e-3) * np.asarray(params["scale"]) + \
        np.asarray(params["bias"])
    np.testing.assert_allclose(layer.apply(new_vars, x), expected, rtol=1e-5, atol=1e-5)

  def test_padded_positions_do_not_count(self):
    x = jax.random.normal(jax.random.key(0), (2, 4, 3))
    paddings = jnp.array([[0, 0, 1, 1], [0, 0, 0, 1]], jnp.float32)
    # Garbage in the padded positions must not change anything at the real ones.
    garbage = jnp.where(paddings[..., None] > 0, 1e3, x)
    layer = normalizations.BatchNorm.HParams(dim=3, use_scale=False,
                                             use_bias=False).Instantiate()
    variables = layer.init(jax.random.key(0), x)
    out = layer.apply(variables, garbage, paddings, deterministic=False)
    real = np.asarray(x)[np.asarray(paddings) == 0]  # [5, 3]
    expected = (real - real.mean(0)) / np.sqrt(real.var(0) + 1e-3)
    np.testing.assert_allclose(np.asarray(out)[np.asarray(paddings) == 0], expected, rtol=1e-5,
                               atol=1e-5)


if __name__ == "__main__":
  absltest.main()
