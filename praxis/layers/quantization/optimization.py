"""Pax's clipping search: the quantization bound that minimises the p-mean rounding error.

get_best_bound tries bound * f for f in linspace(1.0, 0.5, 11) and keeps the one
whose quantize-dequantize round trip of `t` has the smallest mean |error|^p
(per tensor, or per channel = per column of a 2-D `t`). Ties go to the larger
bound (the scan starts at 1.0).
"""

from __future__ import annotations

import jax
from jax import numpy as jnp
import numpy as np
from praxis import pytypes

JTensor = pytypes.JTensor


def _scan_factors() -> np.ndarray:
  return np.linspace(1.0, 0.5, num=11)


def _round_trip_error(bound, t, min_value, max_value, p_value):
  """Mean |t - dequant(quant(t))|^p when `bound` maps to `max_value`."""
  scale = bound / max_value
  q = jnp.clip(jnp.round(t / scale), min_value, max_value)
  return jnp.mean(jnp.abs(q * scale - t) ** p_value)


def _best_factor(t, bound, min_value, max_value, p_value, factors):
  errors = jax.vmap(lambda f: _round_trip_error(bound * f, t, min_value, max_value, p_value))(
    jnp.asarray(factors)
  )  # [F]
  return jnp.asarray(factors)[jnp.argmin(errors)]


def get_best_bound(
  t: JTensor,
  bound: JTensor,
  min_value: float,
  max_value: float,
  p_value: float = 1.0,
  per_channel: bool = False,
) -> JTensor:
  """Scales `bound` (the hard max |t|) by the error-minimising factor in [0.5, 1].

  per_channel=False: one factor for all of `t`. per_channel=True: `t` is
  [N, C] and `bound` [1, C]; each column gets its own factor.
  """
  factors = _scan_factors()
  if not per_channel:
    best = _best_factor(t, bound, min_value, max_value, p_value, factors)
    return bound * best.astype(bound.dtype)
  if t.ndim != 2 or bound.ndim != 2 or bound.shape != (1, t.shape[1]):
    raise ValueError(
      "per-channel get_best_bound needs t [N, C] and bound [1, C]; got "
      f"t {t.shape}, bound {bound.shape}."
    )
  per_column = jax.vmap(
    lambda col, b: b * _best_factor(col, b, min_value, max_value, p_value, factors),
    in_axes=(1, 1),
  )(t, bound)  # [C, 1]
  return per_column.reshape(bound.shape)
