"""Tests for Conv2D, StackingOverTime and EinsumOp against numpy / jax.lax."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import pax_fiddle
from praxis.layers import base_ops
from praxis.layers import convolutions
from praxis.layers import linears
from praxis.layers import normalizations


class Conv2DTest(absltest.TestCase):
  def test_same_padding_matches_a_numpy_convolution(self):
    x = jax.random.normal(jax.random.key(0), (1, 4, 5, 2))
    layer = pax_fiddle.Config(
      convolutions.Conv2D, name="conv", filter_shape=(3, 3, 2, 4), filter_stride=(1, 1), bias=True
    ).Instantiate()
    variables = layer.init(jax.random.key(1), x)
    self.assertEqual(variables["params"]["w"].shape, (3, 3, 2, 4))
    w, b = np.asarray(variables["params"]["w"]), np.asarray(variables["params"]["b"])
    xp = np.pad(np.asarray(x), [(0, 0), (1, 1), (1, 1), (0, 0)])
    expected = np.zeros((1, 4, 5, 4))
    for i in range(4):
      for j in range(5):
        expected[0, i, j] = np.einsum("hwc,hwco->o", xp[0, i : i + 3, j : j + 3], w) + b
    np.testing.assert_allclose(layer.apply(variables, x), expected, rtol=1e-4, atol=1e-5)

  def test_weight_norm_normalises_the_kernel(self):
    x = jax.random.normal(jax.random.key(0), (1, 3, 3, 2))
    layer = pax_fiddle.Config(
      convolutions.Conv2D,
      name="conv",
      filter_shape=(1, 1, 2, 3),
      filter_stride=(1, 1),
      weight_norm_tpl=pax_fiddle.Config(normalizations.WeightNormL2),
    ).Instantiate()
    variables = layer.init(jax.random.key(1), x)
    w = np.asarray(variables["params"]["w"])[0, 0]  # [2, 3]
    w = w / np.linalg.norm(w, axis=0, keepdims=True)  # g = 0: unit-norm columns
    np.testing.assert_allclose(layer.apply(variables, x), np.asarray(x) @ w, rtol=1e-4, atol=1e-5)


class StackingOverTimeTest(absltest.TestCase):
  def test_stack_and_unstack(self):
    layer = pax_fiddle.Config(
      linears.StackingOverTime, name="s", left_context=1, right_context=1, stride=2
    ).Instantiate()
    x = jnp.arange(1.0, 6.0).reshape(1, 5, 1)  # frames 1..5
    paddings = jnp.array([[0, 0, 0, 0, 1]], jnp.float32)[..., None]
    out, out_paddings = layer.apply({}, x, paddings)
    np.testing.assert_allclose(out[0], [[0, 1, 2], [2, 3, 4], [4, 5, 0]])
    np.testing.assert_allclose(out_paddings[0, :, 0], [0, 0, 0])
    self.assertEqual(layer.window_size, 3)
    np.testing.assert_allclose(
      layer.apply({}, out, method=layer.unstack)[0, :5, 0], [1, 2, 3, 4, 5]
    )


class EinsumOpTest(absltest.TestCase):
  def test_is_einsum(self):
    op = pax_fiddle.Config(base_ops.EinsumOp, name="e").Instantiate()
    a, b = jnp.ones((2, 3)), jnp.arange(6.0).reshape(3, 2)
    np.testing.assert_allclose(op.apply({}, "ij,jk->ik", a, b), a @ b)


if __name__ == "__main__":
  absltest.main()
