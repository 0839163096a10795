"""Pax's `praxis.layers.video.vqvae`: the causal 3-D CNN video tokenizer (MAGVIT-style).

  model = base_layer.instantiate(pax_fiddle.Config(vqvae.VQVaeModel, name="vqvae"))
  reconstructed, result = model.apply(variables, video)   # [B, 1 + 4k, H, W, 3]

Encoder        conv_first -> per level: num_res_blocks ResBlocks, then a strided 4x4x4
               CausalConv (space always halved, time halved where temporal_downsample) ->
               num_res_blocks ResBlocks -> norm -> swish -> 1x1x1 conv to embedding_dim.
Decoder        the mirror: conv_first -> ResBlocks -> per level (deepest first): a CondNormLayer
               conditioned on the (resized) quantized input, ResBlocks, a conv to 4 * t_stride
               times the channels and depth_to_space (dropping the t_stride - 1 leading frames
               so T stays 1 + k * 2^n) -> norm -> swish -> conv to output_dim.
Discriminator  StyleGAN: conv_first -> DiscriminatorResBlocks (each halves T, H, W) ->
               conv_last -> an MLP to one logit.
VQVaeModel     encoder -> quantizer (LookupFreeQuantizer by default) -> decoder.
"""

from __future__ import annotations

from typing import Sequence

import jax

from praxis import base_hyperparams
from praxis import base_layer
from praxis import py_utils
from praxis.layers import activations
from praxis.layers import convolutions
from praxis.layers import linears
from praxis.layers.video import enc_dec_3dcnn
from praxis.layers.video import quantizer
from praxis import pytypes

LayerTpl = base_hyperparams.Config
NestedMap = py_utils.NestedMap
template_field = base_layer.template_field


def _res_blocks(tpl: LayerTpl, level: int, count: int, input_dim: int, output_dim: int) -> list:
  """`count` ResBlock configs `res_block_{level}_{j}`: the first maps input_dim -> output_dim."""
  blocks = []
  for j in range(count):
    blocks.append(
      tpl.clone().set(
        name=f"res_block_{level}_{j}",
        input_dim=input_dim if j == 0 else output_dim,
        output_dim=output_dim,
        use_conv_shortcut=False,
      )
    )
  return blocks


class Encoder(base_layer.BaseLayer):
  """Video [B, T, H, W, input_dim] -> latents [B, T', H', W', embedding_dim].

  Attributes:
    filters: base channel count.
    input_dim: channels of the video (3: RGB).
    embedding_dim: channels of the latents.
    num_res_blocks: ResBlocks per level (>= 1).
    temporal_downsample: per downsampling (one fewer than levels), whether time is halved.
    conv_downsample: downsample with strided convs (must be True).
    channel_multipliers: channels of each level, in units of filters.
    norm_tpl, conv_tpl, res_block_tpl, activation_tpl: the parts.
  """

  filters: int = 128
  input_dim: int = 3
  embedding_dim: int = 8
  num_res_blocks: int = 4
  temporal_downsample: Sequence[bool] = (False, True, True)
  conv_downsample: bool = True
  channel_multipliers: Sequence[int] = (1, 2, 2, 4)
  norm_tpl: LayerTpl = template_field(enc_dec_3dcnn.GroupNormSpatial)
  conv_tpl: LayerTpl = template_field(enc_dec_3dcnn.CausalConv)
  res_block_tpl: LayerTpl = template_field(enc_dec_3dcnn.ResBlock)
  activation_tpl: LayerTpl = template_field(activations.Swish)

  def _check_input(self, x: jax.Array) -> None:
    if x.ndim != 5:
      raise ValueError(f"Input shape must be (b, t, h, w, c), got {x.shape}.")
    factor = 2 ** sum(self.temporal_downsample)
    if (x.shape[1] - 1) % factor:
      raise ValueError(
        f"For a causal tokenizer, input must be (1 + k * {factor}) frames to avoid truncation "
        f"during downsampling. Input frames = {x.shape[1]}"
      )

  def setup(self):
    if not self.conv_downsample:
      raise ValueError("Encoder: conv_downsample must be True.")
    if self.num_res_blocks < 1:
      raise ValueError("Encoder: num_res_blocks must be >= 1.")
    self.create_child(
      "conv_first",
      self.conv_tpl.clone().set(bias=False, filter_shape=(3, 3, 3, self.input_dim, self.filters)),
    )
    res_blocks, downsamples = [], []
    input_dim = output_dim = self.filters
    levels = len(self.channel_multipliers)
    for i, multiplier in enumerate(self.channel_multipliers):
      output_dim = self.filters * multiplier
      res_blocks += _res_blocks(self.res_block_tpl, i, self.num_res_blocks, input_dim, output_dim)
      if i < levels - 1:
        t_stride = 2 if self.temporal_downsample[i] else 1
        downsamples.append(
          self.conv_tpl.clone().set(
            bias=True,
            filter_shape=(4, 4, 4, output_dim, output_dim),
            filter_stride=(t_stride, 2, 2),
          )
        )
      input_dim = output_dim
    res_blocks += _res_blocks(
      self.res_block_tpl, levels, self.num_res_blocks, output_dim, output_dim
    )
    self.create_children("res_blocks", res_blocks)
    self.create_children("conv_downsample_layers", downsamples)
    self.create_child("norm", self.norm_tpl.clone().set(dim=output_dim))
    self.create_child("activation", self.activation_tpl.clone())
    self.create_child(
      "conv_last",
      self.conv_tpl.clone().set(bias=True, filter_shape=(1, 1, 1, output_dim, self.embedding_dim)),
    )

  def __call__(self, inputs: jax.Array) -> jax.Array:
    self._check_input(inputs)
    x = self.conv_first(inputs)
    n = self.num_res_blocks
    levels = len(self.channel_multipliers)
    for i in range(levels):
      for block in self.res_blocks[i * n : (i + 1) * n]:
        x = block(x)
      if i < levels - 1:
        x = self.conv_downsample_layers[i](x)
    for block in self.res_blocks[levels * n :]:
      x = block(x)
    return self.conv_last(self.activation(self.norm(x)))


class Decoder(base_layer.BaseLayer):
  """Latents [B, T', H', W', embedding_dim] -> video [B, T, H, W, output_dim].

  Attributes:
    filters: base channel count.
    embedding_dim: channels of the latents.
    output_dim: channels of the video (3: RGB).
    num_res_blocks: ResBlocks per level (>= 1).
    temporal_downsample: the encoder's; time is doubled where it was halved.
    channel_multipliers: the encoder's (walked deepest first).
    cond_norm_tpl, norm_tpl, conv_tpl, res_block_tpl, activation_tpl: the parts.
  """

  filters: int = 128
  embedding_dim: int = 8
  output_dim: int = 3
  num_res_blocks: int = 4
  temporal_downsample: Sequence[bool] = (False, True, True)
  channel_multipliers: Sequence[int] = (1, 2, 2, 4)
  cond_norm_tpl: LayerTpl = template_field(enc_dec_3dcnn.CondNormLayer)
  norm_tpl: LayerTpl = template_field(enc_dec_3dcnn.GroupNormSpatial)
  conv_tpl: LayerTpl = template_field(enc_dec_3dcnn.CausalConv)
  res_block_tpl: LayerTpl = template_field(enc_dec_3dcnn.ResBlock)
  activation_tpl: LayerTpl = template_field(activations.Swish)

  def _t_stride(self, level: int) -> int:
    return 2 if self.temporal_downsample[level - 1] else 1

  def setup(self):
    if self.num_res_blocks < 1:
      raise ValueError("Decoder: num_res_blocks must be >= 1.")
    deepest = self.filters * self.channel_multipliers[-1]
    self.create_child(
      "conv_first",
      self.conv_tpl.clone().set(bias=True, filter_shape=(3, 3, 3, self.embedding_dim, deepest)),
    )
    res_blocks = _res_blocks(self.res_block_tpl, 0, self.num_res_blocks, deepest, deepest)
    cond_norms, upsamples = [], []
    input_dim = output_dim = deepest
    for i in reversed(range(len(self.channel_multipliers))):
      # The norm of level i sees the channels coming in from the level below.
      cond_norms.append(self.cond_norm_tpl.clone().set(emb_dim=self.embedding_dim, dim=output_dim))
      output_dim = self.filters * self.channel_multipliers[i]
      res_blocks += _res_blocks(self.res_block_tpl, i, self.num_res_blocks, input_dim, output_dim)
      if i > 0:
        upsamples.append(
          self.conv_tpl.clone().set(
            name=f"conv_upsample_{i}",
            bias=True,
            filter_shape=(3, 3, 3, output_dim, output_dim * 4 * self._t_stride(i)),
          )
        )
      input_dim = output_dim
    self.create_children("cond_norm_layers", cond_norms)
    self.create_children("res_blocks", res_blocks)
    self.create_children("conv_upsample_layers", upsamples)
    self.create_child("norm", self.norm_tpl.clone().set(dim=output_dim))
    self.create_child("activation", self.activation_tpl.clone())
    self.create_child(
      "conv_last",
      self.conv_tpl.clone().set(bias=True, filter_shape=(3, 3, 3, output_dim, self.output_dim)),
    )

  def __call__(self, inputs: jax.Array) -> jax.Array:
    cond = inputs  # [B, T', H', W', E], resized with x at each upsampling
    x = self.conv_first(inputs)
    n = self.num_res_blocks
    levels = len(self.channel_multipliers)
    for block in self.res_blocks[:n]:
      x = block(x)
    for step, i in enumerate(reversed(range(levels))):
      x = self.cond_norm_layers[step](x, cond)
      for block in self.res_blocks[(step + 1) * n : (step + 2) * n]:
        x = block(x)
      if i > 0:
        t_stride = self._t_stride(i)
        x = self.conv_upsample_layers[step](x)
        x = enc_dec_3dcnn.depth_to_space(x, t_stride, self.filters * self.channel_multipliers[i])
        cond = jax.image.resize(
          cond, (*x.shape[:-1], cond.shape[-1]), method="nearest", antialias=False
        )
        # Causal: T' frames become 1 + (T' - 1) * t_stride, not T' * t_stride.
        x = x[:, t_stride - 1 :]
        cond = cond[:, t_stride - 1 :]
    return self.conv_last(self.activation(self.norm(x)))


class Discriminator(base_layer.BaseLayer):
  """StyleGAN discriminator: video [B, T, H, W, input_dim] -> one logit [B, 1].

  Attributes:
    filters: base channel count.
    num_frames, image_height, image_width: the input's T, H, W (sizes the final MLP).
    input_dim: channels of the video.
    blur_filter_size: taps of each block's blur.
    channel_multipliers: channels of each block, in units of filters.
    conv_tpl, res_block_tpl, activation_tpl (leaky ReLU, slope 0.2), proj_tpl (a 2-layer MLP).
  """

  filters: int = 128
  num_frames: int = 1
  image_height: int = 256
  image_width: int = 256
  input_dim: int = 3
  blur_filter_size: int = 3
  channel_multipliers: Sequence[int] = (2, 4, 4, 4)
  conv_tpl: LayerTpl = template_field(convolutions.Conv3D)
  res_block_tpl: LayerTpl = template_field(enc_dec_3dcnn.DiscriminatorResBlock)
  activation_tpl: LayerTpl = template_field(activations.LeakyReLU)
  proj_tpl: LayerTpl = template_field(linears.MLPBlock)

  def setup(self):
    activation = self.activation_tpl.clone().set(negative_slope=0.2)
    self.create_child("activation", activation)
    conv = self.conv_tpl.clone().set(padding="SAME", bias=True, filter_stride=(1, 1, 1))
    self.create_child(
      "conv_first", conv.clone().set(filter_shape=(3, 3, 3, self.input_dim, self.filters))
    )
    res_blocks = []
    input_dim = output_dim = self.filters
    t, h, w = self.num_frames, self.image_height, self.image_width
    for i, multiplier in enumerate(self.channel_multipliers):
      output_dim = self.filters * multiplier
      res_blocks.append(
        self.res_block_tpl.clone().set(
          name=f"res_block_{i}",
          input_dim=input_dim,
          output_dim=output_dim,
          activation_tpl=activation.clone(),
          blur_filter_size=self.blur_filter_size,
        )
      )
      input_dim = output_dim
      # Each block's SAME blur-pool with stride 2 rounds an odd size up.
      t, h, w = -(-t // 2), -(-h // 2), -(-w // 2)
    self.create_children("res_blocks", res_blocks)
    self.create_child("conv_last", conv.clone().set(filter_shape=(3, 3, 3, output_dim, output_dim)))
    proj = self.proj_tpl.clone().set(num_layers=2, hidden_dims=output_dim, activate_final=False)
    proj.ff_tpl.input_dims = output_dim * t * h * w
    proj.ff_tpl.output_dims = 1
    proj.ff_tpl.activation_tpl = activation.clone()
    self.create_child("proj", proj)

  def __call__(self, inputs: jax.Array) -> jax.Array:
    x = self.activation(self.conv_first(inputs))
    for block in self.res_blocks:
      x = block(x)
    x = self.activation(self.conv_last(x))
    x = x.reshape(x.shape[0], -1)  # [B, T' * H' * W' * C]
    return self.proj(x)


class VQVaeModel(base_layer.BaseLayer):
  """Encoder -> quantizer -> decoder, with the shared sizes set on all three.

  Attributes:
    encoder_tpl, decoder_tpl, quantizer_tpl: the parts.
    temporal_downsample, channel_multipliers, embedding_dim, filters, num_res_blocks: set on
      the encoder and decoder (embedding_dim on the quantizer too).
  """

  encoder_tpl: LayerTpl = template_field(Encoder)
  decoder_tpl: LayerTpl = template_field(Decoder)
  quantizer_tpl: LayerTpl = template_field(quantizer.LookupFreeQuantizer)
  temporal_downsample: Sequence[bool] = (False, True, True)
  channel_multipliers: Sequence[int] = (1, 2, 2, 4)
  embedding_dim: int = 8
  filters: int = 32
  num_res_blocks: int = 4

  def setup(self) -> None:
    shared = dict(
      temporal_downsample=self.temporal_downsample,
      channel_multipliers=self.channel_multipliers,
      embedding_dim=self.embedding_dim,
      filters=self.filters,
      num_res_blocks=self.num_res_blocks,
    )
    self.create_child("encoder", self.encoder_tpl.clone().set(**shared))
    self.create_child("decoder", self.decoder_tpl.clone().set(**shared))
    self.create_child("quantizer", self.quantizer_tpl.clone().set(embedding_dim=self.embedding_dim))

  def encode(self, inputs: jax.Array) -> tuple[jax.Array, NestedMap]:
    return self.quantizer(self.encoder(inputs))

  def encode_to_indices(self, inputs: jax.Array) -> jax.Array:
    _, result = self.encode(inputs)
    return result["encoding_indices"]

  def encode_to_latents(self, inputs: jax.Array) -> jax.Array:
    return self.encoder(inputs)

  def decode(self, inputs: jax.Array) -> jax.Array:
    return self.decoder(inputs)

  def decode_from_indices(self, ids: jax.Array) -> jax.Array:
    return self.decode(self.quantizer.decode_ids(ids))

  def decode_from_latents(self, latents: jax.Array) -> jax.Array:
    quantized, _ = self.quantizer(latents)
    return self.decode(quantized)

  def __call__(self, inputs: jax.Array) -> tuple[jax.Array, NestedMap]:
    """inputs [B, T, H, W, C] -> (reconstruction [B, T, H, W, C], the quantizer's NestedMap)."""
    quantized, result = self.encode(inputs)
    return self.decoder(quantized), result


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
