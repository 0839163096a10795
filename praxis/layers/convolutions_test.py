"""Tests for Conv2D (causal too), Conv3D, ConvBNActWithPadding, the 1-D convolutions, StackingOverTime and EinsumOp against numpy / jax.lax."""

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


def _np_conv1d_depthwise(x, w, pad_beg, pad_end, dilation=1):
  """x [B, T, C], w [k, C] -> [B, T', C]: each channel convolved on its own."""
  xp = np.pad(x, [(0, 0), (pad_beg, pad_end), (0, 0)])
  k = w.shape[0]
  t_out = xp.shape[1] - dilation * (k - 1)
  return np.stack(
    [sum(xp[:, t + dilation * i] * w[i] for i in range(k)) for t in range(t_out)], axis=1
  )


class CausalConv2DTest(absltest.TestCase):
  def test_causal_time_dim_sees_only_the_past(self):
    # A [3, 1] kernel of ones over time, stride 1: y[t] = x[t-2] + x[t-1] + x[t].
    layer = pax_fiddle.Config(
      convolutions.Conv2D,
      name="c",
      filter_shape=(3, 1, 1, 1),
      filter_stride=(1, 1),
      is_causal=True,
      tf_equivalent_padding=True,
    ).Instantiate()
    x = jnp.arange(1.0, 7.0).reshape(1, 6, 1, 1)
    y = layer.apply({"params": {"w": jnp.ones((3, 1, 1, 1))}}, x)
    np.testing.assert_allclose(y[0, :, 0, 0], [1, 3, 6, 9, 12, 15])

  def test_causal_needs_tf_padding(self):
    layer = pax_fiddle.Config(
      convolutions.Conv2D, name="c", filter_shape=(3, 1, 1, 1), filter_stride=(1, 1), is_causal=True
    ).Instantiate()
    with self.assertRaisesRegex(ValueError, "tf_equivalent_padding"):
      layer.init(jax.random.key(0), jnp.ones((1, 4, 1, 1)))


class Conv3DTest(absltest.TestCase):
  def test_depthwise_matches_numpy(self):
    cfg = convolutions.Conv3D.HParamsDepthwise(
      name="c3",
      kernel_shape=(1, 1, 1),
      in_channels=2,
      channel_multipliers=2,
      filter_stride=(1, 1, 1),
      bias=True,
    )
    self.assertEqual(tuple(cfg.filter_shape), (1, 1, 1, 1, 4))
    layer = cfg.Instantiate()
    x = jax.random.normal(jax.random.key(0), (1, 2, 3, 3, 2))
    variables = layer.init(jax.random.key(1), x)
    w = np.asarray(variables["params"]["w"]).reshape(4)
    b = np.asarray(variables["params"]["b"])
    # Output channel o reads input channel o // 2 (groups of channel_multipliers outputs).
    expected = np.asarray(x)[..., [0, 0, 1, 1]] * w + b
    np.testing.assert_allclose(layer.apply(variables, x), expected, rtol=1e-5, atol=1e-6)


class ConvBNActWithPaddingTest(absltest.TestCase):
  def _layer(self, padding, stride, kernel=3):
    return pax_fiddle.Config(
      convolutions.ConvBNActWithPadding,
      name="c",
      filter_shape=(kernel, 1, 1, 1),
      filter_stride=(stride, 1),
      padding=padding,
      batch_norm_tpl=None,
    ).Instantiate()

  def test_output_paddings(self):
    x = jnp.ones((1, 7, 1, 1))
    paddings = jnp.array([[0, 0, 0, 0, 0, 1, 1]], jnp.float32)
    layer = self._layer("SAME", 2)
    v = layer.init(jax.random.key(0), x, paddings)
    _, out_p = layer.apply(v, x, paddings)
    np.testing.assert_allclose(out_p, [[0, 0, 0, 1]])  # frames 0, 2, 4, 6
    layer = self._layer("VALID", 2)
    out, out_p = layer.apply(v, x, paddings)
    np.testing.assert_allclose(out_p, [[0, 0, 0]])  # windows 0-2, 2-4, 4-6: none all padded
    layer = self._layer("VALID", 1, kernel=2)
    v2 = layer.init(jax.random.key(0), x, paddings)
    out, out_p = layer.apply(v2, x, paddings)
    np.testing.assert_allclose(out_p, [[0, 0, 0, 0, 0, 1]])
    self.assertEqual(float(out[0, 5, 0, 0]), 0.0)  # padded output frames are zeroed


class DepthwiseConv1DTest(absltest.TestCase):
  def test_same_and_causal_match_numpy(self):
    x = np.asarray(jax.random.normal(jax.random.key(0), (2, 6, 3)))
    for causal, dilation in ((False, 1), (True, 1), (True, 2)):
      layer = pax_fiddle.Config(
        convolutions.DepthwiseConv1D,
        name="dw",
        filter_shape=(3, 3, 1),
        is_causal=causal,
        rhs_dilation_rate=dilation,
        bias=True,
      ).Instantiate()
      v = layer.init(jax.random.key(1), x)
      self.assertEqual(v["params"]["w"].shape, (3, 1, 3))
      w = np.asarray(v["params"]["w"])[:, 0, :]  # [k, C]
      b = np.asarray(v["params"]["b"])
      span = dilation * 2
      beg, end = (span, 0) if causal else (span // 2, span - span // 2)
      expected = _np_conv1d_depthwise(x, w, beg, end, dilation) + b
      np.testing.assert_allclose(layer.apply(v, x), expected, rtol=1e-5, atol=1e-5)

  def test_padded_steps_read_as_zero(self):
    layer = pax_fiddle.Config(
      convolutions.DepthwiseConv1D, name="dw", filter_shape=(2, 1, 1), is_causal=True
    ).Instantiate()
    x = jnp.array([[[1.0], [np.nan], [3.0]]])
    paddings = jnp.array([[0.0, 1.0, 0.0]])
    y = layer.apply({"params": {"w": jnp.ones((2, 1, 1))}}, x, paddings)
    np.testing.assert_allclose(y[0, :, 0], [1.0, 1.0, 3.0])


class LightConv1DTest(absltest.TestCase):
  def test_tree_and_residual(self):
    layer = pax_fiddle.Config(
      convolutions.LightConv1D, name="lc", input_dims=4, kernel_size=3
    ).Instantiate()
    x = jax.random.normal(jax.random.key(0), (2, 5, 4))
    paddings = jnp.zeros((2, 5))
    v = layer.init(jax.random.key(1), x, paddings)
    self.assertEqual(
      sorted(v["params"]),
      [
        "conv_norm",
        "depthwise_conv1d",
        "linear_end",
        "linear_start_act",
        "linear_start_gated",
        "ln",
      ],
    )
    self.assertEqual(sorted(v["non_trainable"]["conv_norm"]), ["moving_mean", "moving_variance"])
    # With linear_end zeroed the block is the identity (the residual alone).
    params = jax.tree_util.tree_map(lambda a: a, v["params"])
    params["linear_end"] = jax.tree_util.tree_map(jnp.zeros_like, params["linear_end"])
    y, _ = layer.apply({**v, "params": params}, x, paddings, mutable=["non_trainable"])
    np.testing.assert_allclose(y, x, rtol=1e-6)


if __name__ == "__main__":
  absltest.main()
