"""Attention masks and the block helpers of local attention, with Pax's names and semantics.

Masks are additive, as in Pax: 0 where a query may attend to a key, a large negative number
(`-0.7 * finfo(dtype).max`, Pax's `py_utils.get_large_negative_number`) where it may not. Shapes
are [B|1, 1, T|1, S]: a mask of [B, 1, 1, S] (from paddings) hides keys, a mask of [1, 1, T, S]
(causal) is shared by the batch.

`merge_masks` follows Pax: when one mask is a key-padding mask [B, 1, 1, S] and the other has a
query dim T (= S, self-attention), the padding mask is first turned into [B, 1, S, S] that also
hides the rows of padded *queries*, so a padded position attends to nothing.

Block helpers (local attention): a sequence [B, T, ...] is cut into U = ceil(T / W) blocks of W
positions (`convert_to_block`), and each block gets its context of C = W + (L - 1) + R key
positions (`extract_block_context`); `_make_local_mask` says which (query, key) pairs of a block
and its context lie within the window [i - (L - 1), i + R].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def large_negative_number(dtype) -> jax.Array:
  """Pax's additive mask value for dtype (float32 for non-floating dtypes)."""
  dtype = jnp.dtype(dtype)
  if not jnp.issubdtype(dtype, jnp.floating):
    dtype = jnp.dtype(jnp.float32)
  return jnp.asarray(-0.7 * jnp.finfo(dtype).max, dtype)


def limited_context_mask(
  left_context: int | None,
  right_context: int | None,
  time_size: int,
  dtype=jnp.float32,
  column_time_size: int | None = None,
) -> jax.Array:
  """[T, S] mask of a sliding window: row t sees columns (t - left_context, t + right_context].

  left_context counts the current position (1 = only itself on the left); None means unlimited
  on that side. S is `column_time_size` (default T).
  """
  cols = time_size if column_time_size is None else column_time_size
  unlimited = max(time_size, cols)
  left = unlimited if left_context is None else left_context
  right = unlimited if right_context is None else right_context
  row = jnp.arange(time_size)[:, None]  # [T, 1]
  col = jnp.arange(cols)[None, :]  # [1, S]
  outside = (col <= row - left) | (col > row + right)  # [T, S]
  return outside.astype(dtype) * large_negative_number(dtype)


def causal_mask(input_t: jax.Array, dtype=None) -> jax.Array:
  """[1, 1, T, T] mask letting position t attend to positions <= t.

  Args:
    input_t: [B, T, ...]; T is its second dim and the mask takes its (floating) dtype.
    dtype: overrides the dtype (an extension of Pax, for integer inputs such as ids).
  """
  if dtype is None:
    if not jnp.issubdtype(input_t.dtype, jnp.floating):
      raise ValueError(
        f"causal_mask takes its dtype from a floating input [B, T, D], got "
        f"{input_t.dtype}; pass dtype= for integer inputs."
      )
    dtype = input_t.dtype
  t = input_t.shape[1]
  future = jnp.arange(t)[None, :] > jnp.arange(t)[:, None]  # [T, T]: key after query
  return (future.astype(dtype) * large_negative_number(dtype))[None, None]


def segment_mask(
  segment_ids: jax.Array, source_segment_ids: jax.Array | None = None, dtype=jnp.float32
) -> jax.Array:
  """[B, 1, T, S] mask letting a query attend only to keys of its own segment.

  Args:
    segment_ids: [B, T] segment of each query position.
    source_segment_ids: [B, S] segment of each key position; default segment_ids.
    dtype: mask dtype.
  """
  if source_segment_ids is None:
    source_segment_ids = segment_ids
  other = segment_ids[:, :, None] != source_segment_ids[:, None, :]  # [B, T, S]
  return (other.astype(dtype) * large_negative_number(dtype))[:, None]


def _hide_padded_queries(key_mask: jax.Array) -> jax.Array:
  """[B, 1, 1, S] key mask -> [B, 1, S, S] that also hides rows of masked (padded) queries."""
  query_mask = jnp.swapaxes(key_mask, 2, 3)  # [B, 1, S, 1]
  return jnp.minimum(query_mask, key_mask)


def merge_masks(a: jax.Array, b: jax.Array) -> jax.Array:
  """Combines two masks of shape [1|B, 1, 1|T, S]: a pair is kept only where both keep it.

  A mask with a query dim of 1 merged with one of T first hides padded query rows as well
  (module docstring). 0/1 masks work too (min keeps the 0s).
  """
  if a.ndim == 4 and a.shape[2] != b.shape[2]:
    if a.shape[2] == 1:
      a = _hide_padded_queries(a)
    elif b.shape[2] == 1:
      b = _hide_padded_queries(b)
    else:
      raise ValueError(
        f"merge_masks: query dims {a.shape[2]} and {b.shape[2]} differ and "
        f"neither is 1 (shapes {a.shape}, {b.shape})."
      )
  if a.shape[1:] != b.shape[1:]:
    raise ValueError(
      f"merge_masks needs masks [1|B, 1, 1|T, S] that agree after the batch dim, "
      f"got {a.shape} and {b.shape}."
    )
  return jnp.minimum(a, b)


def causal_segment_mask(
  segment_ids: jax.Array, dtype=jnp.float32, causal_attention_mask: jax.Array | None = None
) -> jax.Array:
  """[B, 1, T, T] mask: same segment and not in the future.

  Args:
    segment_ids: [B, T] segment ids.
    dtype: mask dtype.
    causal_attention_mask: optional [B, T], 1 where causality applies to a key position and 0
      where every query of the segment may see it (the inputs of an input -> target example).
  """
  b, t = segment_ids.shape
  causal = causal_mask(jnp.zeros([b, t, 1], dtype))  # [1, 1, T, T]
  if causal_attention_mask is not None:
    causal = causal * causal_attention_mask[:, None, None, :].astype(dtype)  # [B, 1, T, T]
  return merge_masks(segment_mask(segment_ids, dtype=dtype), causal)


def convert_paddings_to_mask(paddings: jax.Array, dtype=jnp.float32) -> jax.Array:
  """[B, 1, 1, S] mask hiding padded keys (paddings [B, S], 1.0 = padding)."""
  return paddings[:, None, None, :].astype(dtype) * large_negative_number(dtype)


def extend_step_causal_mask(
  time_step: jax.Array, cache_length: int, dtype=jnp.float32
) -> jax.Array:
  """[1, 1, S] mask for one decoding step: cache positions <= time_step are visible."""
  future = jnp.arange(cache_length) > time_step  # [S]
  return (future.astype(dtype) * large_negative_number(dtype))[None, None]


def keep_mask(mask: jax.Array) -> jax.Array:
  """A boolean mask, True where attending is allowed, from an additive (or 0/1, or bool) mask."""
  if mask.dtype == jnp.bool_:
    return mask
  return mask >= 0.5 * large_negative_number(mask.dtype)


def apply_mask_to_logits(logits: jax.Array, mask: jax.Array) -> jax.Array:
  """Pax's masking: logits where the mask keeps, the logits dtype's large negative elsewhere.

  Replacing (rather than adding) keeps masked logits from overflowing or staying competitive.
  """
  return jnp.where(keep_mask(mask), logits, large_negative_number(logits.dtype))


# ----------------------------------------------------------------------------------------------
# Block helpers of local attention.
# ----------------------------------------------------------------------------------------------


def shift_1d(inputs: jax.Array, offset: int, axis: int) -> jax.Array:
  """Shifts `inputs` by `offset` along `axis`, filling with zeros (offset > 0: to the right)."""
  length = inputs.shape[axis]
  pad = [(0, 0)] * inputs.ndim
  pad[axis] = (max(offset, 0), max(-offset, 0))
  padded = jnp.pad(inputs, pad)
  start = 0 if offset > 0 else -offset
  return jax.lax.slice_in_dim(padded, start, start + length, axis=axis)


def convert_to_block(x: jax.Array, block_size: int, padding_val: float = 0.0) -> jax.Array:
  """[B, T, ...] -> [B, U, W, ...] non-overlapping blocks (W = block_size), the tail padded."""
  if block_size < 1:
    raise ValueError(f"block_size must be at least 1, got {block_size}.")
  b, t = x.shape[:2]
  num_blocks = -(-t // block_size)
  extra = num_blocks * block_size - t
  if extra:
    pad = [(0, 0)] * x.ndim
    pad[1] = (0, extra)
    x = jnp.pad(x, pad, constant_values=padding_val)
  return x.reshape((b, num_blocks, block_size) + x.shape[2:])


def extract_block_context(
  x: jax.Array, block_size: int, left_context: int, right_context: int, padding_val: float = 0.0
) -> jax.Array:
  """[B, T, ...] -> [B, U, C, ...], C = block_size + (left_context - 1) + right_context.

  Block i's context is x[i*W - (L-1) : (i+1)*W + R], padded with `padding_val` past the ends.
  """
  if block_size < 1:
    raise ValueError(f"block_size must be at least 1, got {block_size}.")
  if not 1 <= left_context <= block_size + 1:
    raise ValueError(
      f"left_context must be in [1, block_size + 1 = {block_size + 1}], got {left_context}."
    )
  if not 0 <= right_context <= block_size:
    raise ValueError(
      f"right_context must be in [0, block_size = {block_size}], got {right_context}."
    )
  blocks = convert_to_block(x, block_size, padding_val)  # [B, U, W, ...]
  filler = jnp.full_like(blocks[:, :1], padding_val)  # [B, 1, W, ...]
  parts = [blocks]
  if left_context > 1:
    previous = jnp.concatenate([filler, blocks[:, :-1]], axis=1)  # block i-1 at i
    parts.insert(0, previous[:, :, block_size - (left_context - 1) :])
  if right_context > 0:
    following = jnp.concatenate([blocks[:, 1:], filler], axis=1)  # block i+1 at i
    parts.append(following[:, :, :right_context])
  return jnp.concatenate(parts, axis=2)


def _make_local_mask(
  seq_len: int, block_size: int, left_context: int, right_context: int
) -> jax.Array:
  """[U, W, C] bool: query j of block u may attend to key c of its context.

  True where both positions are inside the sequence and the key lies in
  [query - (left_context - 1), query + right_context].
  """
  if seq_len <= 0:
    raise ValueError(f"seq_len must be positive, got {seq_len}.")
  num_blocks = -(-seq_len // block_size)
  context = block_size + (left_context - 1) + right_context
  query_pos = jnp.arange(num_blocks * block_size).reshape(num_blocks, block_size)  # [U, W]
  key_pos = (
    jnp.arange(num_blocks)[:, None] * block_size + jnp.arange(context)[None, :] - (left_context - 1)
  )  # [U, C]
  delta = query_pos[:, :, None] - key_pos[:, None, :]  # [U, W, C]
  in_window = (delta < left_context) & (delta >= -right_context)
  valid_query = (query_pos < seq_len)[:, :, None]
  valid_key = ((key_pos >= 0) & (key_pos < seq_len))[:, None, :]
  return in_window & valid_query & valid_key
