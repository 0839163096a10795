"""Pax's `praxis.layers.vanillanets`: VanillaNet, a ResNet without skips or batch norm.

    net = base_layer.instantiate(vanillanets.VanillaNet.HParamsVanillaNet50())
    features = net.apply(variables, images)        # [B, H, W, 3] -> [B, 2048]

The network of https://openreview.net/forum?id=U0k7XNTiFEq: trainable without residual
connections or normalization because every conv starts as a scaled delta-orthogonal kernel
(an identity map at init) and the activation is a "tailored" leaky ReLU rescaled to keep the
second moment of its input, sqrt(2 / (1 + slope^2)) * leaky_relu(x, slope).

Layout (ResNet's, Pax's variable names): `entryflow_conv` (k x k, stride 2, 3 -> channels[0]
/ 4) -> 3x3 / 2 max pool -> `stage_{s}_block_{b}` blocks (the first block of a stage has the
stage's stride) -> optional `output_spatial_pooling`. A VanillaBlock is three biased convs
`body_0..2` (1x1 down to output_dim / 4, k x k with the stride, 1x1 up to output_dim), each
followed by the tailored leaky ReLU.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import jax

from praxis import base_hyperparams
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import convolutions
from praxis.layers import poolings
from praxis import py_utils
from praxis import pytypes

template_field = base_layer.template_field
WeightInit = base_layer.WeightInit


def tailored_lrelu(negative_slope: float, x: jax.Array) -> jax.Array:
  """Leaky ReLU scaled by sqrt(2 / (1 + slope^2)) so a unit-Gaussian input keeps E[y^2] = 1."""
  gain = math.sqrt(2.0 / (1.0 + negative_slope**2))
  return gain * jax.nn.leaky_relu(x, negative_slope=negative_slope)


def _delta_orthogonal_conv() -> base_hyperparams.Config:
  # The init is what lets a skip-free net train: each conv starts as an orthogonal map at the
  # kernel's centre tap (Pax's default for both VanillaBlock and VanillaNet).
  return pax_fiddle.Config(
    convolutions.Conv2D, bias=True, params_init=WeightInit.ScaledDeltaOrthogonal(1.0)
  )


class VanillaBlock(base_layer.BaseLayer):
  """Bottleneck of three biased convs, each followed by the tailored leaky ReLU (no skip).

  Attributes:
    input_dim: channels of the input.
    output_dim: channels of the output (the bottleneck has output_dim // 4).
    conv_params: the conv template (Conv2D with bias and a delta-orthogonal init).
    kernel_size: kernel of the middle conv.
    stride: stride of the middle conv.
    negative_slope: slope of the leaky ReLU.
  """

  input_dim: int = 0
  output_dim: int = 0
  conv_params: base_hyperparams.Config = dataclasses.field(default_factory=_delta_orthogonal_conv)
  kernel_size: int = 3
  stride: int = 1
  negative_slope: float = 0.4

  def setup(self) -> None:
    mid = self.output_dim // 4
    k = self.kernel_size
    shapes = (
      ("conv_in", (1, 1, self.input_dim, mid), (1, 1)),
      ("conv_mid", (k, k, mid, mid), (self.stride, self.stride)),
      ("conv_out", (1, 1, mid, self.output_dim), (1, 1)),
    )
    body = [
      self.conv_params.clone().set(name=name, filter_shape=shape, filter_stride=stride)
      for name, shape, stride in shapes
    ]
    self.create_children("body", body)

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """inputs [B, H, W, input_dim] -> [B, H / stride, W / stride, output_dim]."""
    x = inputs
    for conv in self.body:
      x = tailored_lrelu(self.negative_slope, conv(x))
    return x


class VanillaNet(base_layer.BaseLayer):
  """VanillaNet: ResNet's stages of VanillaBlocks, no skips, no batch norm.

  Attributes:
    conv_params: conv template of the entry conv and of every block (set into block_params).
    block_params: the block template used in every stage.
    strides: stride of each stage (applied by the stage's first block).
    channels: output channels of each stage; the entry conv makes channels[0] // 4.
    blocks: number of blocks of each stage.
    kernels: kernel size of each stage.
    entryflow_conv_kernel: (kh, kw) of the entry conv.
    entryflow_conv_stride: (sh, sw) of the entry conv.
    output_spatial_pooling_params: pooling at the end (None: none; it needs pooling_dims,
      e.g. (1, 2) for [B, D] features).
    negative_slope: slope of the tailored leaky ReLU everywhere.
  """

  conv_params: base_hyperparams.Config = dataclasses.field(default_factory=_delta_orthogonal_conv)
  block_params: base_hyperparams.Config = template_field(VanillaBlock)
  strides: Sequence[int] = (1, 2, 2, 2)
  channels: Sequence[int] = (256, 512, 1024, 2048)
  blocks: Sequence[int] = (3, 4, 6, 3)
  kernels: Sequence[int] = (3, 3, 3, 3)
  entryflow_conv_kernel: Sequence[int] = (7, 7)
  entryflow_conv_stride: Sequence[int] = (2, 2)
  output_spatial_pooling_params: base_hyperparams.Config | None = template_field(
    poolings.GlobalPooling
  )
  negative_slope: float = 0.4

  @classmethod
  def HParamsVanillaNet5(cls) -> pax_fiddle.Config:  # pylint: disable=invalid-name
    """One stage of one 1x1 block of 16 channels: a test size."""
    return pax_fiddle.Config(cls, strides=[1], channels=[16], blocks=[1], kernels=[1])

  @classmethod
  def HParamsVanillaNet50(cls) -> pax_fiddle.Config:  # pylint: disable=invalid-name
    return pax_fiddle.Config(cls)

  @classmethod
  def HParamsVanillaNet101(cls) -> pax_fiddle.Config:  # pylint: disable=invalid-name
    return pax_fiddle.Config(cls, blocks=[3, 4, 23, 3])

  @classmethod
  def HParamsVanillaNet152(cls) -> pax_fiddle.Config:  # pylint: disable=invalid-name
    return pax_fiddle.Config(cls, blocks=[3, 8, 36, 3])

  def setup(self) -> None:
    num_stages = len(self.strides)
    for field in ("channels", "blocks", "kernels"):
      if len(getattr(self, field)) != num_stages:
        raise ValueError(
          f"VanillaNet: {field} has {len(getattr(self, field))} entries but strides has "
          f"{num_stages}; give one entry per stage in each of strides, channels, blocks, kernels."
        )
    block_tpl = self.block_params.clone().set(negative_slope=self.negative_slope)
    if hasattr(block_tpl, "conv_params"):
      block_tpl.conv_params = self.conv_params

    input_dim = self.channels[0] // 4
    kh, kw = self.entryflow_conv_kernel
    self.create_child(
      "entryflow_conv",
      self.conv_params.clone().set(
        filter_shape=(kh, kw, 3, input_dim), filter_stride=tuple(self.entryflow_conv_stride)
      ),
    )
    self.create_child(
      "entryflow_maxpool",
      pax_fiddle.Config(
        poolings.Pooling, window_shape=(3, 3), window_stride=(2, 2), pooling_type="MAX"
      ),
    )
    for stage, (channel, num_blocks, kernel, stride) in enumerate(
      zip(self.channels, self.blocks, self.kernels, self.strides)
    ):
      for block in range(num_blocks):
        name = f"stage_{stage}_block_{block}"
        self.create_child(
          name,
          block_tpl.clone().set(
            kernel_size=kernel,
            input_dim=input_dim,
            output_dim=channel,
            stride=stride if block == 0 else 1,
          ),
        )
        input_dim = channel
    if self.output_spatial_pooling_params is not None:
      self.create_child("output_spatial_pooling", self.output_spatial_pooling_params)

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """inputs [B, H, W, 3] -> [B, H', W', channels[-1]], or pooled (e.g. [B, channels[-1]])."""
    x = tailored_lrelu(self.negative_slope, self.entryflow_conv(inputs))
    x, _ = self.entryflow_maxpool(x)
    for stage, num_blocks in enumerate(self.blocks):
      for block in range(num_blocks):
        x = getattr(self, f"stage_{stage}_block_{block}")(x)
    if self.output_spatial_pooling_params is not None:
      x = self.output_spatial_pooling(x)
    return x


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
NestedMap = py_utils.NestedMap
