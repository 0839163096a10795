"""Pax's quantization hyper-parameters: what to quantize, how, and in which mode.

A quantized layer carries one `QuantizationParams` (field `quantization`). Its
`quantization_type` picks the method (PTQ: post-training, AQT: quantized
training with integer einsums, FQ: fake quantization in float, FQ_VN:
variational noise as a stand-in for quantization noise, FR: kept for Pax
compatibility), its `mode` the life-cycle stage (TRAINING, MATERIALIZE = turn
float weights into int weights + scales, INFERENCE, QT, CALIB), and
`weight_params` / `act_params` the per-tensor settings.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import jax.numpy as jnp


@enum.unique
class QuantizationType(str, enum.Enum):
  """Which quantization method a layer uses (Pax's string values)."""

  PTQ = "ptq"
  AQT = "aqt"
  FQ = "fq"
  FQ_VN = "fq_vn"
  FR = "fr"


@enum.unique
class QuantizationMode(str, enum.Enum):
  """Which stage of the quantization life-cycle a layer is in."""

  TRAINING = "training"
  MATERIALIZE = "materialize"
  INFERENCE = "inference"
  QT = "qt"
  CALIB = "calib"


@enum.unique
class TransformerLayer(str, enum.Enum):
  """Parts of a transformer that mixed-precision recipes address separately."""

  LINEAR = "linear"
  LINEAR_ACT = "linear_activation"
  ATTENTION = "attention"
  ATTENTION_ACT = "attention_activation"
  EMBEDDING_SOFTMAX = "embedding_softmax"
  EMBEDDING_SOFTMAX_ACT = "embedding_softmax_activation"
  EMBEDDING_NGRAMMER = "embedding_ngrammer"


@dataclasses.dataclass
class ActQuantizationParams:
  """How activations (the einsum's left operand) are quantized.

  precision: bits. unsigned_int_bounds: use [0, 2^bits - 1] instead of the
  signed range. clipping_coeff: shrink the min/max range (1.0 = hard bounds).
  stats_config: None = dynamic (per call) scales. stop_scale_gradient: no
  gradient through the scale. fp16: clip to the float16 range instead of
  quantizing to ints (QAT). per_channel: scales per output channel rather than
  per tensor. symmetric: no zero point. override_quantizer_cls: a
  TensorQuantizer subclass to use instead of the default.
  """

  precision: int = 8
  unsigned_int_bounds: bool = False
  clipping_coeff: float = 1.0
  stats_config = None
  stop_scale_gradient: bool = False
  fp16: bool = False
  per_channel: bool = True
  symmetric: bool = True
  override_quantizer_cls: type[Any] | None = None


@dataclasses.dataclass
class WeightQuantizationParams:
  """How weights (the einsum's right operand) are quantized.

  The main knobs: precision (bits), use_symmetric (False adds a zero point),
  dtype (storage dtype of the quantized weight; int8 also holds int4 values),
  clipping_coeff / min_clipping + num_optimize_clipping (fixed or searched
  clipping of the range), add_scale_eps (True: scale + eps; False: a zero scale
  becomes 1), dequant_upfront (dequantize before the matmul), sub_channels /
  block_size (finer-grained scales along the contracting dim),
  use_int4_packed_weights + int4_packed_weights_container_dtype (pack 8 int4
  values into int32 or 2 into int8), calculation_dtype (dtype of the scale
  arithmetic), use_step_count (keep a forward-step counter variable),
  vn_* (variational-noise FQ_VN settings), kurt_loss_weight / kurt (kurtosis
  regulariser target, 1.8 = uniform), quant_loss_weight, and quant_method
  ('default' min/max, 'bin' binarisation by mean|w|, 'bin_norm').
  """

  precision: int = 8
  unsigned_int_bounds: bool = False
  clipping_coeff: float = 1.0
  stop_scale_gradient: bool = False
  min_clipping: float | None = None
  num_optimize_clipping: int | None = None
  use_symmetric: bool = True
  add_scale_eps: bool | None = True
  dequant_upfront: bool = False
  dtype: jnp.dtype = jnp.int8
  quant_loss_weight: float | None = None
  optimize_clipping_per_channel: bool = False
  sub_channels: int | None = None
  calculation_dtype: jnp.dtype = jnp.float32
  use_step_count: bool = False
  use_int4_packed_weights: bool = True
  int4_packed_weights_container_dtype: jnp.dtype = jnp.int32
  vn_scale: float | None = None
  vn_start_step: int = 0
  vn_noise_type: str = "uniform"
  vn_weight_norm_type: str = "PerChannelLinf"
  kurt_loss_weight: float | None = None
  kurt: float = 1.8
  block_size: int = 0
  quant_method: str = "default"
  override_quantizer_cls: type[Any] | None = None


@dataclasses.dataclass
class QuantizedTrainingParams:
  """Bit widths and dtypes of AQT's custom forward / backward einsums.

  bits_fwd / bits_bwd: quantization bits of the forward pass and of the
  gradient einsums (None = no quantization there). cast_bits_*: cast the
  quantized operands to that many bits' int dtype. random_rounding_bwd:
  stochastic rounding of gradients. einsum_output_dtype /
  einsum_scale_output_dtype: dtypes of the integer einsum and of its rescaling.
  bwd_output_dtype: cast of the gradients, if set.
  """

  bits_fwd: int | None = 8
  bits_bwd: int | None = 8
  cast_bits_fwd: int | None = None
  cast_bits_bwd: int | None = None
  random_rounding_bwd: bool = True
  einsum_output_dtype: jnp.dtype = jnp.bfloat16
  einsum_scale_output_dtype: jnp.dtype = jnp.float32
  bwd_output_dtype: jnp.dtype | None = None


@dataclasses.dataclass
class QuantizationParams:
  """A layer's full quantization setting (Pax's `quantization` field)."""

  quantization_type: QuantizationType = QuantizationType.PTQ
  mode: QuantizationMode = QuantizationMode.INFERENCE
  act_params: ActQuantizationParams | None = None
  weight_params: WeightQuantizationParams = dataclasses.field(
    default_factory=WeightQuantizationParams
  )
  quantized_training_params: QuantizedTrainingParams = dataclasses.field(
    default_factory=QuantizedTrainingParams
  )
