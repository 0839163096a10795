"""Pax's quantized Linear (optionally low-rank), LinearLoRA and LinearActScaling.

quantization.Linear is linears.Linear whose `x @ w` runs through
QuantizationLayer.quantized_einsum. Inference variables (by
`quantization.mode`): `w` int8 [I, O] (packed int4: [I / 8, O] in int32 or
[I / 2, O] in int8), `w_quantized_scale` [O] (+ `w_quantized_zp` [O] when
asymmetric). With weight_params.block_size = b > 0 (sub-channel scales,
arXiv:2305.16619) they are `w` [I / b, b, O] and scales [I / b, O]; the
einsum runs per block and sums the rescaled blocks. rank > 0 factorizes
w ~ w_a [I, r] @ w_b [r, O], each quantized.
`quantize_weight()` turns a float layer's `w` into those inference variables;
`quantized_partition_specs()` gives their PartitionSpecs.

The layers mix in sparsifier.SparsityBaseLayer: with `sparsity` set, each
weight gets a `<name>_sparsity_mask` (plus step counters) and is pruned by
`sparsifiy` before the einsum.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Sequence

import fiddle as fdl
from jax import numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantizer
from praxis.layers.quantization import utils
from praxis.layers.quantization.sparsity import sparsifier

QuantizationMode = quantization_hparams.QuantizationMode
QuantizationType = quantization_hparams.QuantizationType
QuantizationParams = quantization_hparams.QuantizationParams
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = base_layer.template_field


def weight_hparams_to_pspec(hparams: WeightHParams, mesh_axis_names) -> Any:
  """Pax's boxed PartitionSpec of a weight (replicated dims where unmapped)."""
  mapping = hparams.tensor_split_dims_mapping
  if mapping is None:
    mapping = [None] * len(hparams.shape)
  return base_layer.BoxedPartitionSpec(meta=base_layer.to_partition_spec(mapping, mesh_axis_names))


def _out_sharding(ap, ndim):
  """Pax's output sharding: a [B, O] output takes extend_step_out or drops out's middle axis."""
  out = ap.out
  if ndim == 2:
    step_out = getattr(ap, "extend_step_out", None)
    if step_out is not None and len(step_out) == 2:
      return step_out
    if out is not None and len(out) == 3:
      return [out[0], out[2]]
  return out


class Linear(
  linears.Linear, quantizer.QuantizationLayer, sparsifier.SparsityBaseLayer
):  # pytype: disable=signature-mismatch
  """Quantized, optionally low-rank Linear without bias (see the module docstring).

  Attributes:
    rank: > 0 factorizes w into w_a [I, rank] @ w_b [rank, O]; -1 disables.
  """

  rank: int = -1
  _PACK_4BIT_DIM = 0

  def _get_sub_channel_shape(
    self, shape: Sequence[int], block_size: int, contract_dim: int
  ) -> Sequence[int]:
    """`shape` with `contract_dim` split into [blocks, block_size] (yz -> scz, by -> bsc)."""
    new_shape, _ = operations.get_sub_channel_shape(shape, block_size, [contract_dim])
    return new_shape

  def _sub_channel_block_size(self) -> int:
    q = self.quantization
    if q is not None and q.weight_params is not None and q.weight_params.block_size > 0:
      return q.weight_params.block_size
    return 0

  def _get_weight_hparams(self, using_sub_channel: bool) -> tuple[WeightHParams, WeightHParams]:
    """(weight, scale) hparams; sub-channel ones are sharded along the block dim."""
    wt = self.weight_split_dims_mapping.wt
    w_shape = [self.input_dims, self.output_dims]
    s_shape = [self.output_dims]
    if using_sub_channel:
      w_shape = list(self._get_sub_channel_shape(w_shape, self._sub_channel_block_size(), 0))
      s_shape = [w_shape[0], w_shape[2]]  # [blocks, O]
      w_sharding = None if wt is None else [wt[0], None] + list(wt[1:])
      s_sharding = None if wt is None else list(wt)
    else:
      w_sharding = wt
      s_sharding = [wt[1]] if wt is not None and len(wt) > 1 else None
    weight = WeightHParams(
      shape=w_shape,
      init=self.weight_init,
      mesh_shape=self.mesh_shape,
      tensor_split_dims_mapping=w_sharding,
    )
    scale = WeightHParams(
      shape=s_shape, mesh_shape=self.mesh_shape, tensor_split_dims_mapping=s_sharding
    )
    return weight, scale

  def setup(self) -> None:
    if self.input_dims <= 0 or self.output_dims <= 0:
      raise ValueError(
        f"Linear needs positive input_dims and output_dims, got {self.input_dims} "
        f"and {self.output_dims}; set them on the config."
      )
    wt = self.weight_split_dims_mapping.wt
    if self.rank > 0:
      for name, shape, scale in (
        ("w_a", [self.input_dims, self.rank], [self.rank]),
        ("w_b", [self.rank, self.output_dims], [self.output_dims]),
      ):
        weight = WeightHParams(
          shape=shape,
          init=self.weight_init,
          mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=wt,
        )
        self.set_up_weights(weight_name=name, weight_params=weight, scale_shape=scale)
        self.create_sparsity_variables(name, weight, scale_shape=scale)
      return
    using_sub_channel = False
    if self._sub_channel_block_size() > 0:
      # Sub-channel weights [blocks, b, O] pack along b.
      self._PACK_4BIT_DIM = 1
      using_sub_channel = (
        self.quantization is not None and self.quantization.mode == QuantizationMode.INFERENCE
      )
    weight, scale = self._get_weight_hparams(using_sub_channel)
    if self.quantization is None:
      weight.logical_axes = tuple(self.weight_axes)
    self.set_up_weights(weight_name="w", weight_params=weight, scale_hparams=scale)
    self.create_sparsity_variables("w", weight, scale_shape=[self.output_dims])

  def __call__(self, inputs: JTensor) -> JTensor:
    """inputs [..., I] -> [..., O]."""
    params = {"eqn": "...y,yz->...z", "reshape": []}
    if self.rank > 0:
      w_a = self.sparsifiy(self.theta.w_a, inputs=inputs, name="w_a")
      mid = self.quantized_einsum(x=inputs, w=w_a, weight_name="w_a", **params)
      # Pax scores w_b's activation-weighted pruning with the layer inputs too.
      w_b = self.sparsifiy(self.theta.w_b, inputs=inputs, name="w_b")
      out = self.quantized_einsum(x=mid, w=w_b, weight_name="w_b", **params)
    else:
      w = self.sparsifiy(self.theta.w, inputs=inputs, name="w")
      b = self._sub_channel_block_size()
      q = self.quantization
      if (
        q is not None
        and b > 0
        and (q.mode == QuantizationMode.INFERENCE or q.quantization_type == QuantizationType.AQT)
      ):
        in_shape = list(inputs.shape)
        inputs = inputs.reshape(self._get_sub_channel_shape(in_shape, b, len(in_shape) - 1))
        # inputs [..., s, c], w [s, c, z]: per-block products [..., s, z], then
        # scales [s, z] rescale and sum the blocks.
        params["scale_eqn"] = "...sz,sz->...z"
        params["zp_eqn"] = "...sc,sz->...z"
        if q.act_params is not None:
          params["eqn"] = "...sc,scz->...sz"
          params["swap_xw"] = False
        else:
          params["eqn"] = "scz,...sc->...sz"
          params["swap_xw"] = True
        if w.ndim == 2:  # the float weight of AQT training
          params["reshape"] = self._get_sub_channel_shape(list(w.shape), b, 0)
      out = self.quantized_einsum(x=inputs, w=w, **params)
    ap = self.activation_split_dims_mapping
    return base_layer.maybe_shard(out, _out_sharding(ap, out.ndim), self.mesh_axis_names)

  def quantized_partition_specs(self) -> Any:
    """{'params': PartitionSpecs of w, w_quantized_scale (, w_quantized_zp)}."""
    q = self._require_quantization("quantized_partition_specs")
    b = self._sub_channel_block_size()
    weight, scale = self._get_weight_hparams(b > 0)
    if b == 0:
      scale.shape, scale.mesh_shape = (), None
    scale_spec = weight_hparams_to_pspec(scale, self.mesh_axis_names)
    specs = {
      "w": weight_hparams_to_pspec(weight, self.mesh_axis_names),
      "w" + base_layer.QUANTIZED_SCALE_NAME_POSTFIX: scale_spec,
    }
    if not q.weight_params.use_symmetric:
      specs["w" + base_layer.QUANTIZED_ZP_NAME_POSTFIX] = copy.deepcopy(scale_spec)
    if self._do_static_activation_quantization():
      raise NotImplementedError("Static activation quantization is not supported yet.")
    return {base_layer.PARAMS: specs}

  def _require_quantization(self, what):
    if self.quantization is None:
      raise ValueError(
        f"{type(self).__name__}.{what} serves a quantized model: set the "
        "layer's `quantization` config."
      )
    return self.quantization

  def quantize_weight(self) -> NestedJTensor:
    """{'params': {'w': int weight, 'w_quantized_scale': [O] (, 'w_quantized_zp')}} from float w."""
    q = self._require_quantization("quantize_weight")
    wp = q.weight_params
    w = self.theta.w
    contract_dims = [0]
    b = self._sub_channel_block_size()
    if b > 0:
      w = w.reshape(self._get_sub_channel_shape(list(w.shape), b, 0))  # [s, b, O]
      contract_dims = [1]
    if self._do_static_activation_quantization():
      raise NotImplementedError("Static activation quantization is not supported yet.")
    if q.quantization_type == QuantizationType.AQT:
      q_w, q_s, zp = self.weight_quantizer.quantize(
        w, contract_dims, squeeze_scale=True, quantized_dtype=wp.dtype
      )
    elif q.quantization_type in (QuantizationType.PTQ, QuantizationType.FQ, QuantizationType.FQ_VN):
      q_w, q_s, zp = operations.reduce_precision(
        w.astype(self.dtype),
        contract_dims,
        bits=wp.precision,
        percentile=wp.clipping_coeff,
        use_symmetric=wp.use_symmetric,
        quant_method=wp.quant_method,
      )
      q_s = jnp.squeeze(q_s)
      zp = None if zp is None else jnp.squeeze(zp)
    else:
      raise NotImplementedError(
        f"quantize_weight does not support quantization_type={q.quantization_type}."
      )
    if wp.precision == 4 and wp.use_int4_packed_weights:
      q_w = utils.pack_4bit(q_w, self._PACK_4BIT_DIM, wp.int4_packed_weights_container_dtype)
    out = {"w": q_w, "w" + base_layer.QUANTIZED_SCALE_NAME_POSTFIX: q_s}
    if not wp.use_symmetric:
      out["w" + base_layer.QUANTIZED_ZP_NAME_POSTFIX] = zp
    return {base_layer.PARAMS: out}


class LinearLoRA(Linear):
  """Quantized Linear plus a float LoRA residual: x @ w + (x @ w_left) @ w_right.

  Attributes:
    lora_rank: LoRA rank r (0 disables). w_left [I, r], w_right [r, O].
    init_method: 'one_zero' (w_left ~ N(0, 1), w_right = 0) or 'output_dim'
      (w_left ~ N(0, 1 / sqrt(r)); w_right Gaussian too).
    norm_tpl: BatchNorm / GroupNorm / LayerNorm config for norm_order.
    norm_order: None, 'pre' (before w_left), 'mid' (between) or 'post' (after).
  """

  lora_rank: int = 0
  init_method: str = "one_zero"
  norm_tpl: LayerTpl = template_field(normalizations.LayerNorm)
  norm_order: str | None = None

  def setup(self):
    super().setup()
    if self.init_method == "one_zero":
      left_std, right_std = 1.0, 0.0
    elif self.init_method == "output_dim":
      left_std = 1.0 / math.sqrt(self.lora_rank)
      right_std = 1.0 / math.sqrt(self.output_dims)
    else:
      raise ValueError(f"init_method must be 'one_zero' or 'output_dim'; got {self.init_method!r}.")
    (self.eqn_left, self.eqn_right, left_shape, right_shape, left_dims, right_dims) = (
      utils.get_lora_shape_and_eqn(
        [self.input_dims, self.output_dims], self.lora_rank, "...y,yz->...z"
      )
    )
    wt = self.weight_split_dims_mapping.wt
    self.create_variable(
      "w_left",
      WeightHParams(
        shape=left_shape,
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=utils.get_left_weight_split_dims_mapping(wt, left_dims),
        init=WeightInit.Gaussian(left_std),
      ),
    )
    # Pax draws a non-zero w_right with w_left's std.
    right_init = WeightInit.Constant(0.0) if right_std == 0.0 else WeightInit.Gaussian(left_std)
    self.create_variable(
      "w_right",
      WeightHParams(
        shape=right_shape,
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=utils.get_right_weight_split_dims_mapping(wt, right_dims),
        init=right_init,
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
          f"LinearLoRA norm_tpl {fdl.get_callable(norm)} is not supported; use "
          "BatchNorm, GroupNorm or LayerNorm."
        )
      dims = {"pre": self.input_dims, "mid": self.lora_rank, "post": self.output_dims}
      if self.norm_order not in dims:
        raise ValueError(
          f"norm_order must be None, 'pre', 'mid' or 'post'; got {self.norm_order!r}."
        )
      norm.dim = dims[self.norm_order]
      self.create_child("norm", norm)

  def __call__(self, inputs: JTensor) -> JTensor:
    out = super().__call__(inputs)
    if self.lora_rank:
      h = self.norm(inputs) if self.norm_order == "pre" else inputs
      h = jnp.einsum(self.eqn_left, h, self.theta.w_left)  # [..., r]
      h = self.norm(h) if self.norm_order == "mid" else h
      h = jnp.einsum(self.eqn_right, h, self.theta.w_right)  # [..., O]
      h = self.norm(h) if self.norm_order == "post" else h
      out = out + h
    ap = self.activation_split_dims_mapping
    ap_out = ap.out
    if ap_out is not None and len(ap_out) == 3 and out.ndim == 2:
      ap_out = [ap_out[0], ap_out[2]]
    return base_layer.maybe_shard(out, ap_out, self.mesh_axis_names)


class LinearActScaling(Linear):
  """Linear whose inputs are first multiplied by a per-input-channel `w_per_channel_act_max` [I]."""

  def setup(self):
    super().setup()
    self.create_variable(
      "w_per_channel_act_max", WeightHParams(shape=[self.input_dims], init=WeightInit.Constant(0.0))
    )

  def __call__(self, inputs: JTensor) -> JTensor:
    out = super().__call__(inputs * self.theta.w_per_channel_act_max)
    ap = self.activation_split_dims_mapping
    ap_out = ap.out
    if ap_out is not None and len(ap_out) == 3 and out.ndim == 2:
      ap_out = [ap_out[0], ap_out[2]]
    return base_layer.maybe_shard(out, ap_out, self.mesh_axis_names)


# Pax's module-level names for the types and variable collections this module's API uses.
instance_field = base_layer.instance_field
