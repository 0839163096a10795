"""The ghost-norm protocol: per-example gradient norms without per-example gradients.

DP-SGD clips every example's gradient to an L2 norm before averaging. Materialising B
per-example gradients costs B times the weights' memory; "ghost norm" layers instead compute
each example's squared gradient norm inside their backward pass from the activations and output
gradients they already hold, and the trainer then runs a second backward pass with per-example
scales (clip / norm) to get the average of the clipped gradients.

The protocol (Pax's), carried through jax.custom_vjp:
  * Forward: a layer's weight is either a plain array (ordinary training, eval) or a
    `ParamWithAux(param, aux)`, where `aux` [B] holds per-example scales (ones in the first
    pass). The layer computes with `param`.
  * Backward: given ParamWithAux weights, the layer's custom VJP returns a ParamWithAux whose
    `param` is the gradient of the *scaled* loss sum_i aux_i * loss_i / B, and whose `aux` [B]
    holds each example's squared gradient norm for this weight (of the unscaled-by-B mean loss,
    i.e. of B * aux_i * grad_i, the gradient example i alone would give as a batch of one,
    times its scale). The gradient that flows to the layer's inputs is never scaled.
  The squared norms of all weights summed give each example's squared global gradient norm.
  Every weight of a model must use a layer that follows the protocol (see linears.py,
  embedding.py, and generic_wrapper.py for wrapping any other layer).
"""

from __future__ import annotations

from typing import Any

from flax import struct
import jax

from praxis import pytypes

JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor
Nested = pytypes.Nested


@struct.dataclass
class ParamWithAux:
  """A weight together with per-example data: scales [B] going in, squared norms [B] coming out.

  A pytree (both fields are leaves), so it passes through Flax's variables, jax.grad and
  jax.tree utilities like the array it wraps.
  """

  param: Any
  aux: Any | None

  @property
  def dtype(self):
    return self.param.dtype

  @property
  def shape(self):
    return self.param.shape

  def astype(self, dtype) -> ParamWithAux:
    aux = None if self.aux is None else self.aux.astype(dtype)
    return self.replace(param=self.param.astype(dtype), aux=aux)

  def transpose(self) -> ParamWithAux:
    """The transposed weight; the per-example data stays as is."""
    return self.replace(param=self.param.transpose())


def _is_wrapped(x: Any) -> bool:
  return isinstance(x, ParamWithAux)


def get_param(params: Nested[ParamWithAux] | NestedJTensor) -> NestedJTensor:
  """`params` with every ParamWithAux replaced by its weight."""
  return jax.tree_util.tree_map(
    lambda x: x.param if _is_wrapped(x) else x, params, is_leaf=_is_wrapped
  )


def get_aux(params: Nested[ParamWithAux] | NestedJTensor) -> JTensor | None:
  """The per-example data of `params` (all its weights share one), or None for plain weights."""
  leaves = jax.tree_util.tree_leaves(params, is_leaf=_is_wrapped)
  if not leaves or not _is_wrapped(leaves[0]):
    return None
  return leaves[0].aux
