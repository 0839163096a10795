"""Linear and Bias layers that follow the ghost-norm protocol (see base.py)."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from paxml.ghostnorm import base
from praxis import pytypes
from praxis.layers import base_ops
from praxis.layers import linears as praxis_linears

JTensor = pytypes.JTensor


def _scale_rows(scales: JTensor, x: JTensor) -> JTensor:
  """x [B, ...] with row i multiplied by scales[i]."""
  return x * scales.reshape((-1,) + (1,) * (x.ndim - 1)).astype(x.dtype)


def _per_example_sq_norms(inputs: JTensor, grads: JTensor) -> JTensor:
  """Squared Frobenius norms of the per-example weight gradients x_b^T g_b, without forming
  them when that is cheaper. inputs [B, ..., I], grads [B, ..., O] -> [B]."""
  if inputs.ndim == 2:
    # x_b^T g_b is an outer product: its norm is |x_b| |g_b|.
    return jnp.sum(jnp.square(inputs), -1) * jnp.sum(jnp.square(grads), -1)
  batch = inputs.shape[0]
  x = inputs.reshape(batch, -1, inputs.shape[-1])  # [B, T, I]
  g = grads.reshape(batch, -1, grads.shape[-1])  # [B, T, O]
  steps, in_dims, out_dims = x.shape[1], x.shape[2], g.shape[2]
  if inputs.ndim == 3 and 2 * steps * steps <= in_dims * out_dims:
    # |X^T G|_F^2 = <X X^T, G G^T>: two [T, T] Gram matrices instead of an [I, O] gradient.
    xx = jnp.einsum("bti,bsi->bts", x, x)  # [B, T, T]
    gg = jnp.einsum("bto,bso->bts", g, g)  # [B, T, T]
    return jnp.sum(xx * gg, axis=(1, 2))
  per_example = jnp.einsum("bti,bto->bio", x, g)  # [B, I, O]
  return jnp.sum(jnp.square(per_example), axis=(1, 2))


def make_last_dim_projector(
  einsum: base_ops.EinsumOp | None = None,
) -> Callable[[JTensor, JTensor | base.ParamWithAux], JTensor]:
  """inputs [B, ..., I] @ weights [I, O] -> [B, ..., O], following the ghost-norm protocol.

  `einsum` is accepted for Pax's signature; the projection is computed with jnp.einsum inside
  the custom VJP (a bound Flax child cannot run inside jax.custom_vjp's traced functions).
  """
  del einsum

  def project(x, w):
    return jnp.einsum("...i,io->...o", x, w)

  @jax.custom_vjp
  def projector(inputs, weights):
    return project(inputs, base.get_param(weights))

  def fwd(inputs, weights):
    w = base.get_param(weights)
    return project(inputs, w), (inputs, w, base.get_aux(weights))

  def bwd(res, g):
    inputs, w, scales = res
    d_inputs = jnp.einsum("...o,io->...i", g, w)  # [B, ..., I], never scaled
    if scales is None:
      d_w = jnp.einsum("...i,...o->io", inputs, g)  # [I, O]
      return d_inputs, d_w
    g_scaled = _scale_rows(scales, g)  # [B, ..., O]
    d_w = jnp.einsum("...i,...o->io", inputs, g_scaled)  # [I, O]
    # The loss is a batch mean, so example b alone would have B times its share of g.
    sq_norms = _per_example_sq_norms(inputs, g_scaled * g.shape[0])  # [B]
    return d_inputs, base.ParamWithAux(d_w, sq_norms)

  projector.defvjp(fwd, bwd)
  return projector


class LinearGhostNorm(praxis_linears.Linear):
  """Pax's Linear (same weight `w`, same outputs) whose backward reports per-example norms."""

  def setup(self) -> None:
    super().setup()
    self._projector = make_last_dim_projector()

  def __call__(self, inputs: JTensor) -> JTensor:
    if inputs.shape[-1] != self.input_dims:
      raise ValueError(
        f"LinearGhostNorm expects inputs [..., {self.input_dims}], got {inputs.shape}."
      )
    return self._projector(inputs.astype(self.fprop_dtype), self.theta.w)  # [..., O]


@jax.custom_vjp
def bias_add(inputs: JTensor, bias: JTensor | base.ParamWithAux) -> JTensor:
  """inputs [B, ..., D] + bias [D], following the ghost-norm protocol."""
  return inputs + base.get_param(bias)


def _bias_add_fwd(inputs, bias):
  return inputs + base.get_param(bias), base.get_aux(bias)


def _bias_add_bwd(scales, g):
  if scales is None:
    return g, jnp.sum(g, axis=tuple(range(g.ndim - 1)))
  per_example = jnp.sum(g, axis=tuple(range(1, g.ndim - 1)))  # [B, D]
  per_example = _scale_rows(scales, per_example) * g.shape[0]  # as if each were a batch of one
  sq_norms = jnp.sum(jnp.square(per_example), axis=-1)  # [B]
  return g, base.ParamWithAux(jnp.mean(per_example, axis=0), sq_norms)


bias_add.defvjp(_bias_add_fwd, _bias_add_bwd)


class BiasGhostNorm(praxis_linears.Bias):
  """Pax's Bias (same weight `b`) whose backward reports per-example norms."""

  def __call__(self, inputs: JTensor) -> JTensor:
    if inputs.shape[-1] != self.dims:
      raise ValueError(f"BiasGhostNorm expects inputs [..., {self.dims}], got {inputs.shape}.")
    return bias_add(inputs.astype(self.fprop_dtype), self.theta.b)
