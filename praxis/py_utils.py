"""Pax's `praxis.py_utils`: NestedMap and the array helpers Pax's layers and tests use.

Only the helpers that code written against Pax's layer API reaches for live here; the trainer's
host/device utilities are in paxml.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from praxis import pytypes

NestedMap = pytypes.NestedMap
JTensor = pytypes.JTensor


def with_sharding_constraint(x: JTensor, spec: jax.sharding.PartitionSpec | None) -> JTensor:
  """`jax.lax.with_sharding_constraint` when a mesh is active, else `x` unchanged.

  Pax only annotates inside a mesh; outside one (a single device, a unit test) the annotation
  would have nothing to refer to.
  """
  if spec is None or not global_mesh_defined():
    return x
  return jax.lax.with_sharding_constraint(x, spec)


def global_mesh_defined() -> bool:
  """True when a mesh with devices is active (`with mesh:` or `jax.set_mesh`)."""
  abstract = jax.sharding.get_abstract_mesh()
  if abstract is not None and not abstract.empty:
    return True
  try:
    from jax.interpreters import pxla  # pylint: disable=import-outside-toplevel

    return not pxla.thread_resources.env.physical_mesh.empty
  except Exception:  # pylint: disable=broad-except
    return False


@contextlib.contextmanager
def logging_verbosity_level(level: str) -> Iterator[None]:
  """Temporarily sets absl's verbosity ('FATAL', 'INFO', ...)."""
  old = logging.get_verbosity()
  logging.set_verbosity(level.lower() if isinstance(level, str) else level)
  try:
    yield
  finally:
    logging.set_verbosity(old)


def get_large_negative_number(dtype: Any) -> JTensor:
  """A large negative number of `dtype`: -0.7 x its max, so that sums of two do not overflow."""
  if jnp.issubdtype(dtype, jnp.inexact):
    limit = jnp.finfo(dtype).max
  else:
    limit = jnp.iinfo(dtype).max
  return jnp.asarray(-0.7 * limit, dtype=dtype)


def apply_mask_to_logits(logits: JTensor, mask: JTensor) -> JTensor:
  """Sets logits where `mask` is 0 to a large negative number (mask broadcasts to logits)."""
  min_value = get_large_negative_number(logits.dtype)
  return jnp.where(mask >= 0.5, logits, min_value)


def sequence_mask(lengths: JTensor, maxlen: int, dtype: Any = jnp.bool_) -> JTensor:
  """[B, maxlen] mask: 1 for positions < length."""
  return (jnp.arange(maxlen)[None, :] < jnp.asarray(lengths)[:, None]).astype(dtype)


def sequence_paddings(lengths: JTensor, maxlen: int, dtype: Any = jnp.float32) -> JTensor:
  """[B, maxlen] paddings: 1 for positions >= length."""
  return 1 - sequence_mask(lengths, maxlen, dtype)


def apply_padding(
  inputs: JTensor, padding: JTensor, pad_value: Any = 0.0, use_select: bool = True, axis: int = 0
) -> JTensor:
  """Puts `pad_value` where `padding` is 1; `padding` broadcasts to `inputs`."""
  del axis
  padding = jnp.asarray(padding)
  if use_select:
    return jnp.where(padding > 0.0, jnp.asarray(pad_value, inputs.dtype), inputs)
  return inputs * (1.0 - padding).astype(inputs.dtype) + pad_value * padding.astype(inputs.dtype)


def total_num_vars(variables: Any) -> int:
  """The number of scalars in a tree of arrays."""
  return sum(int(np.prod(np.shape(x))) for x in jax.tree.leaves(variables))


def merge_dict(dict1: dict[str, Any], dict2: dict[str, Any]) -> dict[str, Any]:
  """Merges two nested dicts; raises on a key present in both at a leaf."""
  out = dict(dict1)
  for key, value in dict2.items():
    if key in out:
      if isinstance(out[key], dict) and isinstance(value, dict):
        out[key] = merge_dict(out[key], value)
      else:
        raise ValueError(f"merge_dict: key {key!r} is in both dicts; rename one of them.")
    else:
      out[key] = value
  return out


def tree_unstack(tree: Any, axis: int) -> Sequence[Any]:
  """Splits every leaf along `axis` into a list of trees."""
  leaves, treedef = jax.tree.flatten(tree)
  if not leaves:
    return []
  n = leaves[0].shape[axis]
  return [treedef.unflatten([jnp.take(x, i, axis=axis) for x in leaves]) for i in range(n)]


def assert_same_shape_and_dtype(x: JTensor, y: JTensor) -> None:
  if x.shape != y.shape or x.dtype != y.dtype:
    raise ValueError(
      f"Expected the same shape and dtype, got {x.shape}/{x.dtype} and {y.shape}/{y.dtype}."
    )


def l2_normalize(x: JTensor, axis: Any = -1, epsilon: float = 1e-12) -> JTensor:
  """x / max(||x||_2, sqrt(epsilon)) along `axis` (TF's tf.math.l2_normalize)."""
  norm_sq = jnp.sum(x * x, axis=axis, keepdims=True)
  return x * jax.lax.rsqrt(jnp.maximum(norm_sq, epsilon))


def pad_or_trim_to(x: JTensor | None, shape: Sequence[int], pad_val: Any = 0) -> JTensor | None:
  """x cut to `shape` where it is longer and padded with pad_val at the end where shorter
  (same rank as x; None stays None)."""
  if x is None:
    return None
  if len(shape) != x.ndim:
    raise ValueError(f"pad_or_trim_to: shape {tuple(shape)} must have x's rank {x.ndim}.")
  x = x[tuple(slice(0, n) for n in shape)]
  padding = [(0, n - size) for size, n in zip(x.shape, shape)]
  return jnp.pad(x, padding, constant_values=pad_val)
