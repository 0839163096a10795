"""Tests for praxis.layers.poolings against numpy: MAX / AVG windows (SAME borders), paddings,
and global pooling."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import poolings


def pooling(**kwargs):
  return base_layer.instantiate(pax_fiddle.Config(poolings.Pooling, name="pool", **kwargs))


def np_pool(x, window, stride, reduce):
  """SAME pooling in numpy: windows clipped at the image border, as XLA's SAME padding."""
  _, h, w, _ = x.shape
  out_h, out_w = -(-h // stride), -(-w // stride)
  pad_h = max((out_h - 1) * stride + window - h, 0) // 2
  pad_w = max((out_w - 1) * stride + window - w, 0) // 2
  out = np.zeros((x.shape[0], out_h, out_w, x.shape[3]))
  for i in range(out_h):
    for j in range(out_w):
      r0, c0 = i * stride - pad_h, j * stride - pad_w
      patch = x[:, max(r0, 0) : r0 + window, max(c0, 0) : c0 + window]
      out[:, i, j] = reduce(patch, axis=(1, 2))
  return out


class PoolingTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.x = np.random.default_rng(0).normal(size=(2, 5, 6, 3)).astype(np.float32)

  def test_max_and_avg_match_numpy(self):
    for kind, reduce in (("MAX", np.max), ("AVG", np.mean)):
      layer = pooling(window_shape=(3, 3), window_stride=(2, 2), pooling_type=kind)
      out, paddings = layer.apply({}, jnp.asarray(self.x))
      self.assertIsNone(paddings)
      np.testing.assert_allclose(out, np_pool(self.x, 3, 2, reduce), rtol=1e-5, err_msg=kind)

  def test_paddings_are_left_out(self):
    paddings = jnp.asarray([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], jnp.float32)  # [B, H]
    layer = pooling(window_shape=(2, 1), window_stride=(2, 1), pooling_type="AVG")
    out, out_paddings = layer.apply({}, jnp.asarray(self.x), paddings)
    np.testing.assert_array_equal(out_paddings, [[0, 1, 1], [0, 0, 0]])
    # Row 0 of example 0 averages rows 0 and 1; padded output rows are zero.
    np.testing.assert_allclose(out[0, 0], self.x[0, :2].mean(0), rtol=1e-5)
    np.testing.assert_array_equal(out[0, 1:], np.zeros((2, 6, 3)))

  def test_bad_config_is_refused(self):
    with self.assertRaisesRegex(ValueError, "MAX or AVG"):
      pooling(window_shape=(2, 2), window_stride=(1, 1), pooling_type="MIN").init(
        jax.random.PRNGKey(0), jnp.asarray(self.x)
      )


class GlobalPoolingTest(absltest.TestCase):
  def test_avg_max_and_paddings(self):
    x = np.random.default_rng(1).normal(size=(2, 4, 3, 5)).astype(np.float32)
    for kind, reduce in (("AVG", np.mean), ("MAX", np.max)):
      layer = base_layer.instantiate(
        pax_fiddle.Config(poolings.GlobalPooling, pooling_type=kind, pooling_dims=(1, 2))
      )
      np.testing.assert_allclose(layer.apply({}, x), reduce(x, axis=(1, 2)), rtol=1e-5)
    paddings = np.zeros((2, 4, 3, 1), np.float32)  # AVG counts the paddings' own entries
    paddings[:, 2:] = 1.0  # the last two rows are padding
    layer = base_layer.instantiate(pax_fiddle.Config(poolings.GlobalPooling, pooling_dims=(1, 2)))
    out = layer.apply({}, x, compatible_paddings=paddings)
    np.testing.assert_allclose(out, x[:, :2].mean(axis=(1, 2)), rtol=1e-5)


class Pooling1DTest(absltest.TestCase):
  def _pool(self, pooling_type, stride, window, x, pad):
    cfg = pax_fiddle.Config(
      poolings.Pooling1D, name="p", stride=stride, window=window, pooling_type=pooling_type
    )
    layer = base_layer.instantiate(cfg)
    return layer.apply({}, x, pad)

  def test_matches_numpy_windows_over_valid_positions(self):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 7, 3)).astype(np.float32)
    pad = np.zeros((2, 7), np.float32)
    pad[1, 5:] = 1.0
    for pooling_type in ("MAX", "AVG"):
      out, out_pad = self._pool(pooling_type, 2, 3, x, pad)
      np.testing.assert_array_equal(out_pad, pad[:, ::2])
      # SAME for window 3, stride 2 over 7: 4 outputs, total border 2, 1 of it in front, so
      # output i covers [2i - 1, 2i + 2).
      expected = np.zeros((2, 4, 3), np.float32)
      for b in range(2):
        for i in range(4):
          rows = [t for t in range(2 * i - 1, 2 * i + 2) if 0 <= t < 7 and pad[b, t] == 0]
          if not rows:
            continue
          window_vals = x[b, rows]
          expected[b, i] = window_vals.max(0) if pooling_type == "MAX" else window_vals.mean(0)
      np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)

  def test_window_one_only_strides(self):
    x = np.arange(12.0, dtype=np.float32).reshape(1, 6, 2)
    out, out_pad = self._pool("AVG", 3, 1, x, None)
    np.testing.assert_array_equal(out, x[:, ::3])
    self.assertIsNone(out_pad)


if __name__ == "__main__":
  absltest.main()
