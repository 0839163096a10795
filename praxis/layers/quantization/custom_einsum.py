"""Pax's custom_einsum: an einsum whose forward and backward passes both run quantized.

Forward (bits_fwd set): x and w are quantized per slice along their contracted
dims, the int-valued einsum is rescaled by w's then x's scale. Backward
(bits_bwd set): the output gradient g is rescaled by the forward scales, then
quantized (optionally with stochastic rounding) once for dx = g @ qw^T and
once for dw = qx^T @ g, and those results are rescaled by g's scales.
cast_bits_* instead casts operands to int8 / int4 without scaling.
Exposed as praxis.layers.quantization.operations.custom_einsum.
"""

from __future__ import annotations

import jax
from jax import numpy as jnp
from opt_einsum import parser as einsum_parser
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization.precision import reduce_precision

JTensor = jnp.ndarray


def _contracted(this: str, other: str) -> list[int]:
  """Positions in `this` (normalized einsum operand) of names shared with `other`."""
  if "." in this:
    raise ValueError(f'operand {this!r} is not normalized (has "...").')
  return [i for i, c in enumerate(this) if c in other]


def get_scale_eqn(left: str, right: str) -> str:
  """The names of `right` that also occur in `left`, in `right`'s order."""
  return "".join(c for c in right if c in left)


def _cast_to_bits(t, bits, what):
  if bits == 8:
    return t.astype(jnp.int8)
  if bits == 4:
    return t.astype(jnp.int4)
  raise ValueError(f"custom_einsum: {what} must be 8 or 4; got {bits}.")


def _rescale(t, t_names, scale, scale_names, dtype):
  """t * scale, broadcasting scale (named by scale_names) over t's names."""
  return jnp.einsum(f"{t_names},{scale_names}->{t_names}", t, scale, preferred_element_type=dtype)


def custom_einsum(
  x: JTensor,
  w: JTensor,
  *,
  eqn: str,
  prng_key: jax.Array,
  params: quantization_hparams.QuantizedTrainingParams,
) -> jnp.ndarray:
  """einsum(eqn, x, w) quantized as `params` says in both passes (see the module docstring)."""
  if params.bits_fwd is not None and params.cast_bits_fwd is not None:
    raise ValueError("custom_einsum: set bits_fwd or cast_bits_fwd, not both.")
  if params.bits_bwd is not None and params.cast_bits_bwd is not None:
    raise ValueError("custom_einsum: set bits_bwd or cast_bits_bwd, not both.")
  acc_dtype = params.einsum_output_dtype
  scale_dtype = params.einsum_scale_output_dtype

  def fwd(x, w, key):
    ins, out, _ = einsum_parser.parse_einsum_input((eqn, x, w))
    lhs, rhs = ins.split(",")
    sx = sw = None
    if params.bits_fwd is not None:
      qx, sx, _ = reduce_precision(x, _contracted(lhs, rhs), bits=params.bits_fwd)
      qw, sw, _ = reduce_precision(w, _contracted(rhs, lhs), bits=params.bits_fwd)
      sx, sw = jnp.squeeze(sx), jnp.squeeze(sw)
    elif params.cast_bits_fwd is not None:
      qx = _cast_to_bits(x, params.cast_bits_fwd, "cast_bits_fwd")
      qw = _cast_to_bits(w, params.cast_bits_fwd, "cast_bits_fwd")
    else:
      qx, qw = x, w
    y = jnp.einsum(eqn, qx, qw, preferred_element_type=acc_dtype)
    if sw is not None:
      y = _rescale(y, out, sw, get_scale_eqn(out, rhs), scale_dtype)
      y = _rescale(y, out, sx, get_scale_eqn(out, lhs), scale_dtype)
    if params.bwd_output_dtype is not None:
      y = y.astype(params.bwd_output_dtype)
    return y, (qx, qw, sx, sw, key)

  def bwd(res, g):
    qx, qw, sx, sw, key = res
    ins, out, _ = einsum_parser.parse_einsum_input((eqn, qx, qw))
    lhs, rhs = ins.split(",")
    dx_eqn = f"{out},{rhs}->{lhs}"
    dw_eqn = f"{lhs},{out}->{rhs}"
    if params.cast_bits_bwd is not None:
      g = _cast_to_bits(g, params.cast_bits_bwd, "cast_bits_bwd")
    # Fold the forward scales into g: d(x*sx)/dx etc.
    g_for_dx = g if sw is None else _rescale(g, out, sw, get_scale_eqn(out, rhs), acc_dtype)
    g_for_dw = g if sx is None else _rescale(g, out, sx, get_scale_eqn(out, lhs), acc_dtype)

    def quantize_grad(grad, contract_dims):
      if params.bits_bwd is not None:
        q, s, _ = reduce_precision(
          grad,
          contract_dims,
          bits=params.bits_bwd,
          random_rounding=params.random_rounding_bwd,
          key=key,
        )
        return q, jnp.squeeze(s)
      if params.cast_bits_bwd is not None:
        return _cast_to_bits(grad, params.cast_bits_fwd, "cast_bits_fwd"), None
      return grad, None

    # g [out] contracts with qw over w's output names, with qx over x's.
    qg_dx, sg_dx = quantize_grad(g_for_dx, _contracted(out, rhs))
    qg_dw, sg_dw = quantize_grad(g_for_dw, _contracted(out, lhs))
    dx = jnp.einsum(dx_eqn, qg_dx, qw, preferred_element_type=acc_dtype)
    dw = jnp.einsum(dw_eqn, qx, qg_dw, preferred_element_type=acc_dtype)
    if sg_dx is not None:
      dx = _rescale(dx, lhs, sg_dx, get_scale_eqn(lhs, out), scale_dtype)
    if sg_dw is not None:
      dw = _rescale(dw, rhs, sg_dw, get_scale_eqn(rhs, out), scale_dtype)
    if params.bwd_output_dtype is not None:
      dx = dx.astype(params.bwd_output_dtype)
      dw = dw.astype(params.bwd_output_dtype)
    return dx, dw, None

  @jax.custom_vjp
  def quantized(x, w, key):
    del key
    return jnp.einsum(eqn, x, w)

  quantized.defvjp(jax.jit(fwd), jax.jit(bwd))
  return quantized(x, w, prng_key)
