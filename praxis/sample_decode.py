"""Pax's `praxis.sample_decode` module: its constants and array helpers.

Decoding a LanguageModel here goes through `praxis.layers.lm_decode` (greedy, sampling, beam
search over a pure extend_step function); the seed's loop is `praxis.layers.sample_decode`.
This module holds what Pax's module offers beside its decode loops: the sample reordering and
right-alignment helpers, with Pax's names and shapes. Pax's module-driven loops
(`sample_decode`, `greedy_decode`, `vanilla_sample_decode`, `sample_decode_after_fprop`) are
not provided.

Shape letters: B batch, N samples, P prefix length.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import decoder_utils
from praxis import pytypes

NestedMap = pytypes.NestedMap

RANDOM = base_layer.RANDOM
PARAMS = base_layer.PARAMS
NON_TRAINABLE = base_layer.NON_TRAINABLE
AUX_LOSS = base_layer.AUX_LOSS
SUMMARIES = base_layer.SUMMARIES
DECODE_CACHE = base_layer.DECODE_CACHE
PREFIX_DECODE_CACHE = base_layer.PREFIX_DECODE_CACHE
HYPER_PARAMS = base_layer.HYPER_PARAMS
DUMMY_PRNG_KEY = decoder_utils.DUMMY_PRNG_KEY
# How many top candidates (ids and log-probs) Pax reports per decoded token at most.
MAX_NUM_PER_TOKEN_LOGPROBS = 5


def reorder_with_indices(x: jax.Array, indices: jax.Array) -> jax.Array:
  """x [B, N, ...] with dim 1 reordered per row by indices [B, N]."""
  if indices.ndim != 2 or x.ndim < 2:
    raise ValueError(
      f"reorder_with_indices takes x [B, N, ...] and indices [B, N], got {x.shape} and "
      f"{indices.shape}."
    )
  return jnp.take_along_axis(x, indices.reshape(indices.shape + (1,) * (x.ndim - 2)), axis=1)


def sort_samples_by_scores(result: NestedMap, top_k_recall_target: float = 0.85) -> NestedMap:
  """Every field of `result` ([B, N, ...]) reordered by the samples' scores, best first.

  A sample's score is the sum of its `logprobs` [B, N, S], where values >= 1.0 mark padding
  (Pax's convention) and count as 0. With top_k_recall_target < 1 the order comes from
  `jax.lax.approx_max_k` (TPU-friendly, possibly inexact), as in Pax.
  """
  logprobs = jnp.where(result.logprobs >= 1.0, 0.0, result.logprobs)
  scores = jnp.sum(logprobs, axis=-1)  # [B, N]
  num_samples = scores.shape[-1]
  if top_k_recall_target < 1.0:
    if top_k_recall_target <= 0.0:
      raise ValueError(f"top_k_recall_target must be in (0, 1], got {top_k_recall_target}.")
    _, order = jax.lax.approx_max_k(scores, num_samples, recall_target=top_k_recall_target)
  else:
    _, order = jax.lax.top_k(scores, num_samples)
  return jax.tree.map(functools.partial(reorder_with_indices, indices=order), result)


def split_batch_dim(x: jax.Array, batch_dim: int, num_samples: int) -> jax.Array:
  """[..., B * N, ...] -> [..., B, N, ...] at `batch_dim` (samples of a row are adjacent)."""
  if x.shape[batch_dim] % num_samples:
    raise ValueError(
      f"split_batch_dim: dim {batch_dim} of {x.shape} is not a multiple of {num_samples}."
    )
  shape = list(x.shape)
  shape[batch_dim : batch_dim + 1] = [shape[batch_dim] // num_samples, num_samples]
  return jnp.reshape(x, shape)


def right_align_segment_position(lengths: jax.Array, max_length: int) -> jax.Array:
  """Positions [B, max_length] of right-aligned rows of `lengths` [B]: 0 over the left
  padding, then 0, 1, ..., length - 1."""
  pos = jnp.arange(max_length, dtype=jnp.int32)[None, :] - (max_length - lengths[:, None])
  return jnp.maximum(pos, 0)


def right_align_prefix_ids(
  prefix_ids: jax.Array, prefix_lengths: jax.Array, paddings_dtype: jnp.dtype
) -> tuple[jax.Array, jax.Array]:
  """Left-aligned prefixes [B, P] of `prefix_lengths` [B] -> (right-aligned ids [B, P],
  paddings [B, P] in `paddings_dtype`, 1 over the left padding)."""
  max_len = prefix_ids.shape[-1]
  ids = decoder_utils.right_align_tensors(prefix_ids, prefix_lengths)
  padded = jnp.arange(max_len)[None, :] < (max_len - prefix_lengths[:, None])  # [B, P]
  return ids, padded.astype(paddings_dtype)
