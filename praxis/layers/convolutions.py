"""Convolutions (Pax's Conv2D, ConvBNAct), with a weight normalization applied to the kernel.

Conv2D: inputs [B, H, W, C_in] (NHWC), kernel w[h, w, C_in / groups, C_out] (HWIO), outputs
[B, H', W', C_out]. The kernel passes through the `weight_norm` child (IdentityNorm by default;
WeightNormL2 or SpectralNorm normalise it). A filter with C_in = 1 on C inputs is depthwise.
ConvBNAct: Conv2D, then BatchNorm (child `bn`), then the activation (child `activation`), the
unit of Pax's image encoders (resnets, mobilenet).
"""

from __future__ import annotations

from typing import Sequence

import jax

from praxis import base_hyperparams
from praxis import base_layer
from praxis.layers import activations
from praxis.layers import normalizations

WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
template_field = base_hyperparams.template_field


def _pad_beg_end(size: int) -> tuple[int, int]:
  total = size - 1
  return total // 2, total - total // 2


class Conv2D(base_layer.BaseLayer):
  """2-D convolution (Pax's fields and 'SAME' padding: (k - 1) // 2 before, the rest after).

  Attributes:
    filter_shape: (height, width, in_channels, out_channels).
    filter_stride: (stride_h, stride_w).
    dilations: (dilation_h, dilation_w).
    bias: add a bias `b[out_channels]`.
    bias_init: initialiser of the bias.
    kernel_init: initialiser of `w` (None: params_init).
    padding: 'SAME' or 'VALID'.
    tf_equivalent_padding: use XLA's 'SAME'/'VALID' (TF's) padding instead of Pax's symmetric one.
    is_causal: not supported here (raises); see docs/praxis.md.
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

  def setup(self):
    if (
      self.padding not in ("SAME", "VALID")
      or len(self.filter_shape) != 4
      or (len(self.filter_stride) != 2 or min(self.filter_stride) <= 0)
    ):
      raise ValueError(
        f"Conv2D needs padding SAME/VALID, a 4-entry filter_shape and 2 positive "
        f"strides; got {self.padding}, {self.filter_shape}, {self.filter_stride}."
      )
    if self.is_causal:
      raise NotImplementedError("Conv2D(is_causal=True) is not implemented in this praxis.")
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

  def _padding(self):
    if self.tf_equivalent_padding:
      return self.padding
    if self.padding == "VALID":
      return [(0, 0), (0, 0)]
    return [_pad_beg_end((k - 1) * d + 1) for k, d in zip(self.filter_shape[:2], self.dilations)]

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if inputs.shape[3] % self.filter_shape[2]:
      raise ValueError(
        f"Conv2D: input channels {inputs.shape[3]} must be a multiple of the "
        f"filter's {self.filter_shape[2]}."
      )
    groups = inputs.shape[3] // self.filter_shape[2]
    inputs = self._cast_to_fprop_dtype(inputs)
    w = self.weight_norm(self.theta.w)  # [h, w, C_in / groups, C_out]
    out = jax.lax.conv_general_dilated(
      lhs=inputs,
      rhs=w,
      window_strides=tuple(self.filter_stride),
      padding=self._padding(),
      rhs_dilation=tuple(self.dilations),
      dimension_numbers=("NHWC", "HWIO", "NHWC"),
      feature_group_count=groups,
    )  # [B, H', W', C_out]
    if self.bias:
      out = out + self.theta.b
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
