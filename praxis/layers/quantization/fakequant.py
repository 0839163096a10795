"""Fake quantization (quantize then dequantize in float) and related weight transforms.

Exposed as praxis.layers.quantization.operations.{FP4, clip_to_fp16,
fakequant_einsum, reduce_precision_activation, fakequant_activation,
fakequant_vn, factorize_weight}. Rounding passes gradients straight through.
"""

from __future__ import annotations

from typing import Sequence

from absl import logging
import jax
from jax import numpy as jnp
from praxis import pytypes
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization.precision import eqn_to_activation_contract_dims
from praxis.layers.quantization.precision import eqn_to_weight_contract_dims
from praxis.layers.quantization.precision import reduce_precision
from praxis.layers.quantization.subchannel import get_sub_channel_shape

JTensor = pytypes.JTensor
PRNGKey = pytypes.PRNGKey


class FP4:
  """4-bit float (e2m1-like) fake quantization onto a fixed grid of 15 values."""

  int4_val = [-6.0, -4.0, -3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]

  def __init__(self, val=None):
    self.v = jnp.array(val if val else self.int4_val, dtype=jnp.float32)  # [V]

  def round(self, x):
    """Each element of x replaced by its nearest grid value."""
    nearest = jnp.argmin(jnp.abs(x[..., None] - self.v), axis=-1)  # x.shape
    return self.v[nearest]

  def nudge(self, x, contract_dim):
    """Affine-maps [min x, max x] along contract_dim onto the grid, rounds, maps back."""
    lo, hi = self.v[0], self.v[-1]
    x_min = jnp.min(x, axis=contract_dim, keepdims=True)
    x_max = jnp.max(x, axis=contract_dim, keepdims=True)
    scale = (x_max - x_min) / (hi - lo) + jnp.finfo(x.dtype).eps
    zp = lo - x_min / scale
    return ((self.round(x / scale + zp) - zp) * scale).astype(x.dtype)


def clip_to_fp16(t: JTensor) -> JTensor:
  """Shrinks values beyond float16's range by 1 % (applied once per call: a gradual clip)."""
  too_big = jnp.abs(t) > jnp.finfo(jnp.float16).max
  return jax.lax.select(too_big, t * 0.99, t)


def fakequant_einsum(
  eqn: str,
  t: JTensor,
  bits: int = 8,
  calculation_dtype: jnp.dtype = jnp.float32,
  use_symmetric: bool = True,
  block_size: int = 0,
  use_fp: bool = False,
  quant_method: str = "default",
) -> JTensor:
  """Weight `t` of einsum `eqn` quantized per output channel and dequantized, in t's dtype.

  block_size > 0 gives each block of the contracted dim its own scale;
  use_fp with bits=4 uses the FP4 grid.
  """
  out_dtype = t.dtype
  contract_dims = eqn_to_weight_contract_dims(eqn)
  shape = list(t.shape)
  if block_size > 0:
    blocked, contract_dims = get_sub_channel_shape(shape, block_size, contract_dims)
    t = t.reshape(blocked)
  t = t.astype(calculation_dtype)
  if use_fp and bits == 4:
    return FP4().nudge(t, contract_dims)
  q, scale, zp = reduce_precision(
    t,
    contract_dims,
    need_gradient=True,
    bits=bits,
    use_symmetric=use_symmetric,
    quant_method=quant_method,
  )
  deq = q * scale
  if zp is not None:
    deq = deq - zp
  return deq.reshape(shape).astype(out_dtype)


def reduce_precision_activation(
  t: JTensor,
  need_gradient: bool = False,
  bits: int = 8,
  contract_dims: Sequence[int] | None = None,
  symmetric: bool = True,
  percentile: float = 1.0,
) -> tuple[JTensor, JTensor, JTensor | None]:
  """reduce_precision for activations (no clipping search)."""
  return reduce_precision(
    t,
    contract_dims,
    need_gradient,
    bits,
    optimization_on_bound=False,
    use_symmetric=symmetric,
    percentile=percentile,
  )


def fakequant_activation(
  t: JTensor,
  bits: int = 8,
  eqn: str | None = None,
  per_channel: bool = False,
  symmetric: bool = True,
  percentile: float = 1.0,
) -> JTensor:
  """Activation quantized and dequantized: per tensor, or per token (per_channel, needs eqn)."""
  contract_dims = None
  if per_channel:
    if eqn is None:
      raise ValueError(
        "fakequant_activation: per_channel=True needs the einsum eqn to know "
        "which dims are contracted."
      )
    contract_dims = eqn_to_activation_contract_dims(eqn)
  q, scale, zp = reduce_precision_activation(
    t,
    need_gradient=True,
    bits=bits,
    contract_dims=contract_dims,
    symmetric=symmetric,
    percentile=percentile,
  )
  deq = q * scale
  if zp is not None:
    deq = deq - zp
  return deq.astype(t.dtype)


def fakequant_vn(
  eqn: str,
  w: JTensor,
  next_prng_key: PRNGKey,
  wp: quantization_hparams.WeightQuantizationParams,
  step: JTensor | None = None,
  do_eval: bool = False,
  bits: int = 8,
  calculation_dtype: jnp.dtype = jnp.bfloat16,
  use_symmetric: bool = True,
):
  """Variational-noise stand-in for quantization: w + vn_scale * |w|_norm * noise.

  In eval (do_eval) the weight is fake-quantized instead. Noise is U(-0.5, 0.5)
  or N(0, 1) (wp.vn_noise_type), scaled by max|w| ('Linf') or per output
  channel ('PerChannelLinf'); before wp.vn_start_step it is zero.
  """
  if wp.vn_weight_norm_type not in ("L2", "Linf", "PerChannelLinf"):
    raise ValueError(
      f"vn_weight_norm_type must be L2, Linf or PerChannelLinf; got {wp.vn_weight_norm_type!r}."
    )
  if None in (
    wp.vn_scale,
    wp.vn_start_step,
    wp.vn_noise_type,
    wp.vn_weight_norm_type,
    wp.stop_scale_gradient,
  ):
    raise ValueError("fakequant_vn: set every vn_* field of the weight params (vn_scale is None).")
  if not use_symmetric:
    raise ValueError("fakequant_vn supports symmetric quantization only.")
  if do_eval:
    logging.info("fakequant_vn in eval: fake-quantizing the weight")
    return fakequant_einsum(
      eqn, w, bits=bits, calculation_dtype=calculation_dtype, use_symmetric=use_symmetric
    )
  if wp.vn_start_step > 0 and step is None:
    raise ValueError("fakequant_vn: vn_start_step > 0 needs the training step.")
  if wp.vn_noise_type == "uniform":
    noise = jax.random.uniform(next_prng_key, w.shape, w.dtype, -0.5, 0.5)
  elif wp.vn_noise_type == "normal":
    noise = jax.random.normal(next_prng_key, w.shape, w.dtype)
  else:
    raise ValueError(f'vn_noise_type must be "uniform" or "normal"; got {wp.vn_noise_type!r}.')
  scale = wp.vn_scale
  if wp.vn_start_step > 0:
    scale = jax.lax.select(step >= wp.vn_start_step, wp.vn_scale, 0.0)
  if wp.vn_weight_norm_type == "L2":
    raise ValueError(
      "fakequant_vn: the L2 weight norm is not implemented; use Linf or PerChannelLinf."
    )
  if wp.vn_weight_norm_type == "Linf":
    scale = scale * jnp.max(jnp.abs(w))
  else:
    scale = scale * jnp.max(jnp.abs(w), axis=eqn_to_weight_contract_dims(eqn), keepdims=True)
  if wp.stop_scale_gradient:
    scale = jax.lax.stop_gradient(scale)
  return w + scale.astype(w.dtype) * noise


def factorize_weight(var: JTensor, rank: int) -> tuple[JTensor, JTensor]:
  """Rank-`rank` truncated SVD of var [..., M, N]: (u [..., M, r], s * vh [..., r, N])."""
  u, s, vh = jnp.linalg.svd(var, full_matrices=False)
  return u[..., :rank], s[..., :rank, None] * vh[..., :rank, :]
