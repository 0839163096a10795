"""Pax's local (sliding-window) self-attention: each position sees L - 1 keys before it, itself
and R keys after it.

Blocked computation (the default): the sequence is cut into U blocks of W queries and each block
attends only to its context of C = W + (L - 1) + R keys, so the work is O(T * C) rather than
O(T * S). `simulated=True` computes the full [T, S] logits with a window mask instead (same
result; faster when W is close to T).

Letters: B batch, U blocks, W block size, C block context, N heads, H dims per head, F = L + R.
"""

from __future__ import annotations

import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp

from praxis.layers import attention_masks
from praxis.layers import attention_parts
from praxis.layers.dot_product_attention import DotProductAttention


def _padded_slice(
  x: jax.Array, start_index, slice_size: int, axis: int, padding_value
) -> jax.Array:
  """x[start : start + size] along axis, `padding_value` where that runs past either end.

  `start_index` may be traced and negative.
  """
  axis = axis % x.ndim
  pad = [(0, 0)] * x.ndim
  # Pad both ends by the slice size so any start in [-size, len] reads a full window.
  pad[axis] = (slice_size, slice_size)
  padded = jnp.pad(x, pad, constant_values=padding_value)
  start = jnp.clip(jnp.asarray(start_index) + slice_size, 0, padded.shape[axis] - slice_size)
  return jax.lax.dynamic_slice_in_dim(padded, start, slice_size, axis=axis)


class LocalSelfAttention(DotProductAttention):
  """Self-attention within a window of left_context (self included) and right_context keys.

  Causal when right_context = 0. Queries and keys have the same length.

  Attributes:
    block_size: W; default max(1, right_context, left_context - 1).
    left_context: L, positions to the left including the current one.
    right_context: R, positions to the right.
    simulated: compute full attention with a window mask instead of blocks.
  """

  block_size: int | None = None
  left_context: int | None = None
  right_context: int | None = None
  simulated: bool = False

  def _block(self) -> int:
    if self.block_size is not None:
      return self.block_size
    if self.left_context is None or self.right_context is None:
      raise ValueError(
        "LocalSelfAttention needs left_context and right_context (or simulated=True)."
      )
    return max(1, self.right_context, self.left_context - 1)

  def _atten_logits(self, query: jax.Array, key: jax.Array) -> jax.Array:
    if self.simulated or query.ndim == 4:
      return super()._atten_logits(query, key)
    return jnp.einsum("BUWNH,BUCNH->BNUWC", query, key)

  def _dot_atten(self, query, key, value, atten_mask, relative_bias=None, deterministic=None):
    if self.simulated:
      window = attention_masks.limited_context_mask(
        self.left_context,
        self.right_context,
        time_size=query.shape[1],
        column_time_size=key.shape[1],
      )  # [T, S]
      return super()._dot_atten(
        query,
        key,
        value,
        jnp.minimum(atten_mask, window),
        relative_bias,
        deterministic=deterministic,
      )
    if relative_bias is not None:
      raise NotImplementedError(
        "LocalSelfAttention does not support relative_bias_tpl; use "
        "LocalSelfAttentionRelativeBias or simulated=True."
      )
    w = self._block()
    left, right = self.left_context, self.right_context
    query, key, value = self._shard_blnh(query), self._shard_blnh(key), self._shard_blnh(value)
    b, s, n, h = key.shape
    t = query.shape[1]
    self._check_mask(atten_mask, b, t, s)
    query = self._scale_query(query)
    key_context = attention_masks.extract_block_context(key, w, left, right)  # [B, U, C, N, H]
    u, c = key_context.shape[1], key_context.shape[2]
    query_blocks = attention_masks.convert_to_block(query, w)  # [B, U, W, N, H]
    # float64 masks would make an overflowing large negative.
    mask_dtype = jnp.float32 if atten_mask.dtype == jnp.float64 else atten_mask.dtype
    minus_inf = attention_masks.large_negative_number(mask_dtype)
    atten_mask = atten_mask.astype(mask_dtype)
    if atten_mask.shape[2] == 1:  # [B|1, 1, 1, S]: the same keys hidden for every query
      key_mask = attention_masks.extract_block_context(
        atten_mask[:, 0, 0, :], w, left, right, padding_val=minus_inf
      )  # [B|1, U, C]
      mask = jnp.broadcast_to(key_mask[:, None, :, None, :], (key_mask.shape[0], n, u, w, c))
    else:  # [B|1, 1, T, S]: each query row has its own keys
      rows = attention_masks.convert_to_block(atten_mask[:, 0], w, padding_val=minus_inf)
      mb = rows.shape[0]
      rows = rows.reshape(mb * u * w, s)
      context = attention_masks.extract_block_context(rows, w, left, right, padding_val=minus_inf)
      context = context.reshape(mb, u, w, u, c)
      # Row block i's context lives in column block i.
      mask = jnp.einsum("BUWUC->BUWC", context)[:, None]  # [B|1, 1, U, W, C]
      mask = jnp.broadcast_to(mask, (mb, n, u, w, c))
    window = attention_masks._make_local_mask(s, w, left, right)  # [U, W, C]
    mask = jnp.minimum(mask, (1.0 - window.astype(mask_dtype)) * minus_inf)
    logits = self._atten_logits(query_blocks, key_context)  # [B, N, U, W, C]
    logits = checkpoint_name(logits, "logits")
    logits = self._cap_logits(logits).astype(jnp.float32)
    padded = attention_masks.apply_mask_to_logits(logits, mask)
    probs = self._dropout(self._softmax(padded, key.dtype), deterministic)
    value_context = attention_masks.extract_block_context(value, w, left, right)
    encoded = jnp.einsum("BNUWC,BUCNH->BUWNH", probs, value_context)
    if self.zero_fully_masked:
      fully_masked = jnp.all(mask < minus_inf / 2, axis=-1)[:, 0, :, :, None, None]
      encoded = encoded * (1 - fully_masked).astype(encoded.dtype)
    encoded = encoded.reshape(b, u * w, n, h)[:, :t]  # drop the block padding
    encoded = checkpoint_name(encoded, "context")
    return self._shard_blnh(encoded), probs

  def _dot_atten_one_step(
    self, query, key_state_name, value_state_name, atten_mask, relative_bias=None, time_step=None
  ):
    """query [B, N, H] over the window of the cache ending right_context after time_step."""
    cache_batch = self.get_decode_state(key_state_name).shape[0]
    key, value = self._cached_kv(key_state_name, value_state_name, query.shape[0])
    atten_mask = self._repeat_mask(atten_mask, query.shape[0], cache_batch)
    query = self._shard_bnh(query)
    s = key.shape[1]
    if value.shape[1] != s or atten_mask.shape[-1] != s:
      raise ValueError(f"extend_step: cache length {s} and mask {atten_mask.shape} disagree.")
    f = self.left_context + self.right_context
    start = time_step + 1 - self.left_context
    mask_dtype = jnp.float32 if atten_mask.dtype == jnp.float64 else atten_mask.dtype
    minus_inf = attention_masks.large_negative_number(mask_dtype)
    key = _padded_slice(key, start, f, 1, 0.0)  # [B, F, N, H]
    value = _padded_slice(value, start, f, 1, 0.0)
    atten_mask = _padded_slice(atten_mask.astype(mask_dtype), start, f, -1, minus_inf)
    logits = self.qk_einsum("BNH,BFNH->BNF", self._scale_query(query), key)
    if relative_bias is not None:
      relative_bias = _padded_slice(relative_bias, start, f, -1, 0.0)
      logits = logits + jnp.squeeze(relative_bias, axis=2)
    logits = self._cap_logits(logits).astype(jnp.float32)
    probs = self._softmax(logits + atten_mask.astype(jnp.float32), key.dtype)  # [B, N, F]
    encoded = self.pv_einsum("BNF,BFNH->BNH", probs, value)
    if self.zero_fully_masked:
      fully_masked = jnp.all(atten_mask < minus_inf / 2, axis=-1)[..., None]
      encoded = encoded * (1 - fully_masked).astype(encoded.dtype)
    return self._shard_bnh(encoded), probs


class LocalSelfAttentionRelativeBias(LocalSelfAttention):
  """Local attention with a learned bias per head and relative offset (DIET-REL).

  Weight pos_emb_compressed[N, C + W - 1] holds one bias per head for each offset a query of a
  block can have to a key of its context; needs block_size set.
  """

  def setup(self) -> None:
    super().setup()
    if self.block_size is None:
      raise ValueError("LocalSelfAttentionRelativeBias needs block_size.")
    w = self.block_size
    c = w + self.left_context + self.right_context - 1
    self.create_variable(
      "pos_emb_compressed",
      attention_parts.weight_hparams(self, [self.num_heads, c + w - 1], ("heads", None)),
    )

  def _atten_logits(self, query, key):
    if query.ndim == 4:
      return super()._atten_logits(query, key)
    b, u, w, n, _ = query.shape
    c = w + self.left_context + self.right_context - 1
    table = self.theta.pos_emb_compressed  # [N, C + W - 1]
    self.add_summary("pos_emb_compressed", jnp.sum(table))
    # Tiling the table and cutting rows one element shorter than a period rotates row j by j,
    # so the bias of (query j, key c) depends only on the offset c - j (a Toeplitz matrix).
    tiled = jnp.tile(table, [1, w])[:, : w * (w + c - 2)]
    bias = tiled.reshape(n, w, w + c - 2)[..., w - 2 :]  # [N, W, C]
    logits = jnp.einsum("BUWNH,BUCNH->BNUWC", query, key)
    return logits + bias[None, :, None]
