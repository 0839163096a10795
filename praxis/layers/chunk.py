"""Splitting a sequence axis into fixed-size chunks (chunk) and back (unchunk)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from praxis import pytypes


def chunk(x: jax.Array, *, chunk_size: int, axis: int = 1) -> jax.Array:
  """[..., L, ...] -> [ceil(L / C), ..., C, ...]: the chunk index moves to the front.

  L is zero-padded at its end up to a multiple of chunk_size C.
  """
  length = x.shape[axis]
  pad = -length % chunk_size
  if pad:
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    x = jnp.pad(x, widths)
  num_chunks = (length + pad) // chunk_size
  # [..., L, ...] -> [..., L/C, C, ...]
  x = jnp.reshape(x, x.shape[:axis] + (num_chunks, chunk_size) + x.shape[axis + 1 :])
  return jnp.moveaxis(x, axis, 0)  # [L/C, ..., C, ...]


def unchunk(chunk_x: jax.Array, axis: int = 1, seqlen: int | None = None) -> jax.Array:
  """Inverse of chunk: [L/C, ..., C, ...] -> [..., L, ...], cut back to seqlen if given."""
  chunk_size = chunk_x.shape[axis + 1]
  x = jnp.moveaxis(chunk_x, 0, axis)  # [..., L/C, C, ...]
  x = jnp.reshape(x, x.shape[:axis] + (-1,) + x.shape[axis + 2 :])  # [..., L, ...]
  if seqlen is not None and seqlen % chunk_size:
    x = jax.lax.slice_in_dim(x, 0, seqlen, axis=axis)
  return x


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
