"""Pax's base_ops: the einsum a layer calls through a child, so it can be swapped.

`Linear` computes `self.einsum('...y,yz->...z', x, w)` with an `EinsumOp` child built from its
`einsum_tpl`; a user may put a quantised or instrumented einsum there. EinsumOp has no weights,
so the variable tree does not change.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pytypes


class EinsumOp(base_layer.BaseLayer):
  """jnp.einsum(equation, *args); `preferred_element_type` (ours) sets the result dtype."""

  def __call__(self, equation: str, *args: jax.Array, preferred_element_type=None) -> jax.Array:
    return jnp.einsum(equation, *args, preferred_element_type=preferred_element_type)


class EinsumGatedOp(base_layer.BaseLayer):
  """Two einsums sharing the input: (x k, x k_gated), for gated feed-forward layers."""

  def __call__(self, equation: str, *args: jax.Array) -> tuple[jax.Array, jax.Array]:
    x, k, k_gated = args
    return jnp.einsum(equation, x, k), jnp.einsum(equation, x, k_gated)


class ArrayLookup(base_layer.BaseLayer):
  """x[idx], for embedding lookups."""

  def __call__(self, x: jax.Array, idx) -> jax.Array:
    return x[idx]


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
