"""Pax's codebook statistics for vector quantizers: batch perplexity, entropy and coverage.

Codes are [..., G] integer ids in [0, C) (G groups of C code words); padded rows are left out.
Per group, p[g, c] = count(code c in group g) / (number of unpadded rows); the perplexity is
exp(-sum_c p log p) averaged over the groups, and the entropy is the log of that average.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

JTensor = jax.Array


def scatter_nd(indices: JTensor, updates: JTensor, shape) -> JTensor:
  """zeros(shape) with `updates` added at `indices` ([N, rank] index tuples; repeats add up)."""
  out = jnp.zeros(shape, updates.dtype)
  return out.at[tuple(jnp.moveaxis(indices, -1, 0))].add(updates)


def batch_pplx_entropy_from_codes(
  codes: JTensor,
  num_classes: int,
  *,
  paddings: JTensor | None = None,
  data_parallel_axis: str | None = None,
):
  """(pplx, entropy, histogram [G, C]) of `codes` [..., G]; `paddings` [...] (1 = left out).

  With `data_parallel_axis` (inside pmap / shard_map), counts are summed over that axis first.
  """
  if codes.ndim < 2:
    raise ValueError(f"codes must be [..., num_groups] with rank >= 2, got {codes.shape}.")
  num_groups = codes.shape[-1]
  codes = jnp.reshape(codes.astype(jnp.int32), (-1, num_groups))  # [N, G]
  if paddings is None:
    weights = jnp.ones((codes.shape[0],), jnp.float32)
  else:
    weights = 1.0 - jnp.reshape(paddings, (-1,)).astype(jnp.float32)  # [N]
  # One flat histogram: group g's code c at g * C + c.
  flat = codes + jnp.arange(num_groups, dtype=jnp.int32) * num_classes  # [N, G]
  counts = jnp.broadcast_to(weights[:, None], flat.shape)
  histogram = (
    jnp.zeros((num_groups * num_classes,), jnp.float32).at[flat.reshape(-1)].add(counts.reshape(-1))
  )
  rows = jnp.sum(weights)
  if data_parallel_axis is not None:
    histogram = jax.lax.psum(histogram, data_parallel_axis)
    rows = jax.lax.psum(rows, data_parallel_axis)
  histogram = histogram.reshape(num_groups, num_classes)  # [G, C]
  probs = histogram / jnp.maximum(rows, 1.0)
  neg_entropy = jnp.sum(probs * jnp.log(jnp.maximum(probs, 1e-30)), axis=-1)  # [G]
  pplx = jnp.mean(jnp.exp(-neg_entropy))
  return pplx, jnp.log(pplx), histogram


def batch_codebook_coverage(
  codes: JTensor,
  num_classes: int,
  *,
  paddings: JTensor,
  data_parallel_axis: str | None = None,
) -> JTensor:
  """The fraction of code words used at least once in the batch, averaged over the groups."""
  _, _, histogram = batch_pplx_entropy_from_codes(
    codes, num_classes, paddings=paddings, data_parallel_axis=data_parallel_axis
  )
  used = jnp.sum((histogram > 0).astype(jnp.float32), axis=-1)  # [G]
  return jnp.mean(used) / num_classes
