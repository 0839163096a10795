"""Pax's QuantizationLayer: the mixin that gives a layer quantized weights and einsums.

A quantized layer (e.g. quantization.Linear) subclasses its float layer and
QuantizationLayer, creates its weight with `set_up_weights` and runs its
contraction with `quantized_einsum`. What happens depends on
`quantization.mode` / `quantization_type`:
- INFERENCE: the weight is stored quantized (`w` int8 / packed int4,
  `w_quantized_scale`, `w_quantized_zp` when asymmetric); activations are
  optionally quantized per call; operations.einsum runs the int math.
- QT: operations.custom_einsum (quantized forward and backward).
- CALIB (FR): tracks max x in the non-trainable `framestat`.
- TRAINING: float weight; AQT quantizes both operands with the
  `act_quantizer` / `weight_quantizer` children (TensorQuantizer); FQ
  fake-quantizes them; FQ_VN adds variational noise to the weight.
quantization=None makes the layer its float self.
"""

from __future__ import annotations

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import utils
from praxis.layers.quantization.tensor_quantizer import TensorQuantizer

WeightHParams = base_layer.WeightHParams
JTensor = pytypes.JTensor
ActQuantizationParams = quantization_hparams.ActQuantizationParams
QuantizationMode = quantization_hparams.QuantizationMode
QuantizationType = quantization_hparams.QuantizationType
QuantizationParams = quantization_hparams.QuantizationParams
WeightQuantizationParams = quantization_hparams.WeightQuantizationParams
instance_field = base_layer.instance_field

__all__ = [
  "QuantizationLayer",
  "TensorQuantizer",
  "create_tensor_quantizer",
  "do_static_activation_quantization",
  "quantized_conv",
]


def _is_fp8(dtype) -> bool:
  return jnp.issubdtype(dtype, jnp.floating) and jnp.finfo(dtype).bits == 8


def do_static_activation_quantization(act_params: ActQuantizationParams | None) -> bool:
  """True when activations use precomputed (static) statistics."""
  return act_params is not None and act_params.stats_config is not None


def create_tensor_quantizer(
  name: str,
  quant_params: ActQuantizationParams | WeightQuantizationParams | None,
) -> pax_fiddle.Config[TensorQuantizer]:
  """A TensorQuantizer config carrying `quant_params` (None: a pass-through quantizer)."""
  tq = pax_fiddle.Config(TensorQuantizer, name=name)
  if quant_params is None:
    return tq
  if quant_params.override_quantizer_cls is not None:
    tq.cls = quant_params.override_quantizer_cls
  tq.precision = quant_params.precision
  tq.stop_scale_gradient = quant_params.stop_scale_gradient
  tq.unsigned_int_bounds = quant_params.unsigned_int_bounds
  if isinstance(quant_params, ActQuantizationParams):
    tq.use_symmetric = quant_params.symmetric
  if isinstance(quant_params, WeightQuantizationParams):
    tq.min_clipping = quant_params.min_clipping
    tq.num_optimize_clipping = quant_params.num_optimize_clipping
    tq.add_scale_eps = quant_params.add_scale_eps
    tq.use_symmetric = quant_params.use_symmetric
    tq.quant_loss_weight = quant_params.quant_loss_weight
    tq.kurt_loss_weight = quant_params.kurt_loss_weight
    tq.kurt = quant_params.kurt
    tq.optimize_clipping_per_channel = quant_params.optimize_clipping_per_channel
    # 1.0 means "no clipping", which the quantizer spells None.
    coeff = quant_params.clipping_coeff
    tq.clipping_coeff = None if coeff == 1.0 else coeff
    tq.sub_channels = quant_params.sub_channels
  return tq


class QuantizationLayer(base_layer.BaseLayer):
  """Mixin for quantized layers (see the module docstring).

  Attributes:
    quantization: the layer's QuantizationParams; None = not quantized.
  """

  quantization: QuantizationParams | None = instance_field(QuantizationParams)
  # The weight dim that packed int4 weights are packed along; set by subclasses.
  _PACK_4BIT_DIM = None

  def create_tensor_quantizers(self):
    q = self.quantization
    self.create_child(
      "act_quantizer", create_tensor_quantizer("act_quantizer", q.act_params if q else None)
    )
    self.create_child(
      "weight_quantizer",
      create_tensor_quantizer("weight_quantizer", q.weight_params if q else None),
    )

  def _do_static_activation_quantization(self) -> bool:
    return do_static_activation_quantization(
      self.quantization.act_params if self.quantization else None
    )

  def _packs_int4(self) -> bool:
    wp = self.quantization.weight_params
    if wp.precision == 4 and wp.use_int4_packed_weights:
      if self._PACK_4BIT_DIM is None:
        raise ValueError(
          f"{type(self).__name__}: use_int4_packed_weights needs the class to "
          "set _PACK_4BIT_DIM (the weight dim to pack along)."
        )
      return True
    return False

  def set_up_weights(
    self,
    *,
    weight_name: str,
    weight_params: base_layer.WeightHParams,
    scale_shape: list[int] | None = None,
    scale_hparams: base_layer.WeightHParams | None = None,
  ):
    """Creates the weight (float or quantized, by mode) and the quantizers / counters it needs."""
    scale_shape = list(scale_shape or [])
    q = self.quantization
    if not q:
      self.create_variable(weight_name, weight_params)
      return
    wp = q.weight_params
    dtype = wp.dtype
    if utils.dtype_to_bits(dtype) < wp.precision:
      raise ValueError(
        f"weight dtype {jnp.dtype(dtype).name} cannot hold precision="
        f"{wp.precision} bits; pick a wider weight_params.dtype."
      )
    if q.mode == QuantizationMode.INFERENCE:
      if q.quantization_type == QuantizationType.FR:
        raise NotImplementedError("FR quantization has no inference mode yet.")
      if self._packs_int4():
        dtype = wp.int4_packed_weights_container_dtype
        weight_params.shape = utils.get_packed_shape(
          weight_params.shape, self._PACK_4BIT_DIM, packing_factor=2 if dtype == jnp.int8 else 8
        )
      if do_static_activation_quantization(q.act_params):
        raise NotImplementedError("Static activation quantization is not supported yet.")
      if _is_fp8(dtype):
        dtype = jnp.int8  # fp8 weights are stored bit-cast to int8
      self.create_quantized_variable(
        weight_name,
        weight_params,
        scale_shape,
        scale_hparams=scale_hparams,
        dtype=dtype,
        use_symmetric=wp.use_symmetric,
      )
    elif q.mode == QuantizationMode.CALIB:
      if q.quantization_type != QuantizationType.FR:
        raise ValueError("CALIB mode is for FR quantization only.")
      self.create_variable(
        "framestat",
        WeightHParams(shape=[1], init=base_layer.WeightInit.Constant(0), dtype=jnp.bfloat16),
        trainable=False,
      )
      self.create_variable(weight_name, weight_params)
    else:
      self.create_variable(weight_name, weight_params)
    if q.quantization_type == QuantizationType.AQT:
      self.create_tensor_quantizers()
    if q.mode == QuantizationMode.TRAINING and do_static_activation_quantization(q.act_params):
      raise NotImplementedError("Static activation quantization is not supported yet.")
    if wp.use_step_count:
      self.create_variable(
        "step_count",
        WeightHParams(shape=[], init=base_layer.WeightInit.Constant(0), dtype=jnp.int32),
        trainable=False,
      )

  @nn.nowrap
  def get_quantized_weight(
    self, name: str, use_symmetric: bool = True
  ) -> tuple[JTensor, JTensor, JTensor | None]:
    """(weight, scale, zp), int4-unpacked; int4 widened to int8 off TPU."""
    w, s, zp = super().get_quantized_weight(name, use_symmetric)
    if self.quantization is None:
      raise ValueError(
        f"{type(self).__name__}.get_quantized_weight: the layer has no "
        "quantization config; set `quantization` to serve a quantized model."
      )
    if self._packs_int4():
      w = utils.unpack_4bit(w, self._PACK_4BIT_DIM, self.quantization.weight_params.dtype)
    if not py_utils.is_tpu() and w.dtype in utils.INT4_TYPES:
      w = w.astype(jnp.int8)
    return w, s, zp

  def _inference_einsum(self, eqn, x, weight_name, scale_eqn, zp_eqn, swap_xw, reshape=None):
    q = self.quantization
    if q.quantization_type == QuantizationType.FR:
      raise NotImplementedError("FR quantization has no inference mode yet.")
    w, s, zp = self.get_quantized_weight(weight_name, use_symmetric=q.weight_params.use_symmetric)
    if reshape and list(w.shape) != list(reshape) and not swap_xw:
      # A weight stored with merged dims (e.g. [D, N*H] of attention_combine_dims): split them
      # as eqn reads them; the per-channel scale / zp are the kept dims of that shape.
      w = jnp.reshape(w, reshape)
      kept = operations.get_scale_shape(reshape, operations.eqn_to_weight_contract_dims(eqn))
      s = jnp.reshape(s, kept)
      zp = None if zp is None else jnp.reshape(zp, kept)
    scale_act = zp_act = None
    if do_static_activation_quantization(q.act_params):
      logging.info("Static activation quantization is not supported yet.")
      x = x.astype(jnp.int8)
    elif q.act_params is not None:
      ap = q.act_params
      x, scale_act, zp_act = operations.reduce_einsum_activation_precision(
        eqn,
        x,
        bits=ap.precision,
        per_channel=ap.per_channel,
        symmetric=ap.symmetric,
        percentile=ap.clipping_coeff,
      )
      if ap.precision <= 8 and ap.symmetric:
        x = x.astype(jnp.int8)
    if _is_fp8(q.weight_params.dtype):
      w = jax.lax.bitcast_convert_type(w, q.weight_params.dtype).astype(jnp.bfloat16)
    return operations.einsum(
      eqn,
      x,
      w,
      s,
      zp=zp,
      scale_act=scale_act,
      zp_act=zp_act,
      scale_eqn=scale_eqn,
      zp_eqn=zp_eqn,
      swap_xw=swap_xw,
    )

  def _training_einsum(self, eqn, x, w, step_count):
    q = self.quantization
    wp, ap = q.weight_params, q.act_params
    if q.quantization_type == QuantizationType.AQT:
      if not getattr(self.act_quantizer, "use_symmetric", True):
        raise NotImplementedError("AQT supports symmetric activation quantization only.")
      return operations.aqt_einsum(
        eqn, x, w, lhs_quantizer=self.act_quantizer, rhs_quantizer=self.weight_quantizer
      )
    if q.quantization_type == QuantizationType.FQ:
      if ap is not None:
        x = operations.fakequant_activation(
          x,
          bits=ap.precision,
          eqn=eqn,
          per_channel=ap.per_channel,
          symmetric=ap.symmetric,
          percentile=ap.clipping_coeff,
        )
      w = operations.fakequant_einsum(
        eqn,
        w,
        bits=wp.precision,
        use_symmetric=wp.use_symmetric,
        calculation_dtype=wp.calculation_dtype,
        block_size=wp.block_size,
        quant_method=wp.quant_method,
      )
      out = jnp.einsum(eqn, x, w)
      return operations.clip_to_fp16(out) if ap is not None and ap.fp16 else out
    if q.quantization_type == QuantizationType.FQ_VN:
      w = operations.fakequant_vn(
        eqn,
        w,
        self.next_prng_key(),
        wp,
        step_count,
        self.do_eval,
        bits=wp.precision,
        use_symmetric=wp.use_symmetric,
      )
    return jnp.einsum(eqn, x, w)

  def quantized_einsum(
    self,
    *,
    eqn: str,
    x: JTensor,
    w: JTensor,
    reshape: list[int],
    weight_name: str = "w",
    scale_eqn: str | None = None,
    zp_eqn: str | None = None,
    swap_xw: bool = False,
  ) -> JTensor:
    """einsum(eqn, x, w) as the layer's quantization says (see the module docstring).

    `reshape` (if non-empty) reshapes the weight first (in INFERENCE its scale / zp too); swap_xw
    (inference only) computes einsum(eqn, w, x).
    """
    q = self.quantization
    if not q:
      w = jnp.reshape(w, reshape) if reshape else w
      return jnp.einsum(eqn, w, x) if swap_xw else jnp.einsum(eqn, x, w)
    step_count = None
    if q.weight_params.use_step_count:
      step_count = self.get_var("step_count")
      if not self.do_eval:
        self.update_var("step_count", step_count + 1)
      self.add_summary("step_count", step_count)
    if q.mode == QuantizationMode.INFERENCE:
      return self._inference_einsum(eqn, x, weight_name, scale_eqn, zp_eqn, swap_xw, reshape)
    if q.mode == QuantizationMode.QT:
      return operations.custom_einsum(
        x,
        w,
        eqn=eqn,
        prng_key=self.next_prng_key(),
        params=quantization_hparams.QuantizedTrainingParams(),
      )
    if q.mode == QuantizationMode.CALIB:
      stat = self.get_var("framestat")
      self.update_var("framestat", jnp.maximum(jnp.max(x), stat).astype(jnp.bfloat16))
      return jnp.einsum(eqn, jax.lax.stop_gradient(x), jax.lax.stop_gradient(w))
    if swap_xw:
      raise ValueError("quantized_einsum: swap_xw is supported in INFERENCE mode only.")
    w = jnp.reshape(w, reshape) if reshape else w
    return self._training_einsum(eqn, x, w, step_count)


def quantized_conv(
  layer: base_layer.BaseLayer,
  x: JTensor,
  padding: str,
  dimension_numbers: tuple[str, ...],
  feature_group_count: int,
) -> JTensor:
  """Inference convolution of `layer`'s quantized `w` (per-output-channel scales)."""
  q = layer.quantization
  if not q.weight_params.use_symmetric:
    raise ValueError("quantized_conv supports symmetric weight quantization only.")
  if q.mode != QuantizationMode.INFERENCE:
    raise NotImplementedError("QAT not supported for conv; use mode=INFERENCE.")
  w, s, _ = layer.get_quantized_weight("w")
  if do_static_activation_quantization(q.act_params):
    raise NotImplementedError("Static activation quantization is not supported yet.")
  if q.act_params is not None:
    if not q.act_params.symmetric:
      raise NotImplementedError("quantized_conv supports symmetric activation quantization only.")
    x, act_scale, _ = operations.reduce_precision_activation(
      x, bits=q.act_params.precision, percentile=q.act_params.clipping_coeff
    )
    s = jnp.squeeze(act_scale) * s
  if _is_fp8(q.weight_params.dtype):
    w = jax.lax.bitcast_convert_type(w, q.weight_params.dtype).astype(jnp.bfloat16)
  out = jax.lax.conv_general_dilated(
    lhs=x,
    rhs=w.astype(x.dtype),
    window_strides=layer.filter_stride,
    padding=padding,
    rhs_dilation=layer.dilations,
    dimension_numbers=dimension_numbers,
    feature_group_count=feature_group_count,
  )
  return out * s
