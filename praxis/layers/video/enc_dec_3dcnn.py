"""Pax's `praxis.layers.video.enc_dec_3dcnn`: the 3-D CNN blocks of the video VQ-VAE / VQ-GAN.

Videos are [B, T, H, W, C]. The blocks:
  GroupNormSpatial   GroupNorm of each frame on its own (time folded into the batch).
  CondNormLayer      GroupNorm without scale / bias, then x * (1 + gamma(emb)) + beta(emb).
  CausalConv         Conv3D padded by edge replication, all of the time padding before the
                     frame (an output frame never sees a later one).
  ResBlock           norm -> swish -> conv -> norm -> swish -> conv, plus the (projected) input.
  BlurPool3D         depthwise binomial blur and subsampling (Zhang et al., arXiv:1904.11486).
  DiscriminatorResBlock  the StyleGAN discriminator's blurred, downsampling residual block.
and the helpers `scan_function` (lax.scan a function over one axis) and `depth_to_space`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_hyperparams
from praxis import base_layer
from praxis.layers import activations
from praxis.layers import convolutions
from praxis.layers import linears
from praxis.layers import normalizations
from praxis import pytypes

LayerTpl = base_hyperparams.Config
template_field = base_layer.template_field


def scan_function(fn: Callable[..., Any], in_axis: int = 0) -> Callable[..., Any]:
  """Runs `fn` once per index of axis `in_axis` of its (positional) arguments with lax.scan.

  `fn` sees its arguments with that axis of size 1 and may return any pytree whose leaves keep
  the axis at `in_axis` (of any size); the results are concatenated along it. This bounds the
  memory of an op over a long axis (e.g. the frames of a video) to one slice at a time. `fn`
  must be a pure function: a Flax module needs nn.scan instead.
  """

  def _check_rank(x):
    if x.ndim <= in_axis:
      raise ValueError(
        f"scan_function: in_axis {in_axis} should be less than the input rank {x.ndim}."
      )

  def to_scan_major(x):
    _check_rank(x)
    x = jnp.moveaxis(x, in_axis, 0)  # [n, ...rest]
    return jnp.expand_dims(x, in_axis + 1)  # [n, ..., 1 at in_axis, ...]

  def from_scan_major(x):
    _check_rank(x)
    x = jnp.moveaxis(x, 0, in_axis)  # [..., n, m, ...] with n at in_axis, m the fn's own size
    s = x.shape
    return x.reshape(*s[:in_axis], s[in_axis] * s[in_axis + 1], *s[in_axis + 2 :])

  def scanned(*args):
    slices = jax.tree.map(to_scan_major, args)
    _, results = jax.lax.scan(lambda carry, xs: (carry, fn(*xs)), (), slices)
    return jax.tree.map(from_scan_major, results)

  return scanned


def depth_to_space(x: jax.Array, t_stride: int, filters: int) -> jax.Array:
  """[B, T, H, W, t_stride * 4 * filters] -> [B, T * t_stride, 2H, 2W, filters], frame by frame.

  The channels of each position are read as (t_stride, 2, 2, filters): a sub-frame index and a
  2x2 spatial block.
  """

  def one_frame(frame):  # [B, 1, H, W, t_stride * 2 * 2 * filters]
    b, t, h, w, _ = frame.shape
    y = frame.reshape(b, t, h, w, t_stride, 2, 2, filters)
    y = y.transpose(0, 1, 4, 2, 5, 3, 6, 7)  # [B, t, t_stride, H, 2, W, 2, F]
    return y.reshape(b, t * t_stride, h * 2, w * 2, filters)

  return scan_function(one_frame, in_axis=1)(x)


class GroupNormSpatial(normalizations.GroupNorm):
  """GroupNorm over each frame's (H, W, channel group): time is folded into the batch.

  Attributes:
    num_ignored_dims: leading dims after the batch folded into it (1: time).
  """

  num_ignored_dims: int = 1
  epsilon: float = 1e-6
  input_rank: int = 4  # [B * T, H, W, C]: 5 - num_ignored_dims

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    """inputs [B, T, H, W, C] -> normalized, same shape (paddings are ignored)."""
    del paddings
    lead = inputs.shape[: 1 + self.num_ignored_dims]
    folded = inputs.reshape(-1, *inputs.shape[1 + self.num_ignored_dims :])  # [B * T, H, W, C]
    out = super().__call__(folded)
    return out.reshape(*lead, *folded.shape[1:])


class CondNormLayer(base_layer.BaseLayer):
  """Conditional GroupNorm: norm(x) * (1 + gamma(emb)) + beta(emb), gamma / beta affine in emb.

  Attributes:
    group_norm_tpl: the norm (its own scale and bias are turned off).
    linear_tpl: template of `gamma_linear` / `beta_linear` [emb_dim, dim].
    bias_tpl: template of `gamma_bias` / `beta_bias` [dim].
    emb_dim: channels of the conditioning embedding.
    dim: channels of the input.
  """

  group_norm_tpl: LayerTpl = template_field(GroupNormSpatial)
  linear_tpl: LayerTpl = template_field(linears.Linear)
  bias_tpl: LayerTpl = template_field(linears.Bias)
  emb_dim: int = 0
  dim: int = 0

  def setup(self):
    self.create_child(
      "group_norm", self.group_norm_tpl.clone().set(dim=self.dim, use_scale=False, use_bias=False)
    )
    for name in ("gamma", "beta"):
      self.create_child(
        f"{name}_linear",
        self.linear_tpl.clone().set(input_dims=self.emb_dim, output_dims=self.dim),
      )
      self.create_child(f"{name}_bias", self.bias_tpl.clone().set(dims=self.dim))

  def __call__(self, inputs: jax.Array, emb: jax.Array) -> jax.Array:
    """inputs [B, T, H, W, dim], emb [B, T, H, W, emb_dim] -> [B, T, H, W, dim]."""
    x = self.group_norm(inputs)
    gamma = self.gamma_bias(self.gamma_linear(emb))
    beta = self.beta_bias(self.beta_linear(emb))
    return x * (gamma + 1.0) + beta


class CausalConv(convolutions.Conv3D):
  """Conv3D on an edge-padded input: time padded k_t - 1 frames before, H and W (k - 1) // 2
  before and k // 2 after, then a VALID convolution (biased by default)."""

  padding: str = "VALID"
  filter_stride: Sequence[int] = (1, 1, 1)
  bias: bool = True

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """inputs [B, T, H, W, C_in] -> [B, T / s_t, H / s_h, W / s_w, C_out] (rounded up)."""
    kt, kh, kw = self.filter_shape[:3]
    pads = [(0, 0), (kt - 1, 0), ((kh - 1) // 2, kh // 2), ((kw - 1) // 2, kw // 2), (0, 0)]
    return super().__call__(jnp.pad(inputs, pads, mode="edge"))


class ResBlock(base_layer.BaseLayer):
  """Pre-activation residual block of two 3x3x3 convs.

  Attributes:
    input_dim: input channels (checked against the input).
    output_dim: output channels.
    use_conv_shortcut: project a changed channel count with a 3x3x3 conv (else 1x1x1).
    norm_layer_tpl: template of `norm_0` / `norm_1`.
    conv_layer_tpl: template of `conv_0`, `conv_1` and `conv_shortcut` (all without bias).
    activation_tpl: the activation (swish).
  """

  input_dim: int = 0
  output_dim: int = 128
  use_conv_shortcut: bool = False
  norm_layer_tpl: LayerTpl = template_field(GroupNormSpatial)
  conv_layer_tpl: LayerTpl = template_field(CausalConv)
  activation_tpl: LayerTpl = template_field(activations.Swish)

  def setup(self):
    self.create_child("norm_0", self.norm_layer_tpl.clone().set(dim=self.input_dim))
    self.create_child("norm_1", self.norm_layer_tpl.clone().set(dim=self.output_dim))
    conv = self.conv_layer_tpl.clone().set(bias=False)
    self.create_child(
      "conv_0", conv.clone().set(filter_shape=(3, 3, 3, self.input_dim, self.output_dim))
    )
    self.create_child(
      "conv_1", conv.clone().set(filter_shape=(3, 3, 3, self.output_dim, self.output_dim))
    )
    if self.input_dim != self.output_dim:
      k = 3 if self.use_conv_shortcut else 1
      self.create_child(
        "conv_shortcut",
        conv.clone().set(filter_shape=(k, k, k, self.input_dim, self.output_dim)),
      )
    self.create_child("activation", self.activation_tpl.clone())

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """inputs [B, T, H, W, input_dim] -> [B, T, H, W, output_dim]."""
    if inputs.shape[-1] != self.input_dim:
      raise ValueError(
        f"ResBlock: input dimension {inputs.shape[-1]} does not match input_dim {self.input_dim}."
      )
    x = self.conv_0(self.activation(self.norm_0(inputs)))
    x = self.conv_1(self.activation(self.norm_1(x)))
    residual = inputs
    if self.input_dim != self.output_dim:
      residual = self.conv_shortcut(residual)
    return x + residual


_BINOMIAL_ROWS = {
  2: [1.0, 1.0],
  3: [1.0, 2.0, 1.0],
  4: [1.0, 3.0, 3.0, 1.0],
  5: [1.0, 4.0, 6.0, 4.0, 1.0],
  6: [1.0, 5.0, 10.0, 10.0, 5.0, 1.0],
  7: [1.0, 6.0, 15.0, 20.0, 15.0, 6.0, 1.0],
}


def _channels_first_dimension_numbers(ndim: int) -> jax.lax.ConvDimensionNumbers:
  # Inputs / outputs [N, spatial..., C]; kernel [spatial..., I, O].
  lhs = (0, ndim - 1) + tuple(range(1, ndim - 1))
  rhs = (ndim - 1, ndim - 2) + tuple(range(0, ndim - 2))
  return jax.lax.ConvDimensionNumbers(lhs, rhs, lhs)


class BlurPool3D(base_layer.BaseLayer):
  """Depthwise blur with a normalised binomial kernel (outer product over T, H, W), then
  subsampling by `strides` (no weights).

  Attributes:
    filter_size: 2 to 7 taps per dim.
    strides: (s_t, s_h, s_w).
    padding: 'SAME' or 'VALID' (XLA's).
  """

  filter_size: int = 3
  strides: tuple[int, int, int] = (2, 2, 2)
  padding: str = "SAME"

  def setup(self):
    if self.filter_size not in _BINOMIAL_ROWS:
      raise ValueError(
        f"BlurPool3D: only filter_size of 2, 3, 4, 5, 6 or 7 is supported, got {self.filter_size}."
      )

  def _kernel(self) -> np.ndarray:
    row = np.asarray(_BINOMIAL_ROWS[self.filter_size], np.float64)
    kernel = np.einsum("i,j,k->ijk", row, row, row)
    return (kernel / kernel.sum())[..., None, None]  # [k, k, k, 1, 1]

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """inputs [B, T, H, W, C] -> [B, T / s_t, H / s_h, W / s_w, C] (rounded up with SAME)."""
    channels = inputs.shape[-1]
    kernel = jnp.asarray(np.tile(self._kernel(), (1, 1, 1, 1, channels)), self.fprop_dtype)
    return jax.lax.conv_general_dilated(
      inputs,
      kernel,  # [k, k, k, 1, C]: one blur per channel
      tuple(self.strides),
      self.padding,
      feature_group_count=channels,
      dimension_numbers=_channels_first_dimension_numbers(inputs.ndim),
    )


class DiscriminatorResBlock(base_layer.BaseLayer):
  """StyleGAN discriminator block: (conv -> act -> blur-pool -> conv -> act + blur-pool ->
  1x1x1 conv of the input) / sqrt(2); halves T, H and W.

  Attributes:
    input_dim: input channels (checked against the input).
    output_dim: output channels.
    blur_filter_size: taps of the blur.
    conv_layer_tpl: template of `conv_first`, `conv_residual`, `conv_last` (SAME, stride 1).
    activation_tpl: the activation (leaky ReLU).
    blur_pool_tpl: template of `blur_pool` (shared by both branches).
  """

  input_dim: int = 0
  output_dim: int = 128
  blur_filter_size: int = 3
  conv_layer_tpl: LayerTpl = template_field(convolutions.Conv3D)
  activation_tpl: LayerTpl = template_field(activations.LeakyReLU)
  blur_pool_tpl: LayerTpl = template_field(BlurPool3D)

  def setup(self):
    self.create_child("activation", self.activation_tpl.clone())
    conv = self.conv_layer_tpl.clone().set(padding="SAME", filter_stride=(1, 1, 1))
    d_in, d_out = self.input_dim, self.output_dim
    self.create_child("conv_first", conv.clone().set(bias=True, filter_shape=(3, 3, 3, d_in, d_in)))
    self.create_child(
      "conv_residual", conv.clone().set(bias=False, filter_shape=(1, 1, 1, d_in, d_out))
    )
    self.create_child("conv_last", conv.clone().set(bias=True, filter_shape=(3, 3, 3, d_in, d_out)))
    self.create_child(
      "blur_pool", self.blur_pool_tpl.clone().set(filter_size=self.blur_filter_size)
    )

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """inputs [B, T, H, W, input_dim] -> [B, T / 2, H / 2, W / 2, output_dim] (rounded up)."""
    if inputs.shape[-1] != self.input_dim:
      raise ValueError(
        f"DiscriminatorResBlock: input dimension {inputs.shape[-1]} does not match input_dim "
        f"{self.input_dim}."
      )
    x = self.blur_pool(self.activation(self.conv_first(inputs)))
    x = self.activation(self.conv_last(x))
    residual = self.conv_residual(self.blur_pool(inputs))
    return (x + residual) / math.sqrt(2.0)


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
