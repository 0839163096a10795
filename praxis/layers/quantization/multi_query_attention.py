"""Pax's quantized multi-query attention part: OneHeadedAttentionProjection.

multi_query_attention.OneHeadedAttentionProjection ([..., D] -> [..., H] with w [D, H]) whose
einsum runs through QuantizationLayer.quantized_einsum. Inference variables: `w` int8 [D, H]
(packed int4 along D), `w_quantized_scale` [H] (+ `w_quantized_zp` [H] when asymmetric), float
`b` [H]. Use it as MultiQueryDotProductAttention's headless_proj_tpl.
"""

from __future__ import annotations

from typing import Any

from praxis import base_layer
from praxis import pytypes
from praxis.layers import multi_query_attention
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantizer
from praxis.layers.quantization.attentions import _require_quantization
from praxis.layers.quantization.attentions import _serving_params
from praxis.layers.quantization.attentions import _serving_pspecs
from praxis.layers.quantization.attentions import mesh_mapping
from praxis.layers.quantization.attentions import quantize_einsum_weight

QuantizationMode = quantization_hparams.QuantizationMode
QuantizationType = quantization_hparams.QuantizationType
QuantizationParams = quantization_hparams.QuantizationParams
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor


class OneHeadedAttentionProjection(  # pytype: disable=signature-mismatch
  multi_query_attention.OneHeadedAttentionProjection, quantizer.QuantizationLayer
):
  """multi_query_attention.OneHeadedAttentionProjection with a quantized w [D, H]."""

  _PACK_4BIT_DIM = 0

  def setup(self) -> None:
    wt = self.weight_split_dims_mapping.wt
    if self.mesh_shape is not None and wt is None:
      raise ValueError(
        "OneHeadedAttentionProjection: a mesh_shape needs weight_split_dims_mapping.wt "
        "(the sharding of [D, H])."
      )
    self.set_up_weights(
      weight_name="w",
      weight_params=WeightHParams(
        shape=[self.input_dim, self.output_dim],
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=mesh_mapping(self, wt, [self.input_dim, self.output_dim]),
      ),
      scale_shape=[self.output_dim],
    )
    if self.use_bias:
      self.create_variable(
        "b",
        WeightHParams(
          shape=[self.output_dim],
          init=WeightInit.Constant(0.0),
          mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=[wt[1]] if self.mesh_shape is not None else None,
        ),
      )

  def __call__(self, inputs: JTensor) -> JTensor:
    """inputs [..., D] -> [..., H]."""
    if inputs.shape[-1] != self.input_dim:
      raise ValueError(
        f"OneHeadedAttentionProjection expects [..., {self.input_dim}], got {inputs.shape}."
      )
    inputs = self._cast_to_fprop_dtype(inputs)
    out = self.quantized_einsum(eqn="...D,DH->...H", x=inputs, w=self.theta.w, reshape=[])
    if self.use_bias:
      out = out + self.theta.b
    return out

  def quantized_partition_specs(self) -> Any:
    wt = self.weight_split_dims_mapping.wt
    return _serving_pspecs(self, None if wt is None else [wt[1]], wt)

  def quantize_weight(self) -> NestedJTensor:
    """Pax's serving params: int w [D, H], w_quantized_scale [H] (+ zp), b."""
    q = _require_quantization(self, "quantize_weight")
    if self._do_static_activation_quantization():
      raise NotImplementedError("Static activation quantization is not supported yet.")
    if q.quantization_type not in (QuantizationType.PTQ, QuantizationType.AQT):
      raise ValueError(
        f"OneHeadedAttentionProjection.quantize_weight supports PTQ and AQT, not "
        f"{q.quantization_type}."
      )
    q_w, q_s, zp = quantize_einsum_weight(self, self.theta.w, [0])  # contract D
    return _serving_params(self, q_w, q_s, zp, self.theta.b if self.use_bias else None)
