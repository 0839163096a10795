"""Tests for praxis.layers.video.vqvae: a tiny tokenizer's shapes, variable tree and id round
trip, and the discriminator's logit."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers.video import vqvae


def _tiny(cls, **kwargs):
  cfg = pax_fiddle.Config(cls, name=cls.__name__.lower(), **kwargs)
  return cfg


class VqvaeTest(absltest.TestCase):
  def test_tiny_tokenizer_round_trip(self):
    cfg = _tiny(
      vqvae.VQVaeModel,
      filters=4,
      num_res_blocks=1,
      channel_multipliers=(1, 2),
      temporal_downsample=(True,),
      embedding_dim=4,
    )
    for tpl in (cfg.encoder_tpl, cfg.decoder_tpl):
      tpl.norm_tpl.num_groups = 2
      tpl.res_block_tpl.norm_layer_tpl.num_groups = 2
    cfg.decoder_tpl.cond_norm_tpl.group_norm_tpl.num_groups = 2
    model = base_layer.instantiate(cfg)
    video = jax.random.normal(jax.random.PRNGKey(0), (1, 3, 8, 8, 3))
    variables = model.init(jax.random.PRNGKey(1), video)
    params = variables["params"]
    self.assertEqual(params["encoder"]["conv_downsample_layers_0"]["w"].shape, (4, 4, 4, 4, 4))
    self.assertEqual(params["decoder"]["conv_upsample_layers_0"]["w"].shape, (3, 3, 3, 8, 64))
    self.assertLen([k for k in params["encoder"] if k.startswith("res_blocks_")], 3)
    recon, result = model.apply(variables, video)
    self.assertEqual(recon.shape, video.shape)
    latents = model.apply(variables, video, method=model.encode_to_latents)
    self.assertEqual(latents.shape, (1, 2, 4, 4, 4))  # 1 + (3 - 1) / 2 frames, H / 2, W / 2
    ids = model.apply(variables, video, method=model.encode_to_indices)
    np.testing.assert_array_equal(ids, result.encoding_indices)
    from_ids = model.apply(variables, ids, method=model.decode_from_indices)
    np.testing.assert_allclose(from_ids, recon, rtol=1e-5, atol=1e-5)

  def test_encoder_checks_frame_count(self):
    cfg = _tiny(
      vqvae.Encoder,
      filters=4,
      num_res_blocks=1,
      channel_multipliers=(1, 2),
      temporal_downsample=(True,),
    )
    enc = base_layer.instantiate(cfg)
    with self.assertRaisesRegex(ValueError, "1 \\+ k \\* 2"):
      enc.init(jax.random.PRNGKey(0), jnp.ones((1, 4, 8, 8, 3)))

  def test_discriminator_logit(self):
    cfg = _tiny(
      vqvae.Discriminator,
      filters=4,
      num_frames=3,
      image_height=5,
      image_width=4,
      channel_multipliers=(1, 2),
    )
    disc = base_layer.instantiate(cfg)
    video = jnp.ones((2, 3, 5, 4, 3))
    variables = disc.init(jax.random.PRNGKey(0), video)
    # 3x5x4 -> 2x3x2 -> 1x2x1 frames after two blocks; 8 channels.
    self.assertEqual(variables["params"]["proj"]["mlp_layers_0"]["linear"]["w"].shape, (16, 8))
    self.assertEqual(disc.apply(variables, video).shape, (2, 1))


if __name__ == "__main__":
  absltest.main()
