"""Convolutions (Pax's Conv2D, Conv3D, ConvBNAct, ConvBNActWithPadding; the 1-D ones re-exported).

Conv2D: inputs [B, H, W, C_in] (NHWC), kernel w[h, w, C_in / groups, C_out] (HWIO), outputs
[B, H', W', C_out]. The kernel passes through the `weight_norm` child (IdentityNorm by default;
WeightNormL2 or SpectralNorm normalise it). A filter with C_in = 1 on C inputs is depthwise
(`HParamsDepthwise` builds such a config). Conv3D is the same over [B, T, H, W, C] with a kernel
[t, h, w, C_in / groups, C_out] and no weight normalization.

Padding, as Pax: 'SAME' without `tf_equivalent_padding` pads (k_eff - 1) // 2 before and the rest
after on every spatial dim, whatever the stride; with it, XLA's (TF's) 'SAME' / 'VALID'. A causal
convolution (`is_causal`, only with tf_equivalent_padding and 'SAME') pads the first (time) dim
with k_eff - 1 before and nothing after, the other dims TF-'SAME' style.

ConvBNAct: Conv2D, then BatchNorm (child `bn`), then the activation (child `activation`), the unit
of Pax's image encoders. ConvBNActWithPadding also takes time paddings [B, H] and returns the
strided output paddings. DepthwiseConv1D and LightConv1D live in `convolutions_1d.py`.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import activations
from praxis.layers import normalizations

WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
template_field = base_hyperparams.template_field


def _extract_pad_beg_end(size: int) -> tuple[int, int]:
  total = size - 1
  return total // 2, total - total // 2


def _effective_kernel_size(filter_shape: int, dilation_rate: int) -> int:
  return dilation_rate * (filter_shape - 1) + 1


def causal_padding(filter_shape: int, dilation_rate: int) -> int:
  """How many steps a causal convolution pads before the sequence (and none after)."""
  return _effective_kernel_size(filter_shape, dilation_rate) - 1


def _spatial_padding(layer, n_spatial: int, pad_height_zero: bool = False):
  """Pax's padding of `layer` (a Conv2D or Conv3D): a string for XLA or [(beg, end)] per dim."""
  kernel, dilations = layer.filter_shape[:n_spatial], layer.dilations
  if not layer.tf_equivalent_padding:
    if layer.padding == "VALID":
      return [(0, 0)] * n_spatial
    return [_extract_pad_beg_end(_effective_kernel_size(k, d)) for k, d in zip(kernel, dilations)]
  if not layer.is_causal:
    return layer.padding
  # Causal in the first dim: everything before; TF 'SAME' (extra at the end) in the others.
  first = causal_padding(kernel[0], dilations[0])
  pads = [(0 if pad_height_zero else first, 0)]
  for k, d in zip(kernel[1:], dilations[1:]):
    total = causal_padding(k, d)
    pads.append((total // 2, total - total // 2))
  return pads


def _depthwise_config(cls, n_spatial, kernel_shape, in_channels, channel_multipliers, hparams):
  if len(kernel_shape) != n_spatial:
    raise ValueError(
      f"{cls.__name__}.HParamsDepthwise: kernel_shape must have {n_spatial} elements, got "
      f"{tuple(kernel_shape)}."
    )
  if "filter_shape" in hparams:
    raise ValueError(
      f"{cls.__name__}.HParamsDepthwise sets filter_shape from kernel_shape, in_channels and "
      "channel_multipliers; do not pass filter_shape."
    )
  filter_shape = tuple(kernel_shape) + (1, in_channels * channel_multipliers)
  return pax_fiddle.Config(cls, filter_shape=filter_shape, **hparams)


def _check_conv_dims(layer, n_spatial: int) -> None:
  name = type(layer).__name__
  if not layer.name:
    raise ValueError(f"{name} needs a name; set name= on its config.")
  if layer.padding not in ("SAME", "VALID"):
    raise ValueError(f"{name}: padding must be 'SAME' or 'VALID', got {layer.padding!r}.")
  for field, want in (
    ("filter_shape", n_spatial + 2),
    ("filter_stride", n_spatial),
    ("dilations", n_spatial),
  ):
    if len(getattr(layer, field)) != want:
      raise ValueError(f"{name}: {field} needs {want} values, got {getattr(layer, field)}.")
  if not all(s > 0 for s in layer.filter_stride):
    raise ValueError(f"{name}: filter_stride must be positive, got {layer.filter_stride}.")
  if layer.is_causal and not layer.tf_equivalent_padding:
    raise ValueError(f"{name}: is_causal needs tf_equivalent_padding=True (as in Pax).")
  if layer.is_causal and layer.padding == "VALID":
    raise NotImplementedError(f"{name}: a causal convolution pads; use padding='SAME'.")


def _feature_groups(layer, inputs: jax.Array) -> int:
  """inputs' channels / the filter's input channels (1 group: a full conv; C: depthwise)."""
  c_in, f_in, f_out = inputs.shape[-1], layer.filter_shape[-2], layer.filter_shape[-1]
  if c_in % f_in:
    raise ValueError(
      f"{type(layer).__name__}: input channels {c_in} (inputs {inputs.shape}) must be a "
      f"multiple of the filter's input channels {f_in} (filter_shape {layer.filter_shape})."
    )
  groups = c_in // f_in
  if f_out % groups:
    raise ValueError(
      f"{type(layer).__name__}: the filter's output channels {f_out} must be a multiple of the "
      f"{groups} feature groups (inputs {inputs.shape}, filter_shape {layer.filter_shape})."
    )
  return groups


class Conv2D(base_layer.BaseLayer):
  """2-D convolution with Pax's SAME / VALID / causal padding.

  Attributes:
    filter_shape: (height (time), width, in_channels, out_channels).
    filter_stride: (stride_h, stride_w).
    dilations: (dilation_h, dilation_w).
    bias: add a bias `b[out_channels]`.
    bias_init: initialiser of the bias.
    kernel_init: initialiser of `w` (None: params_init).
    padding: 'SAME' or 'VALID'.
    tf_equivalent_padding: use XLA's (TF's) padding instead of Pax's symmetric one.
    is_causal: pad the height (time) dim only before; needs tf_equivalent_padding and 'SAME'.
    weight_norm_tpl: normalization applied to the kernel.
  """

  filter_shape: Sequence[int] = (0, 0, 0, 0)
  filter_stride: Sequence[int] = (0, 0)
  dilations: Sequence[int] = (1, 1)
  bias: bool = False
  bias_init: WeightInit = base_layer.instance_field(lambda: WeightInit.Constant(0.0))
  kernel_init: WeightInit | None = None
  padding: str = "SAME"
  tf_equivalent_padding: bool = False
  is_causal: bool = False
  weight_norm_tpl: base_hyperparams.Config = template_field(normalizations.IdentityNorm)

  @classmethod
  def HParamsDepthwise(
    cls, *, kernel_shape: Sequence[int], in_channels: int, channel_multipliers: int = 1, **hparams
  ):
    """A depthwise config: filter_shape (kh, kw, 1, in_channels * channel_multipliers)."""
    return _depthwise_config(cls, 2, kernel_shape, in_channels, channel_multipliers, hparams)

  def check_dimensions(self) -> None:
    _check_conv_dims(self, 2)

  def setup(self):
    self.check_dimensions()
    self.create_variable(
      "w",
      WeightHParams(
        shape=list(self.filter_shape),
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        dtype=self.dtype,
        init=self.kernel_init,
      ),
    )
    if self.bias:
      self.create_variable(
        "b", WeightHParams(shape=[self.filter_shape[-1]], init=self.bias_init, dtype=self.dtype)
      )
    self.create_child("weight_norm", self.weight_norm_tpl.clone().set(dim=self.filter_shape[-1]))

  def _compute_padding(self, pad_height_zero: bool = False):
    return _spatial_padding(self, 2, pad_height_zero)

  def _shard_bhwc(self, x: jax.Array) -> jax.Array:
    if x.ndim != 4:
      return x
    return base_layer.maybe_shard(x, self.activation_split_dims_mapping.out, self.mesh_axis_names)

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """[B, H, W, C_in] -> [B, H', W', C_out]."""
    groups = _feature_groups(self, inputs)
    inputs = self._shard_bhwc(inputs.astype(self.fprop_dtype))
    out = jax.lax.conv_general_dilated(
      lhs=inputs,
      rhs=self.weight_norm(self.theta.w),  # [h, w, C_in / groups, C_out]
      window_strides=tuple(self.filter_stride),
      padding=self._compute_padding(),
      rhs_dilation=tuple(self.dilations),
      dimension_numbers=("NHWC", "HWIO", "NHWC"),
      feature_group_count=groups,
    )  # [B, H', W', C_out]
    out = self._shard_bhwc(out)
    if self.bias:
      out = out + jnp.reshape(self.theta.b, (1,) * (out.ndim - 1) + (-1,))
    return out


class Conv3D(base_layer.BaseLayer):
  """3-D convolution over [B, T, H, W, C] with Pax's SAME / VALID / causal (in T) padding.

  Attributes:
    filter_shape: (time, height, width, in_channels, out_channels).
    filter_stride: (stride_t, stride_h, stride_w).
    dilations: (dilation_t, dilation_h, dilation_w).
    bias: add a bias `b[out_channels]`.
    bias_init: initialiser of the bias.
    kernel_init: initialiser of `w` (None: params_init).
    padding: 'SAME' or 'VALID'.
    tf_equivalent_padding: use XLA's (TF's) padding instead of Pax's symmetric one.
    is_causal: pad the time dim only before; needs tf_equivalent_padding and 'SAME'.
  """

  filter_shape: Sequence[int] = (0, 0, 0, 0, 0)
  filter_stride: Sequence[int] = (0, 0, 0)
  dilations: Sequence[int] = (1, 1, 1)
  bias: bool = False
  bias_init: WeightInit = base_layer.instance_field(lambda: WeightInit.Constant(0.0))
  kernel_init: WeightInit | None = None
  padding: str = "SAME"
  tf_equivalent_padding: bool = False
  is_causal: bool = False

  @classmethod
  def HParamsDepthwise(
    cls, *, kernel_shape: Sequence[int], in_channels: int, channel_multipliers: int = 1, **hparams
  ):
    """A depthwise config: filter_shape (kt, kh, kw, 1, in_channels * channel_multipliers)."""
    return _depthwise_config(cls, 3, kernel_shape, in_channels, channel_multipliers, hparams)

  def setup(self):
    _check_conv_dims(self, 3)
    self.create_variable(
      "w",
      WeightHParams(
        shape=list(self.filter_shape),
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        init=self.kernel_init,
      ),
    )
    if self.bias:
      self.create_variable("b", WeightHParams(shape=[self.filter_shape[-1]], init=self.bias_init))

  def _compute_padding(self, pad_height_zero: bool = False):
    return _spatial_padding(self, 3, pad_height_zero)

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """[B, T, H, W, C_in] -> [B, T', H', W', C_out]."""
    groups = _feature_groups(self, inputs)
    out = jax.lax.conv_general_dilated(
      lhs=inputs.astype(self.fprop_dtype),
      rhs=self.theta.w.astype(self.fprop_dtype),  # [t, h, w, C_in / groups, C_out]
      window_strides=tuple(self.filter_stride),
      padding=self._compute_padding(),
      rhs_dilation=tuple(self.dilations),
      dimension_numbers=("NTHWC", "THWIO", "NTHWC"),
      feature_group_count=groups,
    )  # [B, T', H', W', C_out]
    if self.bias:
      out = out + jnp.reshape(self.theta.b, (1,) * (out.ndim - 1) + (-1,)).astype(out.dtype)
    return out


class ConvBNAct(Conv2D):
  """Conv2D -> BatchNorm -> activation (Pax's; the BatchNorm normalises by batch statistics in
  training, use_moving_avg_in_training is forced off).

  Attributes:
    batch_norm_tpl: the BatchNorm template (dim is set here); None for no norm.
    activation_tpl: the activation (ReLU by default).
  """

  batch_norm_tpl: base_hyperparams.Config | None = template_field(normalizations.BatchNorm)
  activation_tpl: base_hyperparams.Config = template_field(activations.ReLU)

  def setup(self):
    super().setup()
    if self.batch_norm_tpl is not None:
      bn = self.batch_norm_tpl.clone().set(
        dim=self.filter_shape[3], use_moving_avg_in_training=False
      )
      self.create_child("bn", bn)
    self.create_child("activation", self.activation_tpl.clone())

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """[B, H, W, C_in] -> [B, H', W', C_out]."""
    out = super().__call__(inputs)
    if self.batch_norm_tpl is not None:
      out = self.bn(out)
    return self.activation(out)


class ConvBNActWithPadding(ConvBNAct):
  """ConvBNAct over a padded time dim (H): returns (outputs, output paddings [B, H']).

  Padded input frames are zeroed first. With stride 1 and 'SAME' the paddings pass through;
  with 'SAME' and stride s the output keeps every s-th padding (`compat_with_lingvo`: frames
  s-1, 2s-1, ..., padded with 1 to the output length); with 'VALID' an output frame is padded
  when all the frames its window reads are. Outputs at padded frames are then zeroed.

  Attributes:
    compat_with_lingvo: lingvo's output paddings (needs dilations (1, 1)).
  """

  compat_with_lingvo: bool = False

  def setup(self):
    super().setup()
    if self.compat_with_lingvo and tuple(self.dilations) != (1, 1):
      raise ValueError("ConvBNActWithPadding(compat_with_lingvo=True) supports no dilation.")

  def __call__(self, inputs: jax.Array, paddings: jax.Array) -> tuple[jax.Array, jax.Array]:
    """inputs [B, H, W, C_in], paddings [B, H] -> ([B, H', W', C_out], [B, H'])."""
    inputs = py_utils.apply_padding(inputs, paddings[:, :, None, None])
    out = super().__call__(inputs)
    stride = self.filter_stride[0]
    if self.padding == "SAME" and stride == 1:
      return out, paddings
    if self.padding == "SAME":
      if self.compat_with_lingvo:
        out_paddings = paddings[:, stride - 1 :: stride]
        missing = out.shape[1] - out_paddings.shape[1]
        out_paddings = jnp.pad(out_paddings, [(0, 0), (0, missing)], constant_values=1)
      else:
        # Pax convolves the paddings with a [1]-kernel at this stride: every stride-th frame.
        out_paddings = paddings[:, ::stride]
    else:
      # VALID: the min over each window of filter_shape[0] frames, at the stride.
      out_paddings = jax.lax.reduce_window(
        paddings, jnp.inf, jax.lax.min, (1, self.filter_shape[0]), (1, stride), "VALID"
      )  # [B, H']
    out = out * (1.0 - out_paddings[:, :, None, None]).astype(out.dtype)
    return out, out_paddings


# Pax's 1-D convolutions are in convolutions_1d.py; imported last, they subclass nothing here.
from praxis.layers.convolutions_1d import BaseDepthwiseConv1D  # noqa: E402
from praxis.layers.convolutions_1d import DepthwiseConv1D  # noqa: E402
from praxis.layers.convolutions_1d import LightConv1D  # noqa: E402
from praxis import pytypes

__all__ = [
  "BaseDepthwiseConv1D",
  "Conv2D",
  "Conv3D",
  "ConvBNAct",
  "ConvBNActWithPadding",
  "DepthwiseConv1D",
  "LightConv1D",
  "causal_padding",
]

# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
NestedMap = py_utils.NestedMap
SplitDimsMapping = pytypes.SplitDimsMapping
