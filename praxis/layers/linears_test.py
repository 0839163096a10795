"""Tests for praxis.layers.linears against numpy and flax.linen.Dense, forward and gradient."""

import math

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis.layers import activations
from praxis.layers import linears

_erf = np.vectorize(math.erf)


def _gelu_exact(z):
  return 0.5 * z * (1 + _erf(z / np.sqrt(2)))


def _gelu_exact_grad(z):
  return 0.5 * (1 + _erf(z / np.sqrt(2))) + z * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)


def _init(layer, x):
  variables = layer.init(jax.random.key(0), x)
  return nn.unbox(variables)


def _np(tree):
  return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), tree)


class LinearTest(absltest.TestCase):
  def test_matches_flax_dense_forward_and_gradient(self):
    layer = linears.Linear.HParams(input_dims=3, output_dims=5).Instantiate()
    x = jax.random.normal(jax.random.key(1), (2, 4, 3))
    variables = _init(layer, x)
    w = variables["params"]["w"]
    self.assertEqual(w.shape, (3, 5))  # w[in, out]
    dense = nn.Dense(5, use_bias=False)
    dense_vars = {"params": {"kernel": w}}
    np.testing.assert_allclose(
      layer.apply(variables, x), dense.apply(dense_vars, x), rtol=1e-6, atol=1e-6
    )
    np.testing.assert_allclose(
      layer.apply(variables, x), np.asarray(x) @ np.asarray(w), rtol=1e-5, atol=1e-6
    )

    cot = jax.random.normal(jax.random.key(2), (2, 4, 5))
    ours = jax.grad(lambda v, x: jnp.sum(layer.apply(v, x) * cot), argnums=(0, 1))(variables, x)
    ref = jax.grad(lambda v, x: jnp.sum(dense.apply(v, x) * cot), argnums=(0, 1))(dense_vars, x)
    np.testing.assert_allclose(
      ours[0]["params"]["w"], ref[0]["params"]["kernel"], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-5, atol=1e-6)
    # And by hand: dL/dw = x^T cot, dL/dx = cot w^T.
    xn, cn, wn = np.asarray(x), np.asarray(cot), np.asarray(w)
    np.testing.assert_allclose(
      ours[0]["params"]["w"], np.einsum("bti,bto->io", xn, cn), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(ours[1], cn @ wn.T, rtol=1e-5, atol=1e-5)

  def test_weight_axes_and_dtypes(self):
    layer = linears.Linear.HParams(
      input_dims=4, output_dims=2, weight_axes=("mlp", "embed"), fprop_dtype=jnp.bfloat16
    ).Instantiate()
    variables = base_layer.init_boxed(layer, jax.random.key(0), jnp.ones((1, 4)))
    self.assertEqual(variables["params"]["w"].names, ("mlp", "embed"))
    self.assertEqual(variables["params"]["w"].value.dtype, jnp.float32)
    self.assertEqual(layer.apply(variables, jnp.ones((1, 4))).dtype, jnp.bfloat16)

  def test_wrong_input_size_is_reported(self):
    layer = linears.Linear.HParams(input_dims=4, output_dims=2).Instantiate()
    with self.assertRaisesRegex(ValueError, r"expects inputs \[..., 4\], got \(1, 3\)"):
      layer.init(jax.random.key(0), jnp.ones((1, 3)))


class BiasTest(absltest.TestCase):
  def test_adds_bias_with_init_value_and_gradient_is_sum(self):
    layer = linears.Bias.HParams(dims=3, bias_init=0.5).Instantiate()
    x = jax.random.normal(jax.random.key(0), (2, 4, 3))
    variables = _init(layer, x)
    np.testing.assert_allclose(variables["params"]["b"], [0.5, 0.5, 0.5])
    variables = {"params": {"b": jnp.array([1.0, -2.0, 3.0])}}
    np.testing.assert_allclose(
      layer.apply(variables, x), np.asarray(x) + [1.0, -2.0, 3.0], rtol=1e-6
    )
    cot = jax.random.normal(jax.random.key(1), (2, 4, 3))
    grad = jax.grad(lambda v: jnp.sum(layer.apply(v, x) * cot))(variables)
    np.testing.assert_allclose(grad["params"]["b"], np.asarray(cot).sum((0, 1)), rtol=1e-5)


class FeedForwardTest(absltest.TestCase):
  def test_gelu_feedforward_matches_numpy_forward_and_gradient(self):
    layer = linears.FeedForward.HParams(
      input_dims=3, output_dims=4, activation_tpl=activations.GELU.HParams(approximate=False)
    ).Instantiate()
    x = jax.random.normal(jax.random.key(1), (5, 3))
    variables = _init(layer, x)
    params = variables["params"]
    self.assertEqual(set(params), {"linear", "bias"})
    # A non-zero bias, so a bias added after the activation would be caught.
    params["bias"]["b"] = jnp.array([0.3, -0.7, 1.1, 0.0])
    w, b, xn = (
      np.asarray(params["linear"]["w"], np.float64),
      np.asarray(params["bias"]["b"], np.float64),
      np.asarray(x),
    )
    z = xn @ w + b
    np.testing.assert_allclose(layer.apply(variables, x), _gelu_exact(z), rtol=1e-5, atol=1e-6)

    cot = np.random.RandomState(0).normal(size=(5, 4))
    grads = jax.grad(lambda v, x: jnp.sum(layer.apply(v, x) * cot), argnums=(0, 1))(variables, x)
    dz = cot * _gelu_exact_grad(z)
    np.testing.assert_allclose(grads[0]["params"]["linear"]["w"], xn.T @ dz, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads[0]["params"]["bias"]["b"], dz.sum(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads[1], dz @ w.T, rtol=1e-4, atol=1e-5)

  def test_no_bias_and_default_relu(self):
    layer = linears.FeedForward.HParams(input_dims=3, output_dims=4, has_bias=False).Instantiate()
    x = jax.random.normal(jax.random.key(1), (5, 3))
    variables = _init(layer, x)
    self.assertEqual(set(variables["params"]), {"linear"})
    w = np.asarray(variables["params"]["linear"]["w"])
    np.testing.assert_allclose(
      layer.apply(variables, x), np.maximum(np.asarray(x) @ w, 0), rtol=1e-5, atol=1e-6
    )

  def test_weight_axes_reach_both_children(self):
    layer = linears.FeedForward.HParams(
      input_dims=3, output_dims=4, weight_axes=("mlp", "embed")
    ).Instantiate()
    variables = base_layer.init_boxed(layer, jax.random.key(0), jnp.ones((1, 3)))
    self.assertEqual(variables["params"]["linear"]["w"].names, ("mlp", "embed"))
    self.assertEqual(variables["params"]["bias"]["b"].names, ("embed",))


class MLPBlockTest(absltest.TestCase):
  def test_three_layers_match_numpy_chain_and_gradient(self):
    layer = linears.MLPBlock.HParams(
      num_layers=3,
      hidden_dims=6,
      activate_final=False,
      ff_tpl=linears.FeedForward.HParams(
        input_dims=3, output_dims=2, activation_tpl=activations.Tanh.HParams()
      ),
    ).Instantiate()
    x = jax.random.normal(jax.random.key(1), (4, 3))
    variables = _init(layer, x)
    params = variables["params"]
    self.assertEqual(sorted(params), ["mlp_layers_0", "mlp_layers_1", "mlp_layers_2"])
    self.assertEqual(params["mlp_layers_0"]["linear"]["w"].shape, (3, 6))
    self.assertEqual(params["mlp_layers_1"]["linear"]["w"].shape, (6, 6))
    self.assertEqual(params["mlp_layers_2"]["linear"]["w"].shape, (6, 2))
    # Give the biases values so that a skipped bias shows.
    for i in range(3):
      b = params[f"mlp_layers_{i}"]["bias"]["b"]
      params[f"mlp_layers_{i}"]["bias"]["b"] = 0.1 * jnp.arange(b.shape[0], dtype=jnp.float32)
    ws = [np.asarray(params[f"mlp_layers_{i}"]["linear"]["w"], np.float64) for i in range(3)]
    bs = [np.asarray(params[f"mlp_layers_{i}"]["bias"]["b"], np.float64) for i in range(3)]
    h0 = np.asarray(x, np.float64)
    z1 = h0 @ ws[0] + bs[0]
    h1 = np.tanh(z1)
    z2 = h1 @ ws[1] + bs[1]
    h2 = np.tanh(z2)
    out = h2 @ ws[2] + bs[2]  # the last layer is linear
    np.testing.assert_allclose(layer.apply(variables, x), out, rtol=1e-5, atol=1e-6)
    # Backprop by hand for L = sum(out * cot).
    cot = np.random.RandomState(0).normal(size=out.shape)
    grads = jax.grad(lambda v: jnp.sum(layer.apply(v, x) * cot))(variables)["params"]
    d2 = (cot @ ws[2].T) * (1 - h2**2)
    d1 = (d2 @ ws[1].T) * (1 - h1**2)
    np.testing.assert_allclose(
      grads["mlp_layers_2"]["linear"]["w"], h2.T @ cot, rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(
      grads["mlp_layers_1"]["linear"]["w"], h1.T @ d2, rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(
      grads["mlp_layers_0"]["linear"]["w"], h0.T @ d1, rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(grads["mlp_layers_0"]["bias"]["b"], d1.sum(0), rtol=1e-4, atol=1e-5)

  def test_no_weight_repeats_a_logical_axis(self):
    layer = linears.MLPBlock.HParams(
      num_layers=3, hidden_dims=4, ff_tpl=linears.FeedForward.HParams(input_dims=3, output_dims=2)
    ).Instantiate()
    variables = base_layer.init_boxed(layer, jax.random.key(0), jnp.ones((1, 3)))
    names = [variables["params"][f"mlp_layers_{i}"]["linear"]["w"].names for i in range(3)]
    self.assertEqual(names, [("embed", "mlp"), (None, "mlp"), ("mlp", None)])

  def test_pax_default_applies_activation_to_last_layer(self):
    layer = linears.MLPBlock.HParams(
      num_layers=2, hidden_dims=4, ff_tpl=linears.FeedForward.HParams(input_dims=3, output_dims=5)
    ).Instantiate()
    x = 10 * jax.random.normal(jax.random.key(3), (50, 3))
    variables = layer.init(jax.random.key(0), x)
    self.assertGreaterEqual(float(jnp.min(layer.apply(variables, x))), 0.0)  # ReLU at the end


if __name__ == "__main__":
  absltest.main()
