"""reduce_precision: Pax's one quantizer of a float tensor to (q, scale, zero point).

See operations.py's docstring for the formulas. Exposed as
praxis.layers.quantization.operations.{reduce_precision, get_min_max,
pass_through, eqn_to_weight_contract_dims, eqn_to_activation_contract_dims}.
"""

from __future__ import annotations

from typing import Sequence

import jax
from jax import numpy as jnp
from praxis import pytypes
from praxis.layers.quantization import optimization

JTensor = pytypes.JTensor

# Largest finite float8 e4m3fn value: the range `use_fp` quantizes into.
_FP8_E4M3_MAX = 448.0


def get_min_max(bits: int = 8, unsigned: bool = False, use_fp: bool = False) -> tuple[float, float]:
  """The representable [min, max] of `bits`-bit ints (or of float8 e4m3 with use_fp)."""
  if use_fp:
    return -_FP8_E4M3_MAX, _FP8_E4M3_MAX
  if unsigned:
    return 0, 2**bits - 1
  return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def pass_through(x: JTensor, fn) -> JTensor:
  """fn(x) forward, identity gradient (straight-through estimator)."""
  return x - jax.lax.stop_gradient(x) + jax.lax.stop_gradient(fn(x))


def eqn_to_weight_contract_dims(eqn: str) -> list[int]:
  """Dims of the einsum's second operand that the output does not keep."""
  operands, out = eqn.split("->")
  w = operands.split(",")[1].replace(".", "")
  return [i for i, c in enumerate(w) if c not in out.replace(".", "")]


def eqn_to_activation_contract_dims(eqn: str) -> list[int]:
  """Dims of the first operand that the output drops, as negative indices (it may have '...')."""
  operands, out = eqn.split("->")
  act = operands.split(",")[0].replace(".", "")
  out = out.replace(".", "")
  return [-(i + 1) for i, c in enumerate(reversed(act)) if c not in out]


def _binarize(t, contract_dims, normalize):
  """1-bit: sign(t) with scale mean|t| (t centred first when `normalize`)."""
  if normalize:
    t = t - jnp.mean(t, axis=contract_dims, keepdims=True)
  t = jnp.where(t == 0.0, 1e-6, t)  # sign(0) would be 0, not +-1
  scale = jnp.mean(jnp.abs(t), axis=contract_dims, keepdims=True)
  return pass_through(t, jnp.sign), scale, None


def reduce_precision(
  t: JTensor,
  contract_dims: Sequence[int] | None,
  need_gradient: bool = False,
  bits: int = 8,
  optimization_on_bound: bool = False,
  p_value: float = 1.0,
  percentile: float = 1.0,
  use_symmetric: bool = True,
  use_fp: bool = False,
  add_scale_eps: bool = False,
  scale_eps: float = -1.0,
  per_channel: bool = False,
  random_rounding: bool = False,
  key: jax.Array | None = None,
  save_fp8_to_int8: bool = True,
  quant_method: str = "default",
) -> tuple[JTensor, JTensor, JTensor | None]:
  """Quantizes `t` with one scale per slice along `contract_dims` (None: per tensor).

  Returns (q, scale, zp): scale and zp keep size-1 contracted dims; zp is None
  when symmetric. q is int8 / int16 / int32 (by `bits`), or, with
  need_gradient, the rounded float with a straight-through gradient. use_fp
  quantizes to float8 e4m3 (bit-cast to int8 when save_fp8_to_int8, else
  bfloat16). percentile < 1 shrinks the range; optimization_on_bound searches
  the clipping (optimization.get_best_bound). add_scale_eps adds eps (or
  scale_eps >= 0) to the scale; otherwise a zero scale becomes 1.
  random_rounding adds U(-0.5, 0.5) noise (from `key`) before rounding.
  quant_method 'bin' / 'bin_norm' with bits=1 binarises.
  """
  if bits == 1 and quant_method in ("bin", "bin_norm"):
    return _binarize(t, contract_dims, quant_method == "bin_norm")
  qmin, qmax = get_min_max(bits, use_fp=use_fp)
  if use_symmetric:
    bound = jnp.max(jnp.abs(t), axis=contract_dims, keepdims=True)
    levels = qmax
  else:
    t_max = jnp.max(t, axis=contract_dims, keepdims=True)
    t_min = jnp.min(t, axis=contract_dims, keepdims=True)
    bound = t_max - t_min
    levels = qmax - qmin
  if isinstance(percentile, jax.Array) or percentile < 1.0:
    bound = bound * percentile
  elif optimization_on_bound:
    bound = optimization.get_best_bound(t, bound, qmin, qmax, p_value, per_channel=per_channel)
  scale = bound / levels
  if add_scale_eps:
    scale = scale + (jnp.finfo(t.dtype).eps if scale_eps < 0.0 else scale_eps)
  else:
    scale = jnp.where(scale == 0.0, 1.0, scale)

  if use_symmetric:
    zp = None
    t = t / scale
  else:
    z = qmin - t_min / scale  # the integer that t_min maps to is qmin
    t = t / scale + z
    zp = scale * z

  if use_fp:
    t = jnp.clip(t, qmin, qmax).astype(jnp.float8_e4m3fn)
    if save_fp8_to_int8:
      return jax.lax.bitcast_convert_type(t, jnp.int8), scale, zp
    return t.astype(jnp.bfloat16), scale, zp
  if need_gradient:
    return jnp.clip(pass_through(t, jnp.round), qmin, qmax), scale, zp
  if random_rounding:
    if key is None:
      raise ValueError("reduce_precision: random_rounding needs a PRNG key.")
    t = t + jax.random.uniform(key, t.shape, minval=-0.5, maxval=0.5)
  container = jnp.int8 if bits <= 8 else jnp.int16 if bits <= 16 else jnp.int32
  return jnp.clip(jnp.round(t), qmin, qmax).astype(container), scale, zp
