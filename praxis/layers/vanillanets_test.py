"""Tests for praxis.layers.vanillanets: Pax's variable tree, the block against a numpy
convolution, the delta-orthogonal init and the stage-length check."""

from absl.testing import absltest
import flax
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import poolings
from praxis.layers import vanillanets


def np_conv_same(x, w, b, stride):
  """Direct NHWC convolution with Pax's SAME padding ((k - 1) // 2 before)."""
  kh, kw, _, cout = w.shape
  pt, pl = (kh - 1) // 2, (kw - 1) // 2
  xp = np.pad(x, ((0, 0), (pt, kh - 1 - pt), (pl, kw - 1 - pl), (0, 0)))
  bsz, h, wd, _ = x.shape
  ho, wo = -(-h // stride), -(-wd // stride)
  out = np.zeros((bsz, ho, wo, cout), np.float64)
  for i in range(ho):
    for j in range(wo):
      patch = xp[:, i * stride : i * stride + kh, j * stride : j * stride + kw, :]
      out[:, i, j, :] = np.einsum("bhwc,hwco->bo", patch, w)
  return out + b


def np_lrelu(x, slope):
  return np.sqrt(2.0 / (1 + slope**2)) * np.where(x > 0, x, slope * x)


class VanillaNetsTest(absltest.TestCase):
  def test_block_matches_numpy(self):
    block = base_layer.instantiate(
      pax_fiddle.Config(
        vanillanets.VanillaBlock, name="block", input_dim=8, output_dim=16, kernel_size=3, stride=2
      )
    )
    x = np.random.RandomState(0).normal(size=(2, 6, 6, 8)).astype(np.float32)
    variables = block.init(jax.random.PRNGKey(0), x)
    params = variables["params"]
    self.assertEqual(
      {k: v["w"].shape for k, v in params.items()},
      {"body_0": (1, 1, 8, 4), "body_1": (3, 3, 4, 4), "body_2": (1, 1, 4, 16)},
    )
    # Give the biases values so that their addition is checked too.
    params = jax.tree.map(lambda v: v + 0.1 if v.ndim == 1 else v, params)
    got = block.apply({"params": params}, x)
    ref = x.astype(np.float64)
    for name, stride in (("body_0", 1), ("body_1", 2), ("body_2", 1)):
      p = jax.tree.map(np.asarray, params[name])
      ref = np_lrelu(np_conv_same(ref, p["w"], p["b"], stride), 0.4)
    self.assertEqual(got.shape, (2, 3, 3, 16))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)

  def test_delta_orthogonal_init_is_centre_tap_orthogonal(self):
    block = base_layer.instantiate(
      pax_fiddle.Config(vanillanets.VanillaBlock, name="block", input_dim=8, output_dim=16)
    )
    variables = block.init(jax.random.PRNGKey(3), jnp.ones((1, 4, 4, 8)))
    w = np.array(variables["params"]["body_1"]["w"])  # a writable copy
    centre = w[1, 1]  # [4, 4]
    np.testing.assert_allclose(centre.T @ centre, np.eye(4), atol=1e-5)
    w[1, 1] = 0
    self.assertEqual(np.abs(w).max(), 0.0)  # every other tap is zero

  def test_net_tree_and_pooled_shape(self):
    cfg = vanillanets.VanillaNet.HParamsVanillaNet5().set(
      name="net",
      output_spatial_pooling_params=pax_fiddle.Config(poolings.GlobalPooling, pooling_dims=(1, 2)),
    )
    net = base_layer.instantiate(cfg)
    images = jnp.ones((2, 16, 16, 3))
    variables = net.init(jax.random.PRNGKey(0), images)
    flat = flax.traverse_util.flatten_dict(variables["params"], sep="/")
    self.assertEqual(flat["entryflow_conv/w"].shape, (7, 7, 3, 4))
    self.assertEqual(flat["entryflow_conv/b"].shape, (4,))
    self.assertEqual(flat["stage_0_block_0/body_2/w"].shape, (1, 1, 4, 16))
    self.assertEqual(net.apply(variables, images).shape, (2, 16))
    unpooled = base_layer.instantiate(cfg.clone().set(output_spatial_pooling_params=None))
    # 16 -> 8 (entry conv, stride 2) -> 4 (max pool).
    self.assertEqual(unpooled.apply(variables, images).shape, (2, 4, 4, 16))

  def test_stage_lengths_must_agree(self):
    cfg = pax_fiddle.Config(vanillanets.VanillaNet, name="net", strides=[1, 2], channels=[16])
    with self.assertRaisesRegex(ValueError, "channels has 1 entries"):
      base_layer.instantiate(cfg).init(jax.random.PRNGKey(0), jnp.ones((1, 8, 8, 3)))


if __name__ == "__main__":
  absltest.main()
