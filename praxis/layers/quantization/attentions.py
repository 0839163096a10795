"""Pax's quantized attention layers: AttentionProjection(LoRA), CombinedQKVProjectionLayer,
DotProductAttention.

Each subclasses its float layer (praxis.layers.attentions) and QuantizationLayer, so that
`quantization=None` is the float layer and a QuantizationParams picks the rest (see
quantizer.py): INFERENCE stores int weights, TRAINING runs AQT / fake quant on a float one.

Inference variables (Pax's names):
  AttentionProjection    w int8 [D, N, H] (output: [D, N, H] or [N, H, D] with use_nhd_shape;
                         [D, N*H] with attention_combine_dims), w_quantized_scale [N, H]
                         (output projection: [D]), w_quantized_zp (asymmetric), b float.
                         weight_params.block_size = b > 0 splits the largest contracted dim into
                         [blocks, b]; the scale then has the blocks dim too.
  CombinedQKVProjection  w int8 [3, D, N, H], w_quantized_scale [3, N, H] (+ zp), b [3, N, H].
Packed int4 weights pack along dim 0 (projections) / 1 (combined QKV).

DotProductAttention quantizes its two activation einsums (query x key, probs x value) with AQT:
both operands go through `act_quantizer` (Pax supports nothing else here).

Not here: Pax's sparsity mixin (these layers are dense).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Sequence

import fiddle as fdl
import jax
from jax import numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import attentions
from praxis.layers import normalizations
from praxis.layers.attention_parts import _batch_letters
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantizer
from praxis.layers.quantization import utils
from praxis.layers.quantization.sparsity import sparsifier
from praxis.layers.quantization.linears import weight_hparams_to_pspec

QuantizationParams = quantization_hparams.QuantizationParams
QuantizationMode = quantization_hparams.QuantizationMode
QuantizationType = quantization_hparams.QuantizationType
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = base_layer.template_field

SCALE = base_layer.QUANTIZED_SCALE_NAME_POSTFIX
ZP = base_layer.QUANTIZED_ZP_NAME_POSTFIX


def _require_quantization(layer, what: str) -> QuantizationParams:
  if layer.quantization is None:
    raise ValueError(
      f"{type(layer).__name__}.{what} serves a quantized model: set the layer's "
      "`quantization` config."
    )
  return layer.quantization


def quantize_einsum_weight(
  layer: quantizer.QuantizationLayer, w: JTensor, contract_dims: Sequence[int]
) -> tuple[JTensor, JTensor, JTensor | None]:
  """(int weight, scale, zp or None) of float `w`, quantized per channel over `contract_dims`.

  PTQ / FQ / FQ_VN use operations.reduce_einsum_weight_precision (Pax's materialization); AQT
  uses the layer's weight_quantizer, so that a model trained with AQT serves what it trained.
  """
  q = layer.quantization
  wp = q.weight_params
  if q.quantization_type in (QuantizationType.PTQ, QuantizationType.FQ, QuantizationType.FQ_VN):
    return operations.reduce_einsum_weight_precision(
      None,
      w,
      calculation_dtype=layer.dtype,
      need_gradient=False,
      bits=wp.precision,
      optimization_on_bound=False,
      percentile=wp.clipping_coeff,
      use_symmetric=wp.use_symmetric,
      quant_method=wp.quant_method,
      contract_dims=list(contract_dims),
    )
  if q.quantization_type == QuantizationType.AQT:
    return layer.weight_quantizer.quantize(
      w, list(contract_dims), squeeze_scale=True, quantized_dtype=wp.dtype
    )
  raise ValueError(
    f"{type(layer).__name__}.quantize_weight does not support quantization_type="
    f"{q.quantization_type}; use PTQ, FQ, FQ_VN or AQT."
  )


def _serving_params(layer, q_w, q_s, zp, bias) -> NestedJTensor:
  """{'params': w, w_quantized_scale (, w_quantized_zp) (, b)}, int4 packed when asked."""
  wp = layer.quantization.weight_params
  if wp.precision == 4 and wp.use_int4_packed_weights:
    q_w = utils.pack_4bit(q_w, layer._PACK_4BIT_DIM, wp.int4_packed_weights_container_dtype)  # pylint: disable=protected-access
  out = {"w": q_w, "w" + SCALE: q_s}
  if not wp.use_symmetric:
    out["w" + ZP] = zp
  if bias is not None:
    out["b"] = bias
  return {base_layer.PARAMS: out}


def mesh_mapping(layer, mapping, shape):
  """`mapping` for a WeightHParams of `shape`.

  Without a mesh Pax keeps whatever wt says, even one of another rank (its tests shard a
  [N, H, D] weight with wt=['mdl', 'data']), and only quantized_partition_specs reads it; our
  WeightHParams rejects a rank mismatch, so such a mapping stays out of it (see pspec_of).
  """
  if layer.mesh_shape is None and mapping is not None and len(mapping) != len(shape):
    return None
  return mapping


def pspec_of(layer, mapping, ndim: int) -> Any:
  """Pax's boxed PartitionSpec of a weight of rank `ndim` split by `mapping` (None: replicated)."""
  if mapping is None:
    mapping = [None] * ndim
  return base_layer.BoxedPartitionSpec(
    meta=base_layer.to_partition_spec(list(mapping), layer.mesh_axis_names)
  )


def _serving_pspecs(layer, scale_mapping, w_mapping=None) -> Any:
  """Pax's PartitionSpecs of the serving params; the scale's shape does not matter, its mapping does.

  w_mapping: the weight's mapping when the WeightHParams could not hold it (mesh_mapping).
  """
  q = _require_quantization(layer, "quantized_partition_specs")
  if layer._do_static_activation_quantization():  # pylint: disable=protected-access
    raise NotImplementedError("Static activation quantization is not supported yet.")
  names = layer.mesh_axis_names
  scale = pspec_of(layer, scale_mapping, 0)
  w_hp = layer._weight_hparams["w"]  # pylint: disable=protected-access
  if w_mapping is not None:
    w_spec = pspec_of(layer, w_mapping, len(w_hp.shape))
  else:
    w_spec = weight_hparams_to_pspec(w_hp, names)
  specs = {"w": w_spec, "w" + SCALE: scale}
  if not q.weight_params.use_symmetric:
    specs["w" + ZP] = copy.deepcopy(scale)
  if getattr(layer, "use_bias", False):
    specs["b"] = weight_hparams_to_pspec(layer._weight_hparams["b"], names)  # pylint: disable=protected-access
  return {base_layer.PARAMS: specs}


class AttentionProjection(
  attentions.AttentionProjection, quantizer.QuantizationLayer, sparsifier.SparsityBaseLayer
):  # pytype: disable=signature-mismatch
  """attentions.AttentionProjection with a quantized weight (module docstring)."""

  _PACK_4BIT_DIM = 0

  def _sub_channel_block_size(self) -> int:
    q = self.quantization
    if q is not None and q.weight_params is not None and q.weight_params.block_size > 0:
      return q.weight_params.block_size
    return 0

  def _weight_eqn(self) -> str:
    """The projection's einsum with one batch letter A (the weight's letters as __call__'s)."""
    if self.is_output_projection:
      return "ANH,NHD->AD" if self.use_nhd_shape else "ANH,DNH->AD"
    return "AD,DNH->ANH"

  def _full_weight_shape(self) -> list[int]:
    """The weight with N and H apart (as _weight_eqn reads it)."""
    nh = [self.num_heads, self.dim_per_head]
    if self.is_output_projection and self.use_nhd_shape:
      return nh + [self.input_dim]
    return [self.input_dim] + nh

  def _stored_weight_shape(self) -> list[int]:
    """The float weight as stored: N and H merged with attention_combine_dims."""
    if not self.attention_combine_dims:
      return self._full_weight_shape()
    if self.is_output_projection and self.use_nhd_shape:
      return [self.num_heads * self.dim_per_head, self.input_dim]
    return [self.input_dim, self.num_heads * self.dim_per_head]

  def _stored_contract_dims(self) -> list[int]:
    full = operations.eqn_to_weight_contract_dims(self._weight_eqn())
    if not self.attention_combine_dims:
      return full
    # N and H merged into one dim: the contracted dims of [D, N*H] / [N*H, D].
    if self.is_output_projection:
      return [0] if self.use_nhd_shape else [1]
    return [0]

  def _get_weight_scale_shape(self, block_size: int, use_block_size: bool):
    """(weight shape, scale shape, weight mapping) of the stored weight (Pax's helper)."""
    wt = self.weight_split_dims_mapping.wt
    if self.attention_combine_dims:
      if self.use_bias:
        raise ValueError("AttentionProjection: attention_combine_dims needs use_bias=False.")
      wt = self._combined_wt(wt)
    weight_shape = self._stored_weight_shape()
    scale_shape = (
      [self.input_dim]
      if self.is_output_projection
      else (
        [self.num_heads * self.dim_per_head]
        if self.attention_combine_dims
        else [self.num_heads, self.dim_per_head]
      )
    )
    if block_size > 0 and use_block_size:
      weight_shape, dims = operations.get_sub_channel_shape(
        list(weight_shape), block_size, self._stored_contract_dims()
      )
      scale_shape = operations.get_scale_shape(weight_shape, dims)
    return list(weight_shape), list(scale_shape), wt

  def _inference_sub_channel(self) -> bool:
    q = self.quantization
    return (
      q is not None and q.mode == QuantizationMode.INFERENCE and self._sub_channel_block_size() > 0
    )

  def setup(self) -> None:
    block = self._sub_channel_block_size()
    use_block = (
      self.quantization is not None and self.quantization.mode == QuantizationMode.INFERENCE
    )
    weight_shape, scale_shape, wt = self._get_weight_scale_shape(block, use_block)
    weight_hp = WeightHParams(
      shape=weight_shape,
      mesh_shape=self.mesh_shape,
      tensor_split_dims_mapping=mesh_mapping(self, wt, weight_shape),
    )
    self.set_up_weights(weight_name="w", weight_params=weight_hp, scale_shape=scale_shape)
    self.create_sparsity_variables("w", weight_hp, scale_shape=scale_shape)
    if self.use_bias:
      full_wt = self.weight_split_dims_mapping.wt
      sharded = self.mesh_shape is not None and full_wt is not None
      if self.is_output_projection:
        shape, mapping = [self.input_dim], ([full_wt[0]] if sharded else None)
      else:
        shape = [self.num_heads, self.dim_per_head]
        mapping = [full_wt[1], full_wt[2]] if sharded else None
      self.create_variable(
        "b",
        WeightHParams(
          shape=shape,
          init=WeightInit.Constant(0.0),
          mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=mapping,
        ),
      )

  def _dequantized_sub_channel_weight(self) -> JTensor:
    """Serving with sub-channel scales: the int blocks times their scales, as a float weight.

    (Pax reshapes the int weight back and loses the block scales; we dequantize instead.)
    """
    w, s, zp = self.get_quantized_weight(
      "w", use_symmetric=self.quantization.weight_params.use_symmetric
    )
    shape, _, _ = self._get_weight_scale_shape(self._sub_channel_block_size(), True)
    _, dims = operations.get_sub_channel_shape(
      self._stored_weight_shape(), self._sub_channel_block_size(), self._stored_contract_dims()
    )
    w = w.reshape(shape).astype(self.fprop_dtype) * jnp.expand_dims(s, dims)
    if zp is not None:
      w = w - jnp.expand_dims(zp, dims)
    return w.reshape(self._full_weight_shape())

  def __call__(self, inputs: JTensor) -> JTensor:
    """inputs [..., D] -> [..., N, H] (an output projection: [..., N, H] -> [..., D])."""
    inputs = self._cast_to_fprop_dtype(inputs)
    eqn = self._einsum_eqn(inputs)
    if self._inference_sub_channel():
      out = jnp.einsum(eqn, inputs, self._dequantized_sub_channel_weight())
    else:
      reshape = self._full_weight_shape() if self.attention_combine_dims else []
      w = self.sparsifiy(self.theta.w, inputs=inputs, name="w")
      out = self.quantized_einsum(eqn=eqn, x=inputs, w=w, reshape=reshape)
    if self.use_bias:
      out = out + self.theta.b
    return out

  def quantized_partition_specs(self) -> Any:
    wt = self.weight_split_dims_mapping.wt
    if wt is None:
      mapping = None
    else:
      mapping = [wt[0]] if self.is_output_projection else [wt[1], wt[2]]
    _, _, w_mapping = self._get_weight_scale_shape(0, False)
    return _serving_pspecs(self, mapping, w_mapping)

  def quantize_weight(self) -> NestedJTensor:
    """Pax's serving params: {'params': {'w': int, 'w_quantized_scale', ...}} from the float w."""
    _require_quantization(self, "quantize_weight")
    w = self.theta.w
    contract = self._stored_contract_dims()
    block = self._sub_channel_block_size()
    if block > 0:
      shape, contract = operations.get_sub_channel_shape(list(w.shape), block, contract)
      w = w.reshape(shape)
    q_w, q_s, zp = quantize_einsum_weight(self, w, contract)
    return _serving_params(self, q_w, q_s, zp, self.theta.b if self.use_bias else None)


def _right_mapping(wt, right_dims):
  """LoRA's w_right mapping; a wt too short for the rank dims (no mesh) gives none."""
  if wt is not None and any(d >= len(wt) for d in right_dims):
    return None
  return utils.get_right_weight_split_dims_mapping(wt, right_dims)


class AttentionProjectionLoRA(AttentionProjection):
  """Quantized AttentionProjection plus a float LoRA residual (inputs @ w_left) @ w_right.

  Attributes:
    lora_rank: LoRA rank r (0 disables).
    init_method: 'one_zero' (w_left ~ N(0, 1), w_right = 0) or 'output_dim' (both Gaussian with
      std 1 / sqrt(w_left's fan-in size)).
    norm_tpl: BatchNorm / GroupNorm / LayerNorm config for norm_order.
    norm_order: None, 'pre' (before w_left), 'mid' (between) or 'post' (after).
    max_reduction: with several reduction dims, reduce over the largest one only.
  """

  lora_rank: int = 0
  init_method: str = "one_zero"
  norm_tpl: LayerTpl = template_field(normalizations.LayerNorm)
  norm_order: str | None = None
  max_reduction: bool = True

  def setup(self):
    super().setup()
    shape = self._stored_weight_shape()
    if self.is_output_projection:
      if self.use_nhd_shape:  # [N, H, D]
        eqn = "...NH,NHD->...D"
        norm_in, norm_out = shape[1], shape[-1]
        right_size, left_size = shape[-1], max(shape[0], shape[1]) * self.lora_rank
      else:  # [D, N, H]
        eqn = "...NH,DNH->...D"
        norm_in, norm_out = shape[-1], shape[0]
        right_size, left_size = shape[0], max(shape[1], shape[-1]) * self.lora_rank
    else:  # [D, N, H]
      eqn = "...D,DNH->...NH"
      norm_in, norm_out = shape[0], shape[1]
      right_size, left_size = math.prod(shape[1:]), self.lora_rank
    if self.init_method == "one_zero":
      left_std, right_std = 1.0, 0.0
    elif self.init_method == "output_dim":
      left_std, right_std = 1.0 / math.sqrt(left_size), 1.0 / math.sqrt(right_size)
    else:
      raise ValueError(f"init_method must be 'one_zero' or 'output_dim'; got {self.init_method!r}.")
    (self.eqn_left, self.eqn_right, left_shape, right_shape, left_dims, right_dims) = (
      utils.get_lora_shape_and_eqn(shape, self.lora_rank, eqn, max_reduction=self.max_reduction)
    )
    _, _, wt = self._get_weight_scale_shape(0, False)
    self.create_variable(
      "w_left",
      WeightHParams(
        shape=left_shape,
        mesh_shape=self.mesh_shape,
        init=WeightInit.Gaussian(left_std),
        tensor_split_dims_mapping=mesh_mapping(
          self, utils.get_left_weight_split_dims_mapping(wt, left_dims), left_shape
        ),
      ),
    )
    # Pax draws a non-zero w_right with w_left's std.
    right_init = WeightInit.Constant(0.0) if right_std == 0.0 else WeightInit.Gaussian(left_std)
    self.create_variable(
      "w_right",
      WeightHParams(
        shape=right_shape,
        mesh_shape=self.mesh_shape,
        init=right_init,
        tensor_split_dims_mapping=mesh_mapping(self, _right_mapping(wt, right_dims), right_shape),
      ),
    )
    if self.norm_order is not None:
      norm = self.norm_tpl.clone()
      if fdl.get_callable(norm) not in (
        normalizations.BatchNorm,
        normalizations.GroupNorm,
        normalizations.LayerNorm,
      ):
        raise NotImplementedError(
          f"AttentionProjectionLoRA norm_tpl {fdl.get_callable(norm)} is not supported; use "
          "BatchNorm, GroupNorm or LayerNorm."
        )
      dims = {"pre": norm_in, "mid": self.lora_rank, "post": norm_out}
      if self.norm_order not in dims:
        raise ValueError(
          f"norm_order must be None, 'pre', 'mid' or 'post'; got {self.norm_order!r}."
        )
      norm.dim = dims[self.norm_order]
      self.create_child("norm", norm)

  def __call__(self, inputs: JTensor) -> JTensor:
    inputs = self._cast_to_fprop_dtype(inputs)
    out = super().__call__(inputs)
    if self.lora_rank:
      h = self.norm(inputs) if self.norm_order == "pre" else inputs
      h = jnp.einsum(self.eqn_left, h, self.theta.w_left)
      h = self.norm(h) if self.norm_order == "mid" else h
      h = jnp.einsum(self.eqn_right, h, self.theta.w_right)
      h = self.norm(h) if self.norm_order == "post" else h
      out = out + h
    return out


class CombinedQKVProjectionLayer(
  attentions.CombinedQKVProjectionLayer, quantizer.QuantizationLayer, sparsifier.SparsityBaseLayer
):  # pytype: disable=signature-mismatch
  """attentions.CombinedQKVProjectionLayer with a quantized w [3, D, N, H] (module docstring)."""

  _PACK_4BIT_DIM = 1

  def _hd_shape(self) -> list[int]:
    if self.attention_combine_dims:
      return [self.num_heads * self.dim_per_head]
    return [self.num_heads, self.dim_per_head]

  def setup(self) -> None:
    wt = self.weight_split_dims_mapping.wt
    w_mapping = b_mapping = None
    if self.mesh_shape is not None:
      if wt is None:
        raise ValueError(
          "CombinedQKVProjectionLayer: a mesh_shape needs weight_split_dims_mapping.wt "
          "(the sharding of [D, N, H])."
        )
      if self.attention_combine_dims and len(wt) == 3:
        wt = [axis for axis in wt if axis is not None]
        if len(wt) != 2:
          raise ValueError("With attention_combine_dims, wt shards [D, N*H]: give two axes.")
      elif len(wt) != 3:
        raise ValueError("CombinedQKVProjectionLayer wt shards [D, N, H]: give three axes.")
      w_mapping = [None] + list(wt)
      b_mapping = [None, wt[1]] if self.attention_combine_dims else [None, wt[1], wt[2]]
    hd = self._hd_shape()
    weight_hp = WeightHParams(
      shape=[3, self.input_dim] + hd,
      init=self.params_init,
      dtype=self.dtype,
      mesh_shape=self.mesh_shape,
      tensor_split_dims_mapping=w_mapping,
    )
    self.set_up_weights(weight_name="w", weight_params=weight_hp, scale_shape=[3] + hd)
    self.create_sparsity_variables("w", weight_hp, scale_shape=[3] + hd)
    if self.use_bias:
      self.create_variable(
        "b",
        WeightHParams(
          shape=[3] + hd,
          init=WeightInit.Constant(0.0),
          mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=b_mapping,
        ),
      )

  def __call__(self, inputs: JTensor) -> tuple[JTensor, JTensor, JTensor]:
    """inputs [..., D] -> (query, key, value), each [..., N, H]."""
    if inputs.ndim == 0 or inputs.shape[-1] != self.input_dim:
      raise ValueError(
        f"CombinedQKVProjectionLayer expects [..., {self.input_dim}], got {inputs.shape}."
      )
    q = self.quantization
    if q is not None and q.mode == QuantizationMode.INFERENCE and q.act_params is not None:
      if q.act_params.stats_config is not None:
        raise NotImplementedError("Static activation quantization is not supported yet.")
      if not q.act_params.symmetric:
        raise ValueError(
          "Asymmetric activation quantization is for training only; serve with "
          "act_params.symmetric=True."
        )
    lead = _batch_letters(inputs.ndim - 1, "KDHN")
    eqn = f"{lead}D,KDNH->K{lead}NH"  # K indexes query / key / value
    full = [3, self.input_dim, self.num_heads, self.dim_per_head]
    w = self.sparsifiy(self.theta.w, inputs=inputs, name="w")
    out = self.quantized_einsum(
      eqn=eqn, x=inputs, w=w, reshape=full if self.attention_combine_dims else []
    )  # [3, ..., N, H]
    out = jax.ad_checkpoint.checkpoint_name(out, "combined_qkv_proj")
    if self.use_bias:
      b = jnp.reshape(self.theta.b, [3, self.num_heads, self.dim_per_head])
      out = out + jnp.expand_dims(b, tuple(range(1, inputs.ndim)))
    query, key, value = out[0], out[1], out[2]
    return (
      jax.ad_checkpoint.checkpoint_name(query, "query_proj"),
      jax.ad_checkpoint.checkpoint_name(key, "key_proj"),
      jax.ad_checkpoint.checkpoint_name(value, "value_proj"),
    )

  def quantized_partition_specs(self) -> Any:
    wt = self.weight_split_dims_mapping.wt
    if wt is None:
      mapping = None
    elif self.attention_combine_dims:
      mapping = [None, wt[1]]
    else:
      mapping = [None, wt[1], wt[2]]
    return _serving_pspecs(self, mapping)

  def quantize_weight(self) -> NestedJTensor:
    """Pax's serving params of the combined weight: int w [3, D, ...], scales [3, ...]."""
    _require_quantization(self, "quantize_weight")
    q_w, q_s, zp = quantize_einsum_weight(self, self.theta.w, [1])  # contract D
    return _serving_params(self, q_w, q_s, zp, self.theta.b if self.use_bias else None)


class DotProductAttention(
  attentions.DotProductAttention, quantizer.QuantizationLayer
):  # pytype: disable=signature-mismatch
  """attentions.DotProductAttention whose two attention einsums are AQT-quantized.

  Both the query x key and the probs x value einsums quantize their operands with
  `act_quantizer` (quantization.act_params). The projections are whatever proj_tpl says (use
  the quantized AttentionProjection for quantized weights). Only AQT is supported, as in Pax.
  """

  def setup(self) -> None:
    super().setup()
    q = self.quantization
    if q is None or q.quantization_type != QuantizationType.AQT:
      raise NotImplementedError(
        "The quantized DotProductAttention supports AQT only: set "
        "quantization.quantization_type=QuantizationType.AQT."
      )
    self.create_tensor_quantizers()
    if self._do_static_activation_quantization():
      raise NotImplementedError("Static activation quantization is not supported yet.")

  def quantized_partition_specs(self) -> Any:
    _require_quantization(self, "quantized_partition_specs")
    if self._do_static_activation_quantization():
      raise NotImplementedError("Static activation quantization is not supported yet.")
    return {base_layer.PARAMS: {}}

  def _aqt(self, eqn: str, lhs: JTensor, rhs: JTensor) -> JTensor:
    return operations.aqt_einsum(
      eqn, lhs, rhs, lhs_quantizer=self.act_quantizer, rhs_quantizer=self.act_quantizer
    )

  def _atten_logits(self, query: JTensor, key: JTensor) -> JTensor:
    """query [B, T, N, H], key [B, S, K, H] -> logits [B, N, T, S], both operands quantized."""
    b, t, n, h = query.shape
    k = key.shape[2]
    if k == n:
      return self._aqt("BTNH,BSNH->BNTS", query, key)
    grouped = query.reshape(b, t, k, n // k, h)
    logits = self._aqt("BTKGH,BSKH->BKGTS", grouped, key)
    return logits.reshape(b, n, t, key.shape[1])

  def _atten_context(self, probs: JTensor, value: JTensor) -> JTensor:
    """probs [B, N, T, S], value [B, S, K, H] -> [B, T, N, H], both operands quantized."""
    b, n, t, s = probs.shape
    k, h = value.shape[2], value.shape[3]
    if k == n:
      return self._aqt("BNTS,BSNH->BTNH", probs, value)
    grouped = probs.reshape(b, k, n // k, t, s)
    return self._aqt("BKGTS,BSKH->BTKGH", grouped, value).reshape(b, t, n, h)


# Pax's module-level names for the types and variable collections this module's API uses.
instance_field = base_layer.instance_field
