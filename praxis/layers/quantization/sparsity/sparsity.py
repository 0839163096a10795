"""Pax's pruning functions: N:M, unstructured and channel-wise masks, scores.

A mask is a boolean array of the pruned tensor's shape, True where the value
is kept. N:M keeps the n largest scores of every group of m; with `offset` the
m members of a group sit `offset` apart instead of side by side.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
from praxis.layers.quantization.sparsity import sparsity_hparams

# Same string as base_layer.SPARSITY_NAME_POSTFIX (kept free of that import).
SPARSITY_MASK_SUFFIX = "_sparsity_mask"
SPARSITY_METADATA_SUFFIX = "_sparsity_metadata"
SPARSITY_NZ_SUFFIX = "_sparsity_nz"
SPARSITY_CONFIG_SUFFIX = "_sparsity_config"

SparsityScore = sparsity_hparams.SparsityScore


def apply_sparsity(
  inputs: jnp.ndarray,
  mask: jnp.ndarray,
  channelwise_dim: Optional[int] = None,
  pruned_value: Optional[jnp.ndarray] = None,
) -> jnp.ndarray:
  """inputs with pruned entries replaced by pruned_value (default 0).

  With channelwise_dim, the channels along that axis whose mask is all False
  are removed instead (the result is smaller; not jittable).
  """
  if channelwise_dim is not None:
    axis = channelwise_dim % inputs.ndim
    others = tuple(i for i in range(inputs.ndim) if i != axis)
    keep = jnp.any(mask, axis=others).reshape(-1)  # [C]
    return jnp.take(inputs, jnp.nonzero(keep)[0], axis=channelwise_dim)
  fill = jnp.zeros_like(inputs) if pruned_value is None else jnp.full_like(inputs, pruned_value)
  return jnp.where(mask, inputs, fill)


def _swap_last_two(x: jnp.ndarray) -> jnp.ndarray:
  return jnp.swapaxes(x, -1, -2)


def _keep_top_n(scores: jnp.ndarray, n: int, axis: int) -> jnp.ndarray:
  """Boolean mask keeping the n largest entries along `axis` (ties: lower index wins)."""
  moved = jnp.moveaxis(scores, axis, -1)
  m = moved.shape[-1]
  _, idx = jax.lax.top_k(moved, k=n)  # [..., n]
  keep = jnp.any(jax.nn.one_hot(idx, m, dtype=jnp.bool_), axis=-2)  # [..., m]
  return jnp.moveaxis(keep, -1, axis)


def _nm_mask_along_last(scores: jnp.ndarray, n: int, m: int, stride: int) -> jnp.ndarray:
  """N:M mask over the last axis of `scores` (size a multiple of m * stride).

  The last axis is read as [groups, m, stride]: the m members of a group are
  `stride` apart.
  """
  *lead, length = scores.shape
  grouped = scores.reshape(*lead, length // (m * stride), m, stride)
  return _keep_top_n(grouped, n, axis=-2).reshape(scores.shape)


def _block_scores(inputs: jnp.ndarray, block_size: int, order: str) -> jnp.ndarray:
  """Sum of |x| over blocks of block_size along the N:M axis (last for R, second last for C)."""
  x = jnp.abs(inputs)
  if order == "C":
    x = _swap_last_two(x)
  *lead, last = x.shape
  if last % block_size:
    raise ValueError(
      f"block_size {block_size} must divide the blocked axis (size {last}) of shape {inputs.shape}."
    )
  scores = x.reshape(*lead, last // block_size, block_size).sum(-1)
  return _swap_last_two(scores) if order == "C" else scores


def get_sparsity_mask(
  inputs: jnp.ndarray,
  n_sparsity: int = 0,
  m_sparsity: int = 0,
  order: str = "R",
  block_size: int = 0,
  offset: int = 0,
) -> jnp.ndarray:
  """N:M mask of `inputs` (True = kept), scored by |inputs|.

  order 'R' groups along the last axis, 'C' along the second last. When that
  axis is not a multiple of m * max(offset, 1) the whole array is grouped in
  flat (row-major) order instead. block_size > 1 first sums |x| over blocks of
  that many consecutive values and keeps or prunes whole blocks.
  """
  n, m = n_sparsity, m_sparsity
  if n > m:
    raise AssertionError(f"N must be lower than M for N:M ({n}:{m}) sparsity.")
  if order not in ("C", "R"):
    raise ValueError(f"Index order {order} not supported; use 'C' or 'R'.")
  if offset < 0:
    raise ValueError(f"Offset value must be positive. You provided {offset}.")
  if inputs.size % m:
    raise ValueError(
      f"inputs size must be divisible by m, provided {inputs.size} and {m}; pick an M "
      "that divides the tensor size."
    )
  scores = _block_scores(inputs, block_size, order) if block_size > 1 else jnp.abs(inputs)
  if offset > 0 and scores.size % (offset * m):
    raise ValueError(
      "When offset > 0, we only support an array size (length) equal to "
      f"(offset * m_sparsity). Provided offset = {offset}, m_sparsity = {m}, "
      f"length = {scores.size}."
    )
  if order == "C":
    scores = _swap_last_two(scores)
  stride = max(offset, 1)
  if scores.shape[-1] % (m * stride) == 0:
    mask = _nm_mask_along_last(scores, n, m, stride)
  else:
    mask = _nm_mask_along_last(scores.reshape(-1), n, m, stride).reshape(scores.shape)
  if order == "C":
    mask = _swap_last_two(mask)
  if block_size > 0:
    mask = jnp.repeat(mask, block_size, axis=-1 if order == "R" else -2)
  return mask


def _keep_top_fraction(scores: jnp.ndarray, prune_rate) -> jnp.ndarray:
  """Keeps the round(size * (1 - prune_rate)) largest scores (at least one; ties: lower index)."""
  flat = scores.reshape(-1)
  n_keep = jnp.maximum(1, jnp.round(flat.size * (1 - prune_rate)).astype(jnp.int32))
  order = jnp.argsort(-flat, stable=True)  # descending, ties by index
  rank = jnp.zeros(flat.shape, jnp.int32).at[order].set(jnp.arange(flat.size, dtype=jnp.int32))
  return (rank < n_keep).reshape(scores.shape)


@functools.partial(jax.jit, static_argnames=["channel_dim"])
def get_sparsity_mask_channelwise(
  inputs: jnp.ndarray, prune_rate: float, channel_dim: int = -1
) -> jnp.ndarray:
  """Mask that keeps the highest-scoring channels along channel_dim (score: sum of inputs).

  prune_rate is the fraction (0..1) of channels dropped.
  """
  axis = channel_dim % inputs.ndim
  others = tuple(i for i in range(inputs.ndim) if i != axis)
  channel_score = jnp.sum(inputs, axis=others, keepdims=True)  # [1, .., C, .., 1]
  keep = _keep_top_fraction(channel_score, prune_rate)
  return jnp.broadcast_to(keep, inputs.shape)


def get_sparsity_mask_unstructured(
  inputs: jnp.ndarray,
  mask: jnp.ndarray | None,
  prune_rate: jnp.ndarray | float,
) -> jnp.ndarray:
  """Keeps the values whose |x| lies above the prune_rate-th percentile (prune_rate in [0, 100]).

  Values already pruned by `mask` count as 0, so the new mask prunes a superset.
  """
  if mask is not None:
    inputs = apply_sparsity(inputs, mask)
  magnitude = jnp.abs(inputs)
  return magnitude > jnp.percentile(magnitude, prune_rate)


def prune_inputs_n_m(
  inputs: jnp.ndarray,
  *,
  n: int,
  m: int,
  order: sparsity_hparams.SparsityOrder | str = sparsity_hparams.SparsityOrder.C,
  offset: int = 0,
) -> jnp.ndarray:
  """inputs with N:M pruning applied (zeros where get_sparsity_mask says prune)."""
  mask = get_sparsity_mask(inputs, n, m, order=order, offset=offset)
  return apply_sparsity(inputs, mask)


def score_weight_magnitude(weight: jnp.ndarray) -> jnp.ndarray:
  """|w|."""
  return jnp.abs(weight)


def score_activation_weighted(weight: jnp.ndarray, inputs: jnp.ndarray) -> jnp.ndarray:
  """|w[j, k]| * sum over tokens of |x[..., j]| for a Linear weight w [C_in, C_out]."""
  if weight.ndim != 2 or inputs.shape[-1] != weight.shape[0]:
    raise ValueError(
      "ACTIVATION_WEIGHTED score function only supports Linear layers for now: weight must "
      f"be a 2-D [C_in, C_out] matrix and inputs [..., C_in]; got weight {weight.shape}, "
      f"inputs {inputs.shape}."
    )
  act = jnp.abs(inputs).reshape(-1, inputs.shape[-1]).sum(0)  # [C_in]
  return act[:, None] * jnp.abs(weight)  # [C_in, C_out]


def compute_score(
  weights: jnp.ndarray,
  score_func: SparsityScore = SparsityScore.MAGNITUDE,
  inputs: jnp.ndarray | None = None,
) -> jnp.ndarray:
  """Importance of each weight under score_func (higher = kept first)."""
  if score_func == SparsityScore.ACTIVATION_WEIGHTED:
    if inputs is None:
      raise ValueError("`inputs` must be given for `ACTIVATION_WEIGHTED`.")
    return score_activation_weighted(weights, inputs)
  if score_func == SparsityScore.MAGNITUDE:
    return score_weight_magnitude(weights)
  raise ValueError(f"Unknown sparsity score function {score_func!r}.")


_BITWIDTHS = {
  jnp.dtype(jnp.float32): 32,
  jnp.dtype(jnp.int32): 32,
  jnp.dtype(jnp.bfloat16): 16,
  jnp.dtype(jnp.int8): 8,
  jnp.dtype(jnp.int4): 4,
}


def dtype_bitwidth(dtype: jnp.dtype) -> int:
  """Bits per element of the dtypes sparse weights are stored in."""
  try:
    return _BITWIDTHS[jnp.dtype(dtype)]
  except KeyError:
    raise ValueError(f"Unsupported dtype {dtype}") from None


def is_optimized_offset(order: str, offset: int, input_dtype: jnp.dtype = jnp.float32) -> bool:
  """Whether `offset` matches the TPU tile so get_sparsity_mask_optimized_for_offset applies.

  'C' needs a non-zero multiple of 8 sublanes times the values packed per 32 bits;
  'R' a non-zero multiple of 128 lanes.
  """
  if offset == 0:
    return False
  if order == "C":
    return offset % (8 * (32 // dtype_bitwidth(input_dtype))) == 0
  if order == "R":
    return offset % 128 == 0
  return False


@functools.partial(jax.jit, static_argnames=["n_sparsity", "m_sparsity", "order", "offset"])
def get_sparsity_mask_optimized_for_offset(
  inputs: jnp.ndarray,
  n_sparsity: int = 0,
  m_sparsity: int = 0,
  order: str = "R",
  offset: int = 0,
) -> jnp.ndarray:
  """N:M mask of a 2-D array whose groups are `offset` apart along one axis.

  order 'C' groups along axis 0, 'R' along axis 1; that axis is read as
  [groups, m, offset] and the n largest |x| of each m are kept (ties: lower
  index). Same mask as get_sparsity_mask with that offset, computed without
  flattening.
  """
  n, m = n_sparsity, m_sparsity
  if n > m:
    raise AssertionError(f"N must be lower than M for N:M ({n}:{m}) sparsity.")
  if order not in ("C", "R"):
    raise ValueError(f"Index order {order} not supported; use 'C' or 'R'.")
  if offset < 0:
    raise ValueError(f"Offset value must be positive. You provided {offset}.")
  length = inputs.size
  if length % m:
    raise ValueError(f"inputs size must be divisible by m, provided {length} and {m}")
  group = length // m
  if offset > 0 and group % offset:
    raise ValueError(
      "When offset > 0, we only support a group size that is divisble to "
      f"offset. Provided offset = {offset}, group = {group}."
    )
  if inputs.ndim != 2:
    raise AssertionError(f"expects a 2-D array, got shape {inputs.shape}.")
  axis = 0 if order == "C" else 1
  if inputs.shape[axis] % (m * offset):
    raise AssertionError(
      f"axis {axis} (size {inputs.shape[axis]}) must be a multiple of m * offset = {m * offset}."
    )
  moved = jnp.moveaxis(jnp.abs(inputs), axis, -1)  # [other, L]
  mask = _nm_mask_along_last(moved, n, m, offset)
  return jnp.moveaxis(mask, -1, axis)
