"""Pax's `praxis.layers.mobilenet`: MobileNetV2 (arXiv:1801.04381) on NHWC images.

    net = pax_fiddle.Config(mobilenet.MobileNet, num_classes=1000)   # the paper's network
    logits = net.apply(variables, images)        # [B, H, W, 3] -> [B, 1000]

MobileNet: entry conv (3x3 / 2, 32 * multiplier channels) -> InvertedResidualBlocks -> 1x1 conv
to output_channels -> global average pool -> optional FeedForward to num_classes. Each conv is a
ConvBNAct with ReLU6.

Variables (Pax's): everything sits in `body` (a Sequential): `body/layers_0` the entry conv,
`body/layers_{1+i}` block i (its own `body/layers_*`: expansion 1x1, depthwise kxk, project
1x1), then the final conv (and `predictions`' FeedForward when num_classes).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax

from praxis import base_hyperparams
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import convolutions
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers import poolings
from praxis.layers import sequential
from praxis import py_utils
from praxis import pytypes

LayerTpl = base_hyperparams.Config
template_field = base_hyperparams.template_field
WeightInit = base_layer.WeightInit


def _make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
  """v rounded to the nearest multiple of divisor (at least min_value), never more than 10%
  below v (Pax's / the paper's channel rounding)."""
  min_value = divisor if min_value is None else min_value
  rounded = max(min_value, int(v + divisor / 2) // divisor * divisor)
  return rounded + divisor if rounded < 0.9 * v else rounded


class InvertedResidualBlock(base_layer.BaseLayer):
  """1x1 expansion to expansion * input_dim (skipped when expansion is 1), depthwise kxk with
  the stride, linear 1x1 projection to output_dim; plus the input when the shape is kept.

  Attributes:
    input_dim, output_dim: channels in and out.
    expansion: the bottleneck's expansion factor.
    conv_params: the ConvBNAct template of every conv.
    kernel_size: k of the depthwise conv.
    stride: its stride.
    activation_tpl: activation of the expansion and depthwise convs (ReLU6).
  """

  input_dim: int = 0
  output_dim: int = 0
  expansion: int = 6
  conv_params: LayerTpl = template_field(convolutions.ConvBNAct)
  kernel_size: int = 3
  stride: int = 1
  activation_tpl: LayerTpl = template_field(activations.ReLU6)

  @property
  def _in_out_same_shape(self) -> bool:
    return self.input_dim == self.output_dim and self.stride == 1

  def setup(self) -> None:
    def conv(name, shape, stride, act):
      return self.conv_params.clone().set(
        name=name, filter_shape=shape, filter_stride=(stride, stride), activation_tpl=act
      )

    body = []
    expanded = self.expansion * self.input_dim
    if self.expansion != 1:
      body.append(conv("expansion", (1, 1, self.input_dim, expanded), 1, self.activation_tpl))
    # Input channels of 1: one filter per channel (depthwise).
    k = self.kernel_size
    body.append(conv("depthwise_conv", (k, k, 1, expanded), self.stride, self.activation_tpl))
    body.append(
      conv(
        "project",
        (1, 1, expanded, self.output_dim),
        1,
        pax_fiddle.Config(activations.Identity),
      )
    )
    self.create_child("body", pax_fiddle.Config(sequential.Sequential, layers=body))

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """[B, H, W, input_dim] -> [B, H / stride, W / stride, output_dim]."""
    out = self.body(inputs)
    return out + inputs if self._in_out_same_shape else out


def _conv_params_default() -> LayerTpl:
  return pax_fiddle.Config(
    convolutions.ConvBNAct,
    activation_tpl=pax_fiddle.Config(activations.ReLU6),
    batch_norm_tpl=pax_fiddle.Config(normalizations.BatchNorm, decay=0.9),
    params_init=WeightInit.GaussianSqrtFanOut(1.4141),
  )


def _spatial_pooling_default() -> LayerTpl:
  return pax_fiddle.Config(poolings.GlobalPooling, pooling_dims=(1, 2))


def _predict_default() -> LayerTpl:
  return pax_fiddle.Config(linears.FeedForward)


# The paper's MobileNetV2 (Table 2), one entry per block.
_EXPANSIONS = (1, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6)
_STRIDES = (1, 2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1)
_CHANNELS = (16, 24, 24, 32, 32, 32, 64, 64, 64, 64, 96, 96, 96, 160, 160, 160, 320)


class MobileNet(base_layer.BaseLayer):
  """MobileNetV2; the defaults are the paper's (module docstring).

  Attributes:
    conv_params: the ConvBNAct template of every conv.
    block_params: the block template (InvertedResidualBlock).
    expansions, strides, channels: per block.
    output_channels: channels of the final 1x1 conv (the embedding).
    num_classes: when nonzero, a final FeedForward (predict_params) to this many classes.
    entryflow_conv_kernel: (h, w, input channels) of the entry conv.
    entryflow_conv_stride: its stride.
    output_spatial_pooling_params: pooling after the final conv; None keeps [B, H', W', C].
    predict_params: the template of the prediction layer.
    multiplier: width multiplier of every layer.
    divisible_by, min_depth: channel rounding after the multiplier.
  """

  conv_params: LayerTpl = dataclasses.field(default_factory=_conv_params_default)
  block_params: LayerTpl = template_field(InvertedResidualBlock)
  expansions: Sequence[int] = _EXPANSIONS
  strides: Sequence[int] = _STRIDES
  channels: Sequence[int] = _CHANNELS
  output_channels: int = 1280
  num_classes: int = 0
  entryflow_conv_kernel: Sequence[int] = (3, 3, 3)
  entryflow_conv_stride: Sequence[int] = (2, 2)
  output_spatial_pooling_params: LayerTpl | None = dataclasses.field(
    default_factory=_spatial_pooling_default
  )
  predict_params: LayerTpl = dataclasses.field(default_factory=_predict_default)
  multiplier: float = 1.0
  divisible_by: int = 8
  min_depth: int = 8

  def setup(self) -> None:
    if not len(self.expansions) == len(self.strides) == len(self.channels):
      raise ValueError(
        f"MobileNet needs one entry per block in expansions, strides and channels; got "
        f"{len(self.expansions)}, {len(self.strides)}, {len(self.channels)}."
      )
    block_params = self.block_params.clone()
    if hasattr(block_params, "conv_params"):
      block_params.conv_params = self.conv_params.clone()
    input_dim = _make_divisible(32 * self.multiplier, self.divisible_by, self.min_depth)
    kh, kw, kc = self.entryflow_conv_kernel
    body = [
      self.conv_params.clone().set(
        name="entryflow_conv",
        filter_shape=(kh, kw, kc, input_dim),
        filter_stride=tuple(self.entryflow_conv_stride),
      )
    ]
    for i, (expansion, stride, channel) in enumerate(
      zip(self.expansions, self.strides, self.channels)
    ):
      output_dim = _make_divisible(channel * self.multiplier, self.divisible_by)
      body.append(
        block_params.clone().set(
          name=f"block_{i}",
          input_dim=input_dim,
          output_dim=output_dim,
          expansion=expansion,
          stride=stride,
        )
      )
      input_dim = output_dim
    output_channels = self.output_channels
    if self.multiplier > 1.0:  # as Pax: a narrower network keeps the full embedding
      output_channels = _make_divisible(
        output_channels * self.multiplier, self.divisible_by, self.min_depth
      )
    body.append(
      self.conv_params.clone().set(
        name="final_conv", filter_shape=(1, 1, input_dim, output_channels), filter_stride=(1, 1)
      )
    )
    if self.output_spatial_pooling_params is not None:
      body.append(self.output_spatial_pooling_params.clone().set(name="output_spatial_pooling"))
    if self.num_classes:
      body.append(
        self.predict_params.clone().set(
          name="predictions", input_dims=self.output_channels, output_dims=self.num_classes
        )
      )
    self.create_child("body", pax_fiddle.Config(sequential.Sequential, layers=body))

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """images [B, H, W, C] -> [B, output_channels] (pooled) or [B, num_classes]."""
    return self.body(inputs)


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap
