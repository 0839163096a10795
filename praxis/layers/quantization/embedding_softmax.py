"""Pax's quantized embedding and softmax layers.

Embedding tables are quantized per class (one scale per row of the [V, D]
table), so a lookup reads int rows and rescales them with the scales of the
looked-up ids: emb = q[ids] * scale[ids] (- zp[ids] when asymmetric). Input ids
themselves are never quantized.

- Embedding: emb_var [V, D]; INFERENCE holds int8 emb_var plus
  emb_var_quantized_scale [V] (and _zp).
- SharedEmbeddingSoftmax: the float layer whose logits_ffn.linear is the
  quantized Linear; the lookup quantizes the [D, V] logits weight per class.
- NClassMajorSharedEmbeddingSoftmax: one table w, stored [D, V] in
  MATERIALIZE and class-major [V, D] (int, + w_quantized_scale [V]) in
  INFERENCE, both for lookups and for the logits.

Training modes fake-quantize the table (FQ, FQ_VN) or run the AQT weight
quantizer over it; quantize_weight() turns float tables into the INFERENCE
variables.
"""

from __future__ import annotations

import copy
from typing import Any

import jax
from jax import numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import embedding_softmax
from praxis.layers import linears
from praxis.layers.quantization import linears as quantized_linears
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantizer
from praxis.layers.quantization import utils

QuantizationMode = quantization_hparams.QuantizationMode
QuantizationType = quantization_hparams.QuantizationType
QuantizationParams = quantization_hparams.QuantizationParams
WeightHParams = base_layer.WeightHParams
JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
instance_field = base_layer.instance_field
template_field = base_layer.template_field

_SCALE = base_layer.QUANTIZED_SCALE_NAME_POSTFIX
_ZP = base_layer.QUANTIZED_ZP_NAME_POSTFIX
# A [V, D] table against [.., D] activations: the weight contracts D, so the
# scales are per class (row).
_CLASS_MAJOR_EQN = "xy,zy->xz"
# The same per-class scales for a [D, V] (input-major) table.
_INPUT_MAJOR_EQN = "xy,yz->xz"


def _fake_quantize_table(layer, table: JTensor, eqn: str):
  """The table a training-mode lookup reads: (table, scale, zp) with scale None unless AQT.

  FQ / FQ_VN return the dequantized table; AQT returns the quantizer's integer
  values (in the table's float dtype) and per-class scales applied after the
  lookup, as in inference.
  """
  q = layer.quantization
  wp = q.weight_params
  if q.quantization_type == QuantizationType.FQ:
    return (
      operations.fakequant_einsum(
        eqn,
        table,
        bits=wp.precision,
        use_symmetric=wp.use_symmetric,
        calculation_dtype=wp.calculation_dtype,
      ),
      None,
      None,
    )
  if q.quantization_type == QuantizationType.FQ_VN:
    if wp.use_step_count:
      raise NotImplementedError(
        f"{type(layer).__name__}: FQ_VN with use_step_count is not supported for embeddings; "
        "set weight_params.use_step_count=False."
      )
    noisy = operations.fakequant_vn(
      eqn,
      table,
      layer.next_prng_key(),
      wp,
      None,
      layer.do_eval,
      bits=wp.precision,
      calculation_dtype=wp.calculation_dtype,
      use_symmetric=wp.use_symmetric,
    )
    return noisy, None, None
  if q.quantization_type == QuantizationType.AQT:
    contract_dims = operations.eqn_to_weight_contract_dims(eqn)
    return layer.weight_quantizer.quantize(
      table, contract_dims, squeeze_scale=True, quantized_dtype=table.dtype
    )
  return table, None, None  # PTQ trains in float.


def _lookup_rows(layer, table: JTensor, ids: JTensor) -> JTensor:
  """Rows ids of a class-major table [V, D] -> [..., D], by gather or one-hot matmul."""
  if layer.lookup_style == "index":
    return jnp.asarray(table)[(ids,)]
  if layer.lookup_style == "matmul":
    one_hot = jax.nn.one_hot(ids, layer.num_classes, dtype=layer.fprop_dtype)  # [..., V]
    return linears.project_last_dim(one_hot, table)
  raise ValueError(f"lookup_style must be 'index' or 'matmul', got {layer.lookup_style!r}.")


def _rescale_rows(embs: JTensor, ids: JTensor, scale, zp) -> JTensor:
  """embs [..., D] * scale[ids] (- zp[ids]): undo per-class quantization after a lookup."""
  if scale is None:
    return embs
  embs = embs * jnp.expand_dims(scale[(ids,)], -1)
  if zp is not None:
    embs = embs - jnp.expand_dims(zp[(ids,)], -1)
  return embs


def _finish_lookup(layer, embs: JTensor) -> JTensor:
  if layer.scale_sqrt_depth:
    embs = embs * layer.input_dims**0.5
  ap = layer.activation_split_dims_mapping
  return base_layer.maybe_shard(embs, ap.emb_out_split_dims_mapping, layer.mesh_axis_names)


def _quantize_table(layer, table_vd: JTensor) -> tuple[JTensor, JTensor, JTensor | None]:
  """A float class-major table [V, D] -> (int table, scale [V], zp [V] or None)."""
  q = layer.quantization
  wp = q.weight_params
  if q.quantization_type == QuantizationType.AQT:
    return layer.weight_quantizer.quantize(
      table_vd,
      operations.eqn_to_weight_contract_dims(_CLASS_MAJOR_EQN),
      squeeze_scale=True,
      quantized_dtype=wp.dtype,
    )
  return operations.reduce_einsum_weight_precision(
    _CLASS_MAJOR_EQN,
    table_vd,
    calculation_dtype=layer.dtype,
    bits=wp.precision,
    percentile=wp.clipping_coeff,
    use_symmetric=wp.use_symmetric,
  )


def _serving_vars(name: str, q_w, q_s, zp, use_symmetric: bool) -> dict[str, JTensor]:
  out = {name: q_w, name + _SCALE: q_s}
  if not use_symmetric:
    out[name + _ZP] = zp
  return out


def _class_scale_pspecs(layer, name: str, weight_hp: WeightHParams, class_axis) -> dict[str, Any]:
  """PartitionSpecs of a per-class quantized table `name`: the table's own, scales split like V."""
  weight_spec = quantized_linears.weight_hparams_to_pspec(weight_hp, layer.mesh_axis_names)
  scale_spec = base_layer.BoxedPartitionSpec(
    meta=base_layer.to_partition_spec(
      class_axis if class_axis is not None else [], layer.mesh_axis_names
    )
  )
  specs = {name: weight_spec, name + _SCALE: scale_spec}
  if not layer.quantization.weight_params.use_symmetric:
    specs[name + _ZP] = copy.deepcopy(scale_spec)
  return specs


def _maybe_create_weight_quantizer(layer) -> None:
  if layer.quantization.quantization_type == QuantizationType.AQT:
    layer.create_child(
      "weight_quantizer",
      quantizer.create_tensor_quantizer("weight_quantizer", layer.quantization.weight_params),
    )


class Embedding(embedding_softmax.Embedding):
  """Embedding whose table emb_var [V, D] is quantized per class (see the module docstring)."""

  quantization: QuantizationParams = instance_field(QuantizationParams)

  def setup(self) -> None:
    wt = self.weight_split_dims_mapping.wt
    table = WeightHParams(
      shape=[self.num_classes, self.input_dims],
      mesh_shape=self.mesh_shape,
      tensor_split_dims_mapping=wt,
    )
    wp = self.quantization.weight_params
    if self.quantization.mode == QuantizationMode.INFERENCE:
      self.create_quantized_variable(
        "emb_var", table, [self.num_classes], dtype=jnp.int8, use_symmetric=wp.use_symmetric
      )
    else:
      self.create_variable("emb_var", table)
    _maybe_create_weight_quantizer(self)

  def emb_lookup(self, ids: JTensor) -> JTensor:
    if self.quantization.act_params is not None:
      raise NotImplementedError(
        "Embedding does not quantize its input ids; set quantization.act_params=None."
      )
    if self.quantization.mode == QuantizationMode.INFERENCE:
      table, scale, zp = self.get_quantized_weight(
        "emb_var", use_symmetric=self.quantization.weight_params.use_symmetric
      )
    else:
      table, scale, zp = _fake_quantize_table(self, self.theta.emb_var, _CLASS_MAJOR_EQN)
    embs = _rescale_rows(_lookup_rows(self, table, ids), ids, scale, zp)  # [..., D]
    if self.set_nan_for_oob_id:
      embs = jnp.where(ids[..., None] < self.num_classes, embs, jnp.nan)
    return _finish_lookup(self, embs)

  def quantized_partition_specs(self) -> Any:
    wt = self.weight_split_dims_mapping.wt
    specs = _class_scale_pspecs(
      self, "emb_var", self._weight_hparams["emb_var"], None if wt is None else [wt[0]]
    )
    return {base_layer.PARAMS: specs}

  def quantize_weight(self) -> NestedJTensor:
    """{'params': int8 emb_var [V, D], emb_var_quantized_scale [V] (, _zp)} from the float table."""
    q_w, q_s, zp = _quantize_table(self, self.theta.emb_var)
    sym = self.quantization.weight_params.use_symmetric
    return {base_layer.PARAMS: _serving_vars("emb_var", q_w, q_s, zp, sym)}


class SharedEmbeddingSoftmax(embedding_softmax.SharedEmbeddingSoftmax):
  """SharedEmbeddingSoftmax with a quantized logits Linear and per-class quantized lookups.

  The logits weight logits_ffn.linear.w stays [D, V]; in INFERENCE it is the
  Linear's int8 w with w_quantized_scale [V], which the lookup reuses.
  """

  quantization: QuantizationParams = instance_field(QuantizationParams)

  def setup(self) -> None:
    if self.feed_forward_tpl is not None:
      ff = self.feed_forward_tpl.clone().set(
        input_dims=self.input_dims,
        output_dims=self.num_classes,
        activation_tpl=pax_fiddle.Config(activations.Identity),
        bias_init=self.bias_init,
        # deepcopy: a sharding may be a Config or a built (frozen) WeightSharding.
        weight_split_dims_mapping=copy.deepcopy(self.weight_split_dims_mapping),
        activation_split_dims_mapping=copy.deepcopy(self.activation_split_dims_mapping),
      )
      linear = pax_fiddle.Config(
        quantized_linears.Linear, quantization=copy.deepcopy(self.quantization)
      )
      linear.copy_fields_from(ff.linear_tpl)
      ff.linear_tpl = linear
      self.create_child("logits_ffn", ff)
    if self.bi_tempered_loss_tpl is not None:
      raise NotImplementedError(
        f"{type(self).__name__}.bi_tempered_loss_tpl is not supported here; leave it None."
      )
    _maybe_create_weight_quantizer(self)

  def emb_lookup(self, ids: JTensor) -> JTensor:
    if self.is_initializing():
      # Flax builds children lazily: one logits call creates the logits_ffn weights.
      self.get_logits(jnp.zeros((1, self.input_dims), self.fprop_dtype))
    linear = self.logits_ffn.linear
    if self.quantization.mode == QuantizationMode.INFERENCE:
      w, scale, zp = linear.get_quantized_weight(
        "w", use_symmetric=self.quantization.weight_params.use_symmetric
      )  # w [D, V], scale [V]
    else:
      w, scale, zp = _fake_quantize_table(self, linear.theta.w, _INPUT_MAJOR_EQN)
    embs = _lookup_rows(self, jnp.transpose(w), ids)  # [..., D]
    return _finish_lookup(self, _rescale_rows(embs, ids, scale, zp))


class NClassMajorSharedEmbeddingSoftmax(embedding_softmax.SharedEmbeddingSoftmax):
  """A shared embedding / softmax whose serving table is class-major: w [V, D] int.

  MATERIALIZE holds the float w [D, V] (as the float layer's logits weight) and
  quantize_weight() transposes and quantizes it; INFERENCE holds int w [V, D]
  (packed int4 along D when asked), w_quantized_scale [V] (and _zp). Only these
  two modes exist for this layer.

  Attributes:
    activation_tpl: applied to the logits.
    use_bias: add a bias [V] (child `bias`) to the logits.
  """

  activation_tpl: LayerTpl = template_field(activations.Identity)
  quantization: QuantizationParams = instance_field(QuantizationParams)
  use_bias: bool = True
  _PACK_4BIT_DIM = 1

  def _check_mode(self) -> QuantizationMode:
    mode = self.quantization.mode
    if mode not in (QuantizationMode.INFERENCE, QuantizationMode.MATERIALIZE):
      raise ValueError(
        f"{type(self).__name__} serves quantized models only: quantization.mode must be "
        f"INFERENCE or MATERIALIZE, got {mode}."
      )
    return mode

  def _packs_int4(self) -> bool:
    wp = self.quantization.weight_params
    return wp.precision == 4 and wp.use_int4_packed_weights

  def _transposed_wt(self):
    wt = self.weight_split_dims_mapping.wt
    return None if wt is None else [wt[1], wt[0]]

  def setup(self) -> None:
    wt = self.weight_split_dims_mapping.wt
    if self._check_mode() == QuantizationMode.INFERENCE:
      table = WeightHParams(
        shape=[self.num_classes, self.input_dims],
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=self._transposed_wt(),
      )
      dtype = jnp.int8
      if self._packs_int4():
        dtype = self.quantization.weight_params.int4_packed_weights_container_dtype
        factor = 2 if dtype == jnp.int8 else 8  # int4 values per container element
        table.shape = utils.get_packed_shape(
          table.shape, self._PACK_4BIT_DIM, packing_factor=factor
        )
      self.create_quantized_variable(
        "w",
        table,
        [self.num_classes],
        dtype=dtype,
        use_symmetric=self.quantization.weight_params.use_symmetric,
      )
    else:
      self.create_variable(
        "w",
        WeightHParams(
          shape=[self.input_dims, self.num_classes],
          mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=wt,
        ),
      )
    bias = pax_fiddle.Config(linears.Bias, dims=self.num_classes, bias_init=self.bias_init)
    ap = self.activation_split_dims_mapping
    if self.mesh_shape is not None and ap.out is not None:
      bias.weight_split_dims_mapping.wt = [ap.out[-1]]
    if self.use_bias:
      self.create_child("bias", bias)
    self.create_child("activation", self.activation_tpl.clone())
    if self.bi_tempered_loss_tpl is not None:
      raise NotImplementedError(
        f"{type(self).__name__}.bi_tempered_loss_tpl is not supported here; leave it None."
      )
    _maybe_create_weight_quantizer(self)

  def get_logits(self, inputs: JTensor, input_ids: JTensor | None = None) -> JTensor:
    """inputs [..., D] -> logits [..., V] (input_ids unused, for API compatibility)."""
    del input_ids
    act_params = self.quantization.act_params
    if self._check_mode() == QuantizationMode.INFERENCE:
      eqn = "...y,zy->...z"
      scale_act = zp_act = None
      if act_params is not None:
        inputs, scale_act, zp_act = operations.reduce_einsum_activation_precision(
          eqn,
          inputs,
          bits=act_params.precision,
          per_channel=act_params.per_channel,
          symmetric=act_params.symmetric,
          percentile=act_params.clipping_coeff,
        )
      w, s, zp = self.get_quantized_weight(
        "w", use_symmetric=self.quantization.weight_params.use_symmetric
      )
      out = operations.einsum(
        eqn=eqn, x=inputs, w=w, scale=s, zp=zp, scale_act=scale_act, zp_act=zp_act
      )
    else:
      if act_params is not None:
        raise NotImplementedError(
          f"{type(self).__name__} does not quantize activations in MATERIALIZE mode; set "
          "quantization.act_params=None."
        )
      out = jnp.einsum("...y,yz->...z", inputs, self.theta.w)  # [..., V]
    out = base_layer.maybe_shard(
      out,
      quantized_linears._out_sharding(self.activation_split_dims_mapping, out.ndim),  # pylint: disable=protected-access
      self.mesh_axis_names,
    )
    if self.use_bias:
      out = self.bias(out)
    logits = self.activation(out)
    if self.soft_cap_logits:
      logits = self.soft_cap_logits * jnp.tanh(logits / self.soft_cap_logits)
    return logits

  def emb_lookup(self, ids: JTensor) -> JTensor:
    if self._check_mode() == QuantizationMode.INFERENCE:
      table, scale, zp = self.get_quantized_weight(
        "w", use_symmetric=self.quantization.weight_params.use_symmetric
      )
    else:
      table, scale, zp = jnp.transpose(self.theta.w), None, None  # [V, D]
    embs = _rescale_rows(_lookup_rows(self, table, ids), ids, scale, zp)
    return _finish_lookup(self, embs)

  def get_quantized_weight(
    self, name: str, use_symmetric: bool = True
  ) -> tuple[JTensor, JTensor, JTensor | None]:
    q_w, q_s, zp = super().get_quantized_weight(name, use_symmetric)
    if self._packs_int4():
      q_w = utils.unpack_4bit(q_w, self._PACK_4BIT_DIM, self.quantization.weight_params.dtype)
    if not py_utils.is_tpu() and q_w.dtype in utils.INT4_TYPES:
      # XLA on CPU / GPU converts int4 but does not compute with it.
      q_w = q_w.astype(jnp.int8)
    return q_w, q_s, zp

  def _children_serving(self, out: dict, return_pspec: bool) -> dict:
    for name in self._private_children:
      child = getattr(self, name)
      sub = child.quantized_partition_specs() if return_pspec else child.quantize_weight()
      for col, tree in sub.items():
        out.setdefault(col, {})[name] = tree
    return out

  def quantized_partition_specs(self) -> Any:
    wt = self.weight_split_dims_mapping.wt
    table = copy.deepcopy(self._weight_hparams["w"])
    table.tensor_split_dims_mapping = self._transposed_wt()
    specs = _class_scale_pspecs(self, "w", table, None if wt is None else [wt[1]])
    return self._children_serving({base_layer.PARAMS: specs}, return_pspec=True)

  def quantize_weight(self) -> NestedJTensor:
    """{'params': {'w': int [V, D], 'w_quantized_scale': [V] (, _zp)}, plus the bias's}."""
    q_w, q_s, zp = _quantize_table(self, jnp.transpose(self.theta.w))
    if self._packs_int4():
      wp = self.quantization.weight_params
      q_w = utils.pack_4bit(q_w, self._PACK_4BIT_DIM, wp.int4_packed_weights_container_dtype)
    sym = self.quantization.weight_params.use_symmetric
    out = {base_layer.PARAMS: _serving_vars("w", q_w, q_s, zp, sym)}
    return self._children_serving(out, return_pspec=False)


# Pax's module-level names for the types and variable collections this module's API uses.
SplitDimsMapping = pytypes.SplitDimsMapping
