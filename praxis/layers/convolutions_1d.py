"""Pax's 1-D sequence convolutions: DepthwiseConv1D and the conformer's LightConv1D.

DepthwiseConv1D convolves each channel of [B, T, C] on its own with a kernel
w[k, 1, C * m] (m the channel multiplier; Pax's layout, `use_2d_conv_weight_shape` adds a trailing
1 for lingvo checkpoints), 'SAME' padded or causal (k_eff - 1 steps before, none after).

LightConv1D (lingvo's LConvLayer):
  x -> ln -> linear_start_act * sigmoid(linear_start_gated) -> depthwise_conv1d -> conv_norm
    -> conv_activation -> linear_end -> dropout -> + x
Both are also `praxis.layers.convolutions` names, as in Pax.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import activations
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers import stochastics

WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
template_field = base_hyperparams.template_field
SplitDimsMapping = Any


def _causal_padding(kernel_size: int, dilation: int) -> int:
  return dilation * (kernel_size - 1)


class BaseDepthwiseConv1D(base_layer.BaseLayer):
  """The fields of Pax's depthwise 1-D convolutions.

  Attributes:
    filter_shape: (kernel_size, in_channels, channel_multipliers).
    bias: add a bias `b[in_channels * channel_multipliers]`.
    bias_init: initialiser of the bias.
    is_causal: pad only before the sequence, so step t sees steps <= t.
    use_2d_conv_weight_shape: store w as [k, 1, C * m, 1] (a lingvo 2-D conv's shape).
    rhs_dilation_rate: dilation of the kernel (atrous convolution).
  """

  filter_shape: Sequence[int] = (0, 0, 0)
  bias: bool = False
  bias_init: WeightInit = base_layer.instance_field(lambda: WeightInit.Constant(0.0))
  is_causal: bool = False
  use_2d_conv_weight_shape: bool = False
  rhs_dilation_rate: int = 1

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    raise NotImplementedError(f"{type(self).__name__} must implement __call__.")


class DepthwiseConv1D(BaseDepthwiseConv1D):
  """Depthwise 1-D convolution (lax.conv_general_dilated with one group per input channel)."""

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """`him`: mesh split of w [kernel, 1, in_channels * multiplier]."""

    him: SplitDimsMapping = None

  def _input_channels(self) -> int:
    return self.filter_shape[1]

  def _output_channels(self) -> int:
    return self.filter_shape[1] * self.filter_shape[2]

  def setup(self):
    if len(self.filter_shape) != 3 or self.rhs_dilation_rate <= 0:
      raise ValueError(
        f"DepthwiseConv1D needs filter_shape (kernel_size, in_channels, channel_multipliers) "
        f"and a positive rhs_dilation_rate; got {self.filter_shape}, {self.rhs_dilation_rate}."
      )
    him = self.weight_split_dims_mapping.him
    him = list(him) if him is not None else None
    shape = [self.filter_shape[0], 1, self.filter_shape[1] * self.filter_shape[2]]
    if self.use_2d_conv_weight_shape:
      shape.append(1)
      if him:
        him.insert(1, None)  # [h, None, i, m]
    self.create_variable(
      "w",
      WeightHParams(shape=shape, mesh_shape=self.mesh_shape, tensor_split_dims_mapping=him),
    )
    if self.bias:
      self.create_variable("b", WeightHParams(shape=[self._output_channels()], init=self.bias_init))

  def get_w(self) -> jax.Array:
    """The kernel as [kernel_size, 1, C * m]."""
    if not self.use_2d_conv_weight_shape:
      return self.theta.w
    w = jnp.squeeze(self.theta.w, -1)
    return base_layer.maybe_shard(w, self.weight_split_dims_mapping.him, self.mesh_axis_names)

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    """inputs [B, T, C], paddings [B, T] (padded steps read as 0) -> [B, T, C * m]."""
    if paddings is not None:
      inputs = py_utils.apply_padding(inputs, paddings[:, :, None])
    if self.is_causal:
      padding = [(_causal_padding(self.filter_shape[0], self.rhs_dilation_rate), 0)]
    else:
      padding = "SAME"
    if self.fprop_dtype is not None and inputs.dtype != self.fprop_dtype:
      inputs = inputs.astype(self.fprop_dtype)
    w = self.get_w()
    out = jax.lax.conv_general_dilated(
      lhs=inputs,
      rhs=w.astype(inputs.dtype),  # [k, 1, C * m]
      window_strides=(1,),
      padding=padding,
      rhs_dilation=(self.rhs_dilation_rate,),
      dimension_numbers=("NHC", "HIO", "NHC"),
      feature_group_count=self._input_channels(),
    )  # [B, T, C * m]
    if self.bias:
      out = out + self.theta.b.astype(out.dtype)
    return out


class LightConv1D(base_layer.BaseLayer):
  """The conformer's lightweight convolution block (a residual around GLU + depthwise conv).

  Attributes:
    input_dims: input (and output) dim.
    kernel_size: kernel size of the depthwise conv.
    conv_activation_tpl: activation after the conv's normalization (Swish).
    dropout_prob: residual dropout probability.
    ln_tpl: the input normalization (`ln`).
    linear_start_tpl: template of `linear_start_act` and `linear_start_gated` (the GLU halves).
    depthwise_conv_tpl: template of `depthwise_conv1d`.
    conv_norm_layer_tpl: normalization after the conv (`conv_norm`, BatchNorm).
    linear_end_tpl: template of `linear_end`.
    dropout_tpl: template of `dropout`.
    is_causal: a causal depthwise conv.
    use_2d_conv_norm: feed conv_norm [B, T, 1, D] (lingvo models' 2-D norm).
  """

  input_dims: int | None = None
  kernel_size: int | None = None
  conv_activation_tpl: base_hyperparams.Config = template_field(activations.Swish)
  dropout_prob: float = 0.0
  ln_tpl: base_hyperparams.Config = template_field(normalizations.LayerNorm)
  linear_start_tpl: base_hyperparams.Config = template_field(linears.FeedForward)
  depthwise_conv_tpl: base_hyperparams.Config = template_field(DepthwiseConv1D)
  conv_norm_layer_tpl: base_hyperparams.Config = template_field(normalizations.BatchNorm)
  linear_end_tpl: base_hyperparams.Config = template_field(linears.FeedForward)
  dropout_tpl: base_hyperparams.Config = template_field(stochastics.Dropout)
  is_causal: bool = False
  use_2d_conv_norm: bool = False

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """`df`: the start projections' weights [D, D]; `him`: the depthwise conv's."""

    df: SplitDimsMapping = None
    him: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """`blf`: after the start projections and the conv; `bld`: after linear_end."""

    blf: SplitDimsMapping = None
    bld: SplitDimsMapping = None

  def _create_conv(self):
    conv_p = self.depthwise_conv_tpl.clone().set(
      filter_shape=(self.kernel_size, self.input_dims, 1), is_causal=self.is_causal
    )
    conv_p.weight_split_dims_mapping.him = self.weight_split_dims_mapping.him
    self.create_child("depthwise_conv1d", conv_p)

  def _create_conv_norm_layer(self):
    self.create_child("conv_norm", self.conv_norm_layer_tpl.clone().set(dim=self.input_dims))

  def _linear(self, tpl, wt, out_sharding):
    # The two GLU halves are slices of one [D, 2D] matrix in lingvo, hence Xavier's sqrt(3/2).
    p = tpl.clone().set(
      input_dims=self.input_dims,
      output_dims=self.input_dims,
      activation_tpl=pax_fiddle.Config(activations.Identity),
      params_init=WeightInit.Xavier(math.sqrt(3 / 2)),
    )
    p.weight_split_dims_mapping.wt = wt
    p.activation_split_dims_mapping.out = out_sharding
    return p

  def setup(self):
    wp, ap = self.weight_split_dims_mapping, self.activation_split_dims_mapping
    self.create_child("ln", self.ln_tpl.clone().set(dim=self.input_dims))
    self.create_child("linear_start_act", self._linear(self.linear_start_tpl, wp.df, ap.blf))
    self.create_child("linear_start_gated", self._linear(self.linear_start_tpl, wp.df, ap.blf))
    end_wt = list(reversed(wp.df)) if wp.df else None
    self.create_child("linear_end", self._linear(self.linear_end_tpl, end_wt, ap.bld))
    self._create_conv()
    self._create_conv_norm_layer()
    self.create_child("conv_activation", self.conv_activation_tpl.clone())
    self.create_child("dropout", self.dropout_tpl.clone().set(keep_prob=1.0 - self.dropout_prob))

  def _conv_norm(self, inputs: jax.Array, paddings: jax.Array) -> jax.Array:
    if self.use_2d_conv_norm:
      return jnp.squeeze(self.conv_norm(inputs[:, :, None, :], paddings), 2)  # via [B, T, 1, D]
    return self.conv_norm(inputs, paddings)

  def __call__(self, inputs: jax.Array, paddings: jax.Array) -> jax.Array:
    """inputs [B, T, D], paddings [B, T] -> [B, T, D]."""
    blf = self.activation_split_dims_mapping.blf
    residual = inputs
    x = self.ln(inputs, paddings)
    x = self.linear_start_act(x) * jax.nn.sigmoid(self.linear_start_gated(x))  # [B, T, D]
    x = self.depthwise_conv1d(x, paddings)
    x = base_layer.maybe_shard(x, blf, self.mesh_axis_names)
    x = self._conv_norm(x, paddings)
    x = base_layer.maybe_shard(x, blf, self.mesh_axis_names)
    x = self.conv_activation(x)
    x = self.dropout(self.linear_end(x))
    return x + residual
