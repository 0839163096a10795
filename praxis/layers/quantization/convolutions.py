"""Pax's quantized Conv2D: convolutions.Conv2D whose kernel is served quantized.

In INFERENCE mode the kernel `w` [h, w, C_in / groups, C_out] is int8 with a
per-output-channel `w_quantized_scale` [C_out]; inputs may be quantized too
(act_params). Training modes raise: Pax has no QAT for convolutions.
"""

from __future__ import annotations

import jax
from jax import numpy as jnp
from praxis import base_layer
from praxis import pytypes
from praxis.layers import convolutions
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantizer

WeightHParams = base_layer.WeightHParams
QuantizationParams = quantization_hparams.QuantizationParams
JTensor = pytypes.JTensor


class Conv2D(
  convolutions.Conv2D, quantizer.QuantizationLayer
):  # pytype: disable=signature-mismatch
  """Quantized Conv2D (SAME / VALID / causal padding as the float layer)."""

  _PACK_4BIT_DIM = 0

  def setup(self) -> None:
    self.check_dimensions()
    c_out = self.filter_shape[-1]
    self.set_up_weights(
      weight_name="w",
      weight_params=WeightHParams(
        shape=list(self.filter_shape),
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        dtype=self.dtype,
        init=self.kernel_init,
      ),
      scale_shape=[c_out],
    )
    if self.bias:
      self.create_variable("b", WeightHParams(shape=[c_out], init=self.bias_init, dtype=self.dtype))
    self.create_child("weight_norm", self.weight_norm_tpl.clone().set(dim=c_out))

  def __call__(self, inputs: JTensor) -> JTensor:
    """[B, H, W, C_in] -> [B, H', W', C_out]."""
    c_in_per_group = self.filter_shape[2]
    if inputs.shape[3] % c_in_per_group:
      raise ValueError(
        f"Input features {inputs.shape[3]} must be a multiple of the filter's input dim "
        f"{c_in_per_group} (input shape {inputs.shape}, filter shape {self.filter_shape})."
      )
    groups = inputs.shape[3] // c_in_per_group
    if self.filter_shape[3] % groups:
      raise ValueError(
        f"Filter output dim {self.filter_shape[3]} must be a multiple of the feature group "
        f"count {groups} (input shape {inputs.shape}, filter shape {self.filter_shape})."
      )
    inputs = self._shard_bhwc(inputs.astype(self.fprop_dtype))
    if self.quantization is None:
      out = jax.lax.conv_general_dilated(
        lhs=inputs,
        rhs=self.weight_norm(self.theta.w),
        window_strides=tuple(self.filter_stride),
        padding=self._compute_padding(),
        rhs_dilation=tuple(self.dilations),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=groups,
      )
    else:
      out = quantizer.quantized_conv(
        self, inputs, self._compute_padding(), ("NHWC", "HWIO", "NHWC"), groups
      )  # [B, H', W', C_out]
    out = self._shard_bhwc(out)
    if self.bias:
      out = out + jnp.reshape(self.theta.b, (1,) * (out.ndim - 1) + (-1,))
    return out


# Pax's module-level names for the types and variable collections this module's API uses.
instance_field = base_layer.instance_field
