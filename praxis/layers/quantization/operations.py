"""Pax's quantization math: quantize / dequantize tensors and run einsums on quantized weights.

Symmetric quantization of t along `contract_dims` (the dims an einsum sums
over, so each output channel gets its own scale):
  scale = max|t| / qmax,  q = clip(round(t / scale), qmin, qmax),  t ~ q * scale
Asymmetric (use_symmetric=False) adds a zero point; with
  scale = (max t - min t) / (qmax - qmin),  z = qmin - min t / scale
it returns q = clip(round(t / scale + z)) and zp = z * scale, so t ~ q * scale - zp.
For an einsum x @ w with w ~ qw * s - zp:  x @ w = (x @ qw) * s - x @ zp.

[qmin, qmax] is [-2^(b-1), 2^(b-1) - 1] signed, [0, 2^b - 1] unsigned, and
[-448, 448] for float8 e4m3 (use_fp).

The QT einsum with a custom gradient lives in custom_einsum.py (re-exported).
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

from absl import logging
import jax
from jax import lax
from jax import numpy as jnp
from opt_einsum import parser as einsum_parser
from praxis import pytypes
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import utils
from praxis.layers.quantization.custom_einsum import custom_einsum
from praxis.layers.quantization.custom_einsum import get_scale_eqn
from praxis.layers.quantization.fakequant import FP4
from praxis.layers.quantization.fakequant import clip_to_fp16
from praxis.layers.quantization.fakequant import factorize_weight
from praxis.layers.quantization.fakequant import fakequant_activation
from praxis.layers.quantization.fakequant import fakequant_einsum
from praxis.layers.quantization.fakequant import fakequant_vn
from praxis.layers.quantization.fakequant import reduce_precision_activation
from praxis.layers.quantization.precision import eqn_to_activation_contract_dims
from praxis.layers.quantization.precision import eqn_to_weight_contract_dims
from praxis.layers.quantization.precision import get_min_max
from praxis.layers.quantization.precision import pass_through
from praxis.layers.quantization.precision import reduce_precision
from praxis.layers.quantization.subchannel import compute_shape_with_subchannels
from praxis.layers.quantization.subchannel import get_scale_shape
from praxis.layers.quantization.subchannel import get_sub_channel_shape

JTensor = pytypes.JTensor
PRNGKey = pytypes.PRNGKey
WeightQuantizationParams = quantization_hparams.WeightQuantizationParams
INT4_TYPES = utils.INT4_TYPES
INT_TYPES = utils.INT_TYPES


def _weight_scale_fill_dims(eqn: str) -> list[int]:
  """Output dims (leading) the weight lacks, where its scale must get size-1 dims.

  E.g. 'ABD,KDNH->KABNH': the scale [K, N, H] must broadcast as [K, 1, 1, N, H].
  When all missing dims already lead the output, broadcasting needs nothing.
  """
  operands, out = eqn.split("->")
  w = operands.split(",")[1].replace(".", "")
  out = out.replace(".", "")
  fill = [i for i, c in enumerate(out) if c not in w]
  if fill and fill[-1] == len(fill) - 1:
    return []
  return fill


def _act_scale_fill_dims(eqn: str) -> list[int]:
  """Output dims (counted from the end) the activation lacks, for its scale."""
  operands, out = eqn.split("->")
  act = operands.split(",")[0].replace(".", "")
  out = out.replace(".", "")
  return [-(i + 1) for i, c in enumerate(reversed(out)) if c not in act]


def _dequantize(x, scale, zp, contract_dims):
  """x * scale - zp, first giving squeezed scale / zp back their contracted dims."""
  if scale is None and zp is not None:
    raise ValueError("_dequantize: a zero point needs its scale; got zp without scale.")
  if scale is not None:
    if scale.ndim and scale.ndim != x.ndim:
      scale = jnp.expand_dims(scale, contract_dims)
    x = x * scale
  if zp is not None:
    if zp.ndim and zp.ndim != x.ndim:
      zp = jnp.expand_dims(zp, contract_dims)
    x = x - zp
  return x


def compute_offset(eqn_normalized: str, x: JTensor, zp: JTensor) -> JTensor:
  """x @ zp: the zero-point correction of `eqn_normalized` (no '...'), zp over w's output dims."""
  if "." in eqn_normalized:
    raise ValueError(
      f'compute_offset needs an equation without "...", got {eqn_normalized!r}; '
      "normalize it with opt_einsum.parser.parse_einsum_input first."
    )
  if x.dtype in INT_TYPES:
    raise ValueError(f"compute_offset: x must be float (dequantized), got {x.dtype}.")
  if zp.dtype in INT_TYPES:
    raise ValueError(f"compute_offset: zp must be float, got {zp.dtype}.")
  operands, out = eqn_normalized.split("->")
  lhs, rhs = operands.split(",")
  zp_names = "".join(c for c in out if c in rhs)
  return jnp.einsum(f"{lhs},{zp_names}->{out}", x, zp)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def dot_general_int(lhs, rhs, dimension_numbers):
  """lax.dot_general of two int tensors, accumulated in int32.

  Mixed int dtypes are first cast to the narrowest dtype holding both. Its
  derivative is that of a float dot_general (the casts are ignored).
  """
  for name, t in (("lhs", lhs), ("rhs", rhs)):
    if t.dtype not in INT_TYPES:
      raise ValueError(
        f"dot_general_int: {name}.dtype={t.dtype} is not an int type "
        f"({INT_TYPES}); use lax.dot_general for floats."
      )
  if lhs.dtype != rhs.dtype:
    common = utils.get_smallest_matching_dtype(lhs, rhs)
    lhs, rhs = lhs.astype(common), rhs.astype(common)
  return lax.dot_general(lhs, rhs, dimension_numbers, preferred_element_type=jnp.int32)


@dot_general_int.defjvp
def dot_general_int_jvp(dimension_numbers, primals, tangents):
  out = dot_general_int(*primals, dimension_numbers)
  _, out_dot = jax.jvp(lambda a, b: lax.dot_general(a, b, dimension_numbers), primals, tangents)
  return out, out_dot


def einsum(
  eqn: str,
  x: JTensor,
  w: JTensor,
  scale: JTensor,
  zp: JTensor | None = None,
  scale_act: JTensor | None = None,
  zp_act: JTensor | None = None,
  scale_eqn: str | None = None,
  zp_eqn: str | None = None,
  swap_xw: bool = False,
) -> JTensor:
  """einsum(eqn, x, w) with w quantized (w ~ w * scale - zp), x float or quantized.

  x int and w int: an int32 dot_general. Otherwise a float einsum (int4 is
  widened to int8, float8 weights to bfloat16). The result is multiplied by
  `scale` (or einsum(scale_eqn, out, scale)), by `scale_act` when x is
  quantized, and corrected by x @ zp (or einsum(zp_eqn, x, zp)). An
  activation zero point (zp_act) dequantizes both operands first. swap_xw
  runs the einsum as einsum(eqn, w, x) (eqn written for that order).
  """
  first, second = (w, x) if swap_xw else (x, w)
  in_str, out_str, _ = einsum_parser.parse_einsum_input((eqn, first, second))
  eqn_normalized = f"{in_str}->{out_str}"

  if zp_act is not None:
    x_deq = _dequantize(x, scale_act, zp_act, eqn_to_activation_contract_dims(eqn))
    w_deq = _dequantize(w, scale, zp, eqn_to_weight_contract_dims(eqn))
    return jnp.einsum(eqn, x_deq, w_deq)

  if jnp.issubdtype(w.dtype, jnp.floating) and jnp.finfo(w.dtype).bits == 8:
    w = w.astype(jnp.bfloat16)

  if x.dtype in INT_TYPES and w.dtype in INT_TYPES:
    if swap_xw:
      raise ValueError("einsum: swap_xw is for a float x; both operands are int here.")
    dims, perm = utils.einsum_eqn_to_dimension_numbers(eqn_normalized)
    out = dot_general_int(x, w, dims)
    if perm is not None:
      out = lax.transpose(out, perm)
  else:
    x = x.astype(jnp.int8) if x.dtype in INT4_TYPES else x
    w = w.astype(jnp.int8) if w.dtype in INT4_TYPES else w
    out = jnp.einsum(eqn_normalized, w, x) if swap_xw else jnp.einsum(eqn_normalized, x, w)

  if scale_act is not None:
    if scale_act.ndim == 0:
      scale = scale * scale_act
    else:
      out = out * jnp.expand_dims(scale_act, _act_scale_fill_dims(eqn))

  fill = _weight_scale_fill_dims(eqn)
  if fill and not swap_xw:
    scale = jnp.expand_dims(scale, fill)
  out = jnp.einsum(scale_eqn, out, scale) if scale_eqn else out * scale

  if zp is not None:
    x_deq = _dequantize(x, scale_act, zp_act, eqn_to_activation_contract_dims(eqn))
    if zp_eqn is not None:
      offset = jnp.einsum(zp_eqn, x_deq, zp)
    else:
      offset = compute_offset(eqn_normalized, x_deq, zp)
    out = out - offset
  return out


def reduce_einsum_weight_precision(
  eqn: str | None,
  t: JTensor,
  calculation_dtype: jnp.dtype = jnp.bfloat16,
  squeeze: bool = True,
  need_gradient: bool = False,
  bits: int = 8,
  optimization_on_bound: bool = False,
  percentile: float = 1.0,
  use_symmetric: bool = True,
  quant_method: str = "default",
  contract_dims: Sequence[int] | None = None,
) -> tuple[JTensor, JTensor, JTensor | None]:
  """Quantizes einsum weight `t` per output channel: (q, scale, zp or None).

  The channel is every dim of `t` that `eqn` keeps (or give `contract_dims`
  instead of `eqn`). squeeze drops the size-1 contracted dims of scale / zp.
  """
  if eqn is not None and contract_dims is not None:
    raise ValueError("reduce_einsum_weight_precision: give eqn or contract_dims, not both.")
  if eqn is not None:
    contract_dims = eqn_to_weight_contract_dims(eqn)
  elif not contract_dims:
    raise ValueError("reduce_einsum_weight_precision: contract_dims is needed when eqn is None.")
  t = t.astype(calculation_dtype)
  q, scale, zp = reduce_precision(
    t,
    contract_dims,
    need_gradient,
    bits,
    optimization_on_bound,
    percentile=percentile,
    use_symmetric=use_symmetric,
    quant_method=quant_method,
  )
  if squeeze:
    scale = jnp.squeeze(scale)
    zp = None if zp is None else jnp.squeeze(zp)
  return q, scale, zp


def reduce_einsum_activation_precision(
  eqn: str,
  t: JTensor,
  bits: int = 8,
  squeeze: bool = True,
  per_channel: bool = False,
  symmetric: bool = True,
  percentile: float = 1.0,
) -> tuple[JTensor, JTensor, JTensor | None]:
  """Quantizes einsum activation `t`: per tensor, or per token (per_channel) along eqn's contracted dims."""
  contract_dims = eqn_to_activation_contract_dims(eqn) if per_channel else None
  q, scale, zp = reduce_precision(
    t, contract_dims, bits=bits, use_symmetric=symmetric, percentile=percentile
  )
  if squeeze:
    scale = jnp.squeeze(scale, axis=contract_dims)
    zp = None if zp is None else jnp.squeeze(zp, axis=contract_dims)
  return q, scale, zp


def aqt_einsum(
  eqn: str,
  lhs: JTensor,
  rhs: JTensor,
  *,
  lhs_quantizer: Any,
  rhs_quantizer: Any,
  scale_eqn: str | None = None,
  zp_eqn: str | None = None,
) -> JTensor:
  """einsum(eqn, lhs, rhs) with both operands quantized by TensorQuantizers (AQT).

  Each quantizer quantizes its operand along the einsum's contracted dims; the
  integer-valued einsum is rescaled by einsum(eqn, lhs_scale, rhs_scale) and
  corrected by lhs @ rhs_zp. scale_eqn / zp_eqn (weight-only quantization)
  rescale / correct with those equations instead. rhs_quantizer.sub_channels
  (deprecated: prefer block_size) quantizes rhs in sub-channels and runs a
  dequantized einsum.
  """
  in_str, out_str, _ = einsum_parser.parse_einsum_input((eqn, lhs, rhs))
  eqn_normalized = f"{in_str}->{out_str}"
  dims, _ = utils.einsum_eqn_to_dimension_numbers(eqn_normalized)
  lhs_contract, rhs_contract = dims[0]

  if getattr(rhs_quantizer, "sub_channels", None) is not None:
    logging.warning("sub_channels is deprecated; use block_size for sub-channel scales.")
    if lhs_quantizer.precision is not None:
      raise ValueError(
        "aqt_einsum: sub_channels supports weight-only quantization; set the "
        "activation quantizer precision to None."
      )
    split = compute_shape_with_subchannels(rhs_quantizer.sub_channels, rhs.shape, rhs_contract)
    q, s, z = rhs_quantizer.quantize(
      rhs.reshape(split), rhs_contract, squeeze_scale=False, quantized_dtype=rhs.dtype
    )
    rhs_deq = rhs_quantizer.dequantize(q, s, rhs_contract, z).reshape(rhs.shape)
    return jnp.einsum(eqn, lhs, rhs_deq)

  if scale_eqn is not None or zp_eqn is not None:
    if lhs_quantizer.precision is not None:
      raise NotImplementedError(
        "aqt_einsum: scale_eqn / zp_eqn support weight-only quantization; "
        "set the activation quantizer precision to None."
      )
    rhs, out_scale, rhs_zp = rhs_quantizer.quantize(
      rhs, rhs_contract, squeeze_scale=True, quantized_dtype=rhs.dtype
    )
  else:
    lhs, lhs_scale, _ = lhs_quantizer.quantize(
      lhs, lhs_contract, squeeze_scale=False, quantized_dtype=lhs.dtype
    )
    rhs, rhs_scale, rhs_zp = rhs_quantizer.quantize(
      rhs, rhs_contract, squeeze_scale=False, quantized_dtype=rhs.dtype
    )
    # Scales keep size-1 contracted dims, so the same eqn multiplies them.
    out_scale = jnp.einsum(eqn, lhs_scale, rhs_scale)

  out = jnp.einsum(eqn, lhs, rhs)
  out = jnp.einsum(scale_eqn, out, out_scale) if scale_eqn else out * out_scale
  if rhs_zp is not None:
    if getattr(lhs_quantizer, "precision", None) is not None:
      raise NotImplementedError(
        "aqt_einsum: a weight zero point (asymmetric weights) with quantized "
        "activations is not supported; quantize weights symmetrically."
      )
    if zp_eqn is not None:
      offset = jnp.einsum(zp_eqn, lhs, rhs_zp)
    else:
      offset = compute_offset(eqn_normalized, lhs, jnp.squeeze(rhs_zp))
    out = out - offset
  return out


# Pax's operations module holds all of these; some live in sibling modules here.
__all__ = [
  "FP4",
  "INT4_TYPES",
  "INT_TYPES",
  "aqt_einsum",
  "clip_to_fp16",
  "compute_offset",
  "compute_shape_with_subchannels",
  "custom_einsum",
  "dot_general_int",
  "einsum",
  "eqn_to_activation_contract_dims",
  "eqn_to_weight_contract_dims",
  "factorize_weight",
  "fakequant_activation",
  "fakequant_einsum",
  "fakequant_vn",
  "get_min_max",
  "get_scale_eqn",
  "get_scale_shape",
  "get_sub_channel_shape",
  "pass_through",
  "reduce_einsum_activation_precision",
  "reduce_einsum_weight_precision",
  "reduce_precision",
  "reduce_precision_activation",
]
