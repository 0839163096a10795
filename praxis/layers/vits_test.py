"""Tests for praxis.layers.vits: patchify against a numpy loop, the bilinear table resize,
the entry layers' arithmetic, the exit layers, and a whole small ViT."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import embedding_softmax
from praxis.layers import poolings
from praxis.layers import vits


def np_patches(img, p):
  """Row-major patches, each flattened in (row, col, channel) order."""
  b, h, w, c = img.shape
  out = []
  for i in range(0, h, p):
    for j in range(0, w, p):
      out.append(img[:, i : i + p, j : j + p, :].reshape(b, p * p * c))
  return np.stack(out, axis=1)


class VitsTest(absltest.TestCase):
  def test_image_to_patch_matches_loop_and_inverts(self):
    img = np.random.RandomState(0).normal(size=(2, 8, 12, 3)).astype(np.float32)
    patches = vits.image_to_patch(jnp.asarray(img), 4)
    np.testing.assert_array_equal(patches, np_patches(img, 4))  # [2, 6, 48]
    np.testing.assert_array_equal(vits.patch_to_image(patches, img.shape, 4), img)
    with self.assertRaisesRegex(ValueError, "multiples of patch_size"):
      vits.image_to_patch(jnp.asarray(img), 5)

  def test_interpolate_embedding_2d_corners_and_constant(self):
    # A table that is linear in (row, col) stays linear under bilinear resizing; corners of
    # a half-pixel-centred resize of a 2x2 grid to 4x4 are the source corners.
    rows, cols = np.meshgrid(np.arange(2.0), np.arange(2.0), indexing="ij")
    emb = np.stack([rows, cols], -1).reshape(1, 4, 2)
    out = np.asarray(vits.interpolate_embedding_2d(jnp.asarray(emb), (2, 2), (4, 4))).reshape(
      4, 4, 2
    )
    np.testing.assert_allclose(out[:, 0, 0], [0.0, 0.25, 0.75, 1.0])
    np.testing.assert_allclose(out[0, :, 1], [0.0, 0.25, 0.75, 1.0])
    with self.assertRaisesRegex(ValueError, "must agree"):
      vits.interpolate_embedding_2d(jnp.asarray(emb), (3, 2), (4, 4))

  def test_entry_layers_arithmetic(self):
    cfg = pax_fiddle.Config(
      vits.VitEntryLayers,
      name="entry",
      pos_emb_shapes=(2, 2),
      patch_size=2,
      input_dims=2 * 2 * 3,
      output_dims=8,
      prepend_cls_tokens=1,
      append_cls_tokens=2,
      cls_emb_init=base_layer.WeightInit.Gaussian(1.0),
      pos_emb_tpl=pax_fiddle.Config(
        embedding_softmax.TrainablePositionalEmbedding, max_seq_length=4, embedding_dims=8
      ),
    )
    entry = base_layer.instantiate(cfg)
    img = np.random.RandomState(1).normal(size=(3, 4, 4, 3)).astype(np.float32)
    variables = entry.init(jax.random.PRNGKey(0), img)
    p = jax.tree.map(np.asarray, variables["params"])
    self.assertEqual(p["prepend_cls_embs"].shape, (1, 1, 8))
    self.assertEqual(p["append_cls_embs"].shape, (1, 2, 8))
    got = np.asarray(entry.apply(variables, img))
    proj = p["patch_projection"]
    tokens = np_patches(img, 2) @ proj["linear"]["w"] + proj["bias"]["b"]  # [3, 4, 8]
    tokens = tokens + p["pos_emb"]["emb_var"][None]
    ref = np.concatenate(
      [np.tile(p["prepend_cls_embs"], (3, 1, 1)), tokens, np.tile(p["append_cls_embs"], (3, 1, 1))],
      axis=1,
    )
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)

  def test_exit_layers_pool_and_tanh(self):
    cfg = pax_fiddle.Config(
      vits.VitExitLayers,
      name="exit",
      hidden_dim=8,
      output_dim=4,
      pooling_tpl=pax_fiddle.Config(poolings.GlobalPooling, pooling_type="MAX", pooling_dims=[1]),
    )
    layer = base_layer.instantiate(cfg)
    x = np.random.RandomState(2).normal(size=(2, 5, 8)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    p = jax.tree.map(np.asarray, variables["params"])
    mean = x.mean(-1, keepdims=True)
    normed = (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    normed = normed * (1 + p["ln"]["scale"]) + p["ln"]["bias"]
    fc = p["fc_tanh"]
    ref = np.tanh(normed.max(1) @ fc["linear"]["w"] + fc["bias"]["b"])
    np.testing.assert_allclose(layer.apply(variables, x), ref, rtol=1e-5, atol=1e-5)
    unpooled = base_layer.instantiate(
      cfg.clone().set(pooled=False, output_fc_tanh=False, pre_ln=False)
    )
    variables = unpooled.init(jax.random.PRNGKey(0), x)
    self.assertIn("output_projection", variables["params"])  # 8 != 4: a linear projection
    self.assertEqual(unpooled.apply(variables, x).shape, (2, 5, 4))

  def test_vision_transformer_end_to_end(self):
    cfg = vits.build_vision_transformer_hparams_for_test(
      pos_emb_shapes=(2, 2),
      patch_size=4,
      image_channels=3,
      model_dims=16,
      mlp_dims=32,
      num_xformer_layers=1,
      num_heads=2,
    )
    cfg.exit_layers_tpl.pooling_tpl.pooling_dims = [1]
    vit = base_layer.instantiate(cfg)
    img = jnp.ones((2, 12, 8, 3))  # a 3x2 patch grid: the 2x2 table is resized
    variables = vit.init(jax.random.PRNGKey(0), img)
    self.assertEqual(set(variables["params"]), {"entry_stack", "transformers_stack", "exit_stack"})
    out = vit.apply(variables, img)
    self.assertEqual(out.shape, (2, 16))
    self.assertTrue(np.all(np.isfinite(np.asarray(out))))


if __name__ == "__main__":
  absltest.main()
