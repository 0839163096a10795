"""Pax's `praxis.layers.resnets`: ResNet (arXiv:1512.03385) on NHWC images.

    net = base_layer.instantiate(resnets.ResNet.HParamsResNet50())
    features = net.apply(variables, images)        # [B, H, W, 3] -> [B, 2048]

ResNet: entry conv (7x7 / 2) -> 3x3 / 2 max pool -> stages of blocks (the first block of a
stage has the stage's stride) -> global average pool over H, W. Every conv is a ConvBNAct
(Conv2D + BatchNorm + activation). Presets: HParamsResNet5 (a test size), 18, 34 (basic
blocks), 50, 56, 83, 101, 152 (bottleneck blocks).

Variables (Pax's): `entryflow_conv` (`w`, `bn`), `stage_{s}_block_{b}` with `body_0..2`
(bottleneck: 1x1 in, kxk mid, 1x1 out) or `body_0..1` (basic) and `shortcut` where the block
changes the shape. BatchNorm statistics live in "non_trainable".
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
from praxis.layers import normalizations
from praxis.layers import poolings
from praxis.layers import stochastics
from praxis import py_utils
from praxis import pytypes

LayerTpl = base_hyperparams.Config
template_field = base_hyperparams.template_field
WeightInit = base_layer.WeightInit


class ResNetBlock(base_layer.BaseLayer):
  """The bottleneck block: 1x1 to output_dim / 4, kxk (with the stride), 1x1 to output_dim,
  plus the (projected) input, then the activation.

  Attributes:
    input_dim, output_dim: channels in and out.
    conv_params: the ConvBNAct template of every conv.
    kernel_size: k of the middle conv.
    stride: stride of the block (on the middle conv and the shortcut).
    activation_tpl: activation inside the branch and after the sum.
    residual_droppath_prob: drop the whole branch per example with this probability.
    zero_init_residual: start the last BatchNorm's scale at 1 + gamma = 0, so the block starts
      as its shortcut (arXiv:2105.07576).
  """

  input_dim: int = 0
  output_dim: int = 0
  conv_params: LayerTpl = template_field(convolutions.ConvBNAct)
  kernel_size: int = 3
  stride: int = 1
  activation_tpl: LayerTpl = template_field(activations.ReLU)
  residual_droppath_prob: float = 0.0
  zero_init_residual: bool = False

  @property
  def _in_out_same_shape(self) -> bool:
    return self.input_dim == self.output_dim and self.stride == 1

  def _conv(self, shape, stride, activation_tpl, **overrides) -> LayerTpl:
    return self.conv_params.clone().set(
      filter_shape=tuple(shape),
      filter_stride=(stride, stride),
      activation_tpl=activation_tpl,
      **overrides,
    )

  def _body(self) -> list[LayerTpl]:
    k, mid = self.kernel_size, self.output_dim // 4
    last = {}
    if self.zero_init_residual:
      if self.conv_params.batch_norm_tpl is None:
        raise NotImplementedError("ResNetBlock: zero_init_residual needs a batch_norm_tpl.")
      # BatchNorm scales by 1 + gamma: gamma = -1 zeroes the branch at init.
      last["batch_norm_tpl"] = self.conv_params.batch_norm_tpl.clone().set(
        gamma_init=WeightInit.Constant(-1.0)
      )
    identity = pax_fiddle.Config(activations.Identity)
    return [
      self._conv((1, 1, self.input_dim, mid), 1, self.activation_tpl.clone()),
      self._conv((k, k, mid, mid), self.stride, self.activation_tpl.clone()),
      self._conv((1, 1, mid, self.output_dim), 1, identity, **last),
    ]

  def setup(self) -> None:
    self.create_children("body", self._body())
    if not self._in_out_same_shape:
      self.create_child(
        "shortcut",
        self._conv(
          (1, 1, self.input_dim, self.output_dim),
          self.stride,
          pax_fiddle.Config(activations.Identity),
        ),
      )
    if self.residual_droppath_prob > 0:
      self.create_child(
        "residual_droppath",
        pax_fiddle.Config(
          stochastics.StochasticResidual, survival_prob=1.0 - self.residual_droppath_prob
        ),
      )
    self.create_child("postact", self.activation_tpl.clone())

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """[B, H, W, input_dim] -> [B, H / stride, W / stride, output_dim]."""
    out = inputs
    for conv in self.body:
      out = conv(out)
    if not self._in_out_same_shape:
      inputs = self.shortcut(inputs)
    if self.residual_droppath_prob:
      out = self.residual_droppath(inputs, out)
    else:
      out = out + inputs
    return self.postact(out)


class ResNetBasicBlock(ResNetBlock):
  """The basic block: kxk (with the stride) to output_dim, kxk, plus the (projected) input."""

  def _body(self) -> list[LayerTpl]:
    k = self.kernel_size
    return [
      self._conv((k, k, self.input_dim, self.output_dim), self.stride, self.activation_tpl.clone()),
      self._conv(
        (k, k, self.output_dim, self.output_dim), 1, pax_fiddle.Config(activations.Identity)
      ),
    ]


def _conv_params_default() -> LayerTpl:
  # Pax's: BatchNorm with a faster-moving average, He-style init scaled by fan-out.
  return pax_fiddle.Config(
    convolutions.ConvBNAct,
    batch_norm_tpl=pax_fiddle.Config(normalizations.BatchNorm, decay=0.9),
    params_init=WeightInit.GaussianSqrtFanOut(1.4141),
  )


def _spatial_pooling_default() -> LayerTpl:
  return pax_fiddle.Config(poolings.GlobalPooling, pooling_dims=(1, 2))


class ResNet(base_layer.BaseLayer):
  """ResNet; the defaults are ResNet-50's (module docstring).

  Attributes:
    conv_params: the ConvBNAct template of every conv (the blocks get it too).
    block_params: the block template (ResNetBlock, or ResNetBasicBlock for 18 / 34).
    strides, channels, blocks, kernels: per stage: stride of its first block, output channels,
      number of blocks, kernel size.
    entryflow_conv_kernel: (h, w, input channels) of the entry conv.
    entryflow_conv_stride: its stride.
    output_spatial_pooling_params: pooling at the end; None returns [B, H', W', C].
    return_block_features: return {2 + stage: features} instead of the output.
    entry_max_pool: max-pool after the entry conv.
  """

  conv_params: LayerTpl = dataclasses.field(default_factory=_conv_params_default)
  block_params: LayerTpl = template_field(ResNetBlock)
  strides: Sequence[int] = (1, 2, 2, 2)
  channels: Sequence[int] = (256, 512, 1024, 2048)
  blocks: Sequence[int] = (3, 4, 6, 3)
  kernels: Sequence[int] = (3, 3, 3, 3)
  entryflow_conv_kernel: Sequence[int] = (7, 7, 3)
  entryflow_conv_stride: Sequence[int] = (2, 2)
  output_spatial_pooling_params: LayerTpl | None = dataclasses.field(
    default_factory=_spatial_pooling_default
  )
  return_block_features: bool = False
  entry_max_pool: bool = True

  @classmethod
  def HParamsResNet5(cls) -> LayerTpl:  # noqa: N802 (Pax's name)
    """A one-block ResNet for tests."""
    return pax_fiddle.Config(cls, strides=[1], channels=[16], blocks=[1], kernels=[1])

  @classmethod
  def HParamsResNet18(cls) -> LayerTpl:  # noqa: N802
    return pax_fiddle.Config(
      cls,
      channels=(64, 128, 256, 512),
      block_params=pax_fiddle.Config(ResNetBasicBlock),
      blocks=[2, 2, 2, 2],
    )

  @classmethod
  def HParamsResNet34(cls) -> LayerTpl:  # noqa: N802
    return pax_fiddle.Config(
      cls,
      channels=(64, 128, 256, 512),
      block_params=pax_fiddle.Config(ResNetBasicBlock),
      blocks=[3, 4, 6, 3],
    )

  @classmethod
  def HParamsResNet50(cls) -> LayerTpl:  # noqa: N802
    return pax_fiddle.Config(cls)

  @classmethod
  def HParamsResNet56(cls) -> LayerTpl:  # noqa: N802
    return pax_fiddle.Config(cls, blocks=[3, 3, 9, 3])

  @classmethod
  def HParamsResNet83(cls) -> LayerTpl:  # noqa: N802
    return pax_fiddle.Config(cls, blocks=[3, 3, 18, 3])

  @classmethod
  def HParamsResNet101(cls) -> LayerTpl:  # noqa: N802
    return pax_fiddle.Config(cls, blocks=[3, 4, 23, 3])

  @classmethod
  def HParamsResNet152(cls) -> LayerTpl:  # noqa: N802
    return pax_fiddle.Config(cls, blocks=[3, 8, 36, 3])

  def setup(self) -> None:
    stages = len(self.strides)
    if not stages == len(self.channels) == len(self.blocks) == len(self.kernels):
      raise ValueError(
        f"ResNet needs one entry per stage in strides, channels, blocks and kernels; got "
        f"{len(self.strides)}, {len(self.channels)}, {len(self.blocks)}, {len(self.kernels)}."
      )
    block_params = self.block_params.clone()
    if hasattr(block_params, "conv_params"):
      block_params.conv_params = self.conv_params.clone()
    # The entry conv feeds the first stage: a bottleneck stage takes a quarter of its channels.
    contraction = 4 if self.block_params.cls is ResNetBlock else 1
    input_dim = self.channels[0] // contraction
    kh, kw, kc = self.entryflow_conv_kernel
    self.create_child(
      "entryflow_conv",
      self.conv_params.clone().set(
        filter_shape=(kh, kw, kc, input_dim), filter_stride=tuple(self.entryflow_conv_stride)
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
        self.create_child(
          f"stage_{stage}_block_{block}",
          block_params.clone().set(
            kernel_size=kernel,
            input_dim=input_dim,
            output_dim=channel,
            stride=stride if block == 0 else 1,
          ),
        )
        input_dim = channel
    if self.output_spatial_pooling_params is not None:
      self.create_child("output_spatial_pooling", self.output_spatial_pooling_params)

  def __call__(self, inputs: jax.Array) -> jax.Array | dict[int, jax.Array]:
    """images [B, H, W, C] -> [B, channels[-1]] (pooled), [B, H', W', channels[-1]] (no
    pooling), or {2 + stage: [B, H_s, W_s, channels[stage]]} with return_block_features."""
    out = self.entryflow_conv(inputs)
    if self.entry_max_pool:
      out, _ = self.entryflow_maxpool(out)
    features = {}
    for stage, num_blocks in enumerate(self.blocks):
      for block in range(num_blocks):
        out = getattr(self, f"stage_{stage}_block_{block}")(out)
      features[2 + stage] = out
    if self.return_block_features:
      return features
    if self.output_spatial_pooling_params is not None:
      out = self.output_spatial_pooling(out)
    return out


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap
