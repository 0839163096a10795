"""Summary statistics of a tensor over its valid (unpadded) entries, for monitoring."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import py_utils
from praxis import pytypes


def compute_stats(inputs: jax.Array, padding: jax.Array | None = None) -> py_utils.NestedMap:
  """NestedMap(mean_v, std_v, max_v) of `inputs` where `padding` is 0 (Pax's compute_stats).

  Computed in float32 whatever the input dtype. max_v is the largest |value|; std_v is the
  population standard deviation. An all-padded input gives zeros (the count is clamped to 1).

  Args:
    inputs: any shape.
    padding: same rank as `inputs` (broadcastable), 1.0 marks an entry to ignore; None: none.
  """
  x = inputs.astype(jnp.float32)
  if padding is None:
    padding = jnp.zeros_like(x)
  if x.ndim != padding.ndim:
    raise ValueError(
      f"compute_stats: inputs {x.shape} and padding {padding.shape} must have the same rank; "
      "add size-1 dims to padding to broadcast it."
    )
  valid = 1.0 - padding.astype(jnp.float32)
  valid = jnp.broadcast_to(valid, x.shape)
  count = jnp.maximum(1.0, jnp.sum(valid))
  mean = jnp.sum(x * valid) / count
  variance = jnp.sum(jnp.square((x - mean) * valid)) / count
  return py_utils.NestedMap(
    mean_v=mean, std_v=jnp.sqrt(variance), max_v=jnp.max(jnp.abs(x * valid))
  )


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap
