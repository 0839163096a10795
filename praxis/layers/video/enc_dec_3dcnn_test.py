"""Tests for praxis.layers.video.enc_dec_3dcnn against numpy: depth_to_space, scan_function,
the causal conv's padding, the blur kernel, the per-frame group norm and the residual blocks."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers.video import enc_dec_3dcnn


def _init_apply(cfg, *args):
  layer = base_layer.instantiate(cfg)
  variables = layer.init(jax.random.PRNGKey(0), *args)
  return variables, layer.apply(variables, *args)


def np_conv3d_valid(x, w):
  """[B, T, H, W, I] (*) [kt, kh, kw, I, O], stride 1, no padding."""
  kt, kh, kw, _, o = w.shape
  b, t, h, wd, _ = x.shape
  out = np.zeros((b, t - kt + 1, h - kh + 1, wd - kw + 1, o))
  for i in range(out.shape[1]):
    for j in range(out.shape[2]):
      for k in range(out.shape[3]):
        patch = x[:, i : i + kt, j : j + kh, k : k + kw, :]
        out[:, i, j, k] = np.einsum("bthwi,thwio->bo", patch, w)
  return out


class EncDec3dcnnTest(absltest.TestCase):
  def test_depth_to_space_matches_index_formula(self):
    b, t, h, w, ts, f = 2, 3, 2, 2, 2, 3
    x = np.arange(b * t * h * w * ts * 4 * f, dtype=np.float32).reshape(b, t, h, w, ts * 4 * f)
    y = np.asarray(enc_dec_3dcnn.depth_to_space(jnp.asarray(x), ts, f))
    self.assertEqual(y.shape, (b, t * ts, 2 * h, 2 * w, f))
    for ti, hi, wi, dt, dh, dw in np.ndindex(t, h, w, ts, 2, 2):
      channels = x[:, ti, hi, wi].reshape(b, ts, 2, 2, f)[:, dt, dh, dw]
      np.testing.assert_array_equal(y[:, ti * ts + dt, hi * 2 + dh, wi * 2 + dw], channels)

  def test_scan_function_equals_direct_call(self):
    x = jnp.asarray(np.random.RandomState(0).normal(size=(2, 4, 3)), jnp.float32)
    fn = lambda a, b: (jnp.tanh(a) * b, jnp.concatenate([a, a], axis=1))  # noqa: E731
    got = enc_dec_3dcnn.scan_function(fn, in_axis=1)(x, x + 1)
    np.testing.assert_allclose(got[0], jnp.tanh(x) * (x + 1), rtol=1e-6)
    self.assertEqual(got[1].shape, (2, 8, 3))  # each frame's 2 outputs, frame-major
    np.testing.assert_array_equal(got[1][:, 2], x[:, 1])
    with self.assertRaisesRegex(ValueError, "less than the input rank"):
      enc_dec_3dcnn.scan_function(fn, in_axis=3)(x, x)

  def test_causal_conv_is_edge_padded_and_causal(self):
    cfg = pax_fiddle.Config(enc_dec_3dcnn.CausalConv, name="conv", filter_shape=(3, 3, 2, 2, 3))
    x = np.random.RandomState(1).normal(size=(1, 4, 3, 3, 2)).astype(np.float32)
    variables, y = _init_apply(cfg, x)
    w, b = (np.asarray(variables["params"][k], np.float64) for k in ("w", "b"))
    padded = np.pad(x, [(0, 0), (2, 0), (1, 1), (0, 1), (0, 0)], mode="edge")
    np.testing.assert_allclose(y, np_conv3d_valid(padded, w) + b, rtol=1e-4, atol=1e-5)
    # A change in the last frame leaves every earlier output frame alone.
    x2 = x.copy()
    x2[:, -1] += 5.0
    y2 = base_layer.instantiate(cfg).apply(variables, x2)
    np.testing.assert_allclose(y2[:, :-1], y[:, :-1], rtol=1e-6)

  def test_blur_pool_matches_binomial_average(self):
    cfg = pax_fiddle.Config(enc_dec_3dcnn.BlurPool3D, name="blur", padding="VALID")
    x = np.random.RandomState(2).normal(size=(1, 5, 5, 5, 2)).astype(np.float32)
    _, y = _init_apply(cfg, x)
    row = np.array([1.0, 2.0, 1.0]) / 4
    kernel = np.einsum("i,j,k->ijk", row, row, row)
    ref = np.zeros((1, 2, 2, 2, 2))
    for i, j, k in np.ndindex(2, 2, 2):
      patch = x[0, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3, 2 * k : 2 * k + 3]
      ref[0, i, j, k] = np.einsum("thwc,thw->c", patch, kernel)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)

  def test_group_norm_spatial_normalizes_each_frame(self):
    cfg = pax_fiddle.Config(enc_dec_3dcnn.GroupNormSpatial, name="gn", dim=4, num_groups=2)
    x = np.random.RandomState(3).normal(size=(2, 3, 4, 4, 4)).astype(np.float32) * 3 + 1
    _, y = _init_apply(cfg, x)
    g = x.reshape(2, 3, 4, 4, 2, 2).astype(np.float64)
    mean = g.mean((2, 3, 5), keepdims=True)
    var = g.var((2, 3, 5), keepdims=True)
    ref = ((g - mean) / np.sqrt(var + 1e-6)).reshape(x.shape)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)

  def test_cond_norm_layer(self):
    cfg = pax_fiddle.Config(enc_dec_3dcnn.CondNormLayer, name="cn", emb_dim=3, dim=4)
    cfg.group_norm_tpl.num_groups = 4
    rng = np.random.RandomState(4)
    x = rng.normal(size=(1, 2, 3, 3, 4)).astype(np.float32)
    emb = rng.normal(size=(1, 2, 3, 3, 3)).astype(np.float32)
    layer = base_layer.instantiate(cfg)
    variables = layer.init(jax.random.PRNGKey(0), x, emb)
    p = jax.tree.map(lambda v: np.asarray(v, np.float64), variables["params"])
    self.assertEqual(set(p), {"gamma_linear", "gamma_bias", "beta_linear", "beta_bias"})
    p["gamma_bias"]["b"] = p["gamma_bias"]["b"] + 0.3
    y = layer.apply({"params": p}, x, emb)
    mean = x.mean((2, 3), keepdims=True)
    normed = (x - mean) / np.sqrt(x.var((2, 3), keepdims=True) + 1e-6)
    gamma = emb @ p["gamma_linear"]["w"] + p["gamma_bias"]["b"]
    beta = emb @ p["beta_linear"]["w"] + p["beta_bias"]["b"]
    np.testing.assert_allclose(y, normed * (1 + gamma) + beta, rtol=1e-4, atol=1e-4)

  def test_res_blocks_shapes_and_trees(self):
    x = jnp.ones((1, 3, 4, 4, 4))
    cfg = pax_fiddle.Config(
      enc_dec_3dcnn.ResBlock, name="res", input_dim=4, output_dim=8, use_conv_shortcut=True
    )
    cfg.norm_layer_tpl.num_groups = 2
    variables, y = _init_apply(cfg, x)
    self.assertEqual(y.shape, (1, 3, 4, 4, 8))
    params = variables["params"]
    self.assertEqual(params["conv_shortcut"]["w"].shape, (3, 3, 3, 4, 8))
    self.assertNotIn("b", params["conv_0"])
    cfg = pax_fiddle.Config(
      enc_dec_3dcnn.DiscriminatorResBlock, name="dres", input_dim=4, output_dim=6
    )
    variables, y = _init_apply(cfg, jnp.ones((1, 3, 5, 4, 4)))
    self.assertEqual(y.shape, (1, 2, 3, 2, 6))  # SAME blur-pool halves, rounding up
    self.assertEqual(set(variables["params"]), {"conv_first", "conv_residual", "conv_last"})


if __name__ == "__main__":
  absltest.main()
