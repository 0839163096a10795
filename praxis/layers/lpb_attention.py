"""Pax's DotProductAttentionWithLPB: decoding many samples that share a prefix.

`lazy_broadcast_prefix(num_suffix_samples, suffix_length)` freezes the current decode state as a
prefix chunk (moved to the PREFIX_DECODE_CACHE collection as `<name>_<i>_pfx`) and starts a new
state with one more sample dim: after two calls with 3 and 2 samples, `key_state` is
[B, 3, 2, suffix_len, N, H], `key_state_1_pfx` [B, 3, len1, N, H] and `key_state_0_pfx`
[B, len0, N, H]. `extend_step` then takes inputs with the batch B * 3 * 2 (samples of one
example consecutive), exactly as Pax's.

Pax computes attention chunk by chunk (vmapped over the sample dims) so that a prefix is read
once for all its samples; here the prefix chunks are broadcast and concatenated with the current
state before one ordinary attention. Results and state layout are the same; the memory saving
of Pax's lazy broadcast is not reproduced (docs/praxis.md).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis.layers import attention_masks
from praxis.layers.dot_product_attention import DotProductAttention

DECODE_CACHE = base_layer.DECODE_CACHE
PREFIX_DECODE_CACHE = base_layer.PREFIX_DECODE_CACHE


class DotProductAttentionWithLPB(DotProductAttention):
  """DotProductAttention whose decode state can share prefixes among samples (lazy broadcast)."""

  # -- state bookkeeping -------------------------------------------------------------------------

  @property
  def _broadcast_prefixes_count(self) -> int:
    prefixes = self.variables.get(PREFIX_DECODE_CACHE, {})
    count = 0
    while f"key_state_{count}_pfx" in prefixes:
      count += 1
    return count

  def _prefix(self, name: str, i: int) -> jax.Array:
    return self.get_variable(PREFIX_DECODE_CACHE, f"{name}_{i}_pfx")

  def _broadcast_prefix_length(self) -> int:
    return sum(
      self._prefix("key_state", i).shape[i + 1] for i in range(self._broadcast_prefixes_count)
    )

  def decoding_state_sequence_length(self) -> int:
    count = self._broadcast_prefixes_count
    return self.get_decode_state("key_state").shape[1 + count] + self._broadcast_prefix_length()

  def transform_decode_state(self, transform_fn) -> None:
    time_dim = self._broadcast_prefixes_count + 1
    for name, state in self.variables[DECODE_CACHE].items():
      if isinstance(state, jax.Array):
        self.update_decode_state(name, self._shard_blnh(transform_fn(state, 0, time_dim)))

  def lazy_broadcast_prefix(self, num_suffix_samples: int, suffix_length: int) -> None:
    """Freezes the decode state as prefix chunk i and starts [.., num_samples, suffix_length, ..]."""
    if not self.is_mutable_collection(PREFIX_DECODE_CACHE):
      raise ValueError("lazy_broadcast_prefix needs mutable=[DECODE_CACHE, PREFIX_DECODE_CACHE].")
    count = self._broadcast_prefixes_count
    for name, state in list(self.variables[DECODE_CACHE].items()):
      self.put_variable(PREFIX_DECODE_CACHE, f"{name}_{count}_pfx", state)
      shape = (
        state.shape[: count + 1] + (num_suffix_samples, suffix_length) + state.shape[count + 2 :]
      )
      self.update_decode_state(name, jnp.zeros(shape, state.dtype))

  def _left_concat_decode_state(self, state_name: str, max_prefix_size: int) -> jax.Array:
    """The current state with up to max_prefix_size preceding prefix positions in front,
    each prefix chunk broadcast over the sample dims it does not have."""
    state = self.get_decode_state(state_name)
    count = self._broadcast_prefixes_count
    if count == 0:
      return state
    batch_dims = state.shape[: 1 + count]
    windows = [state]
    remaining = max_prefix_size
    for chunk_id in reversed(range(count)):
      if remaining == 0:
        break
      prefix = self._prefix(state_name, chunk_id)
      length = prefix.shape[chunk_id + 1]
      take = min(length, remaining)
      remaining -= take
      prefix = jax.lax.slice_in_dim(prefix, length - take, length, axis=chunk_id + 1)
      tail = prefix.shape[chunk_id + 1 :]  # (take, ...)
      prefix = prefix.reshape(batch_dims[: chunk_id + 1] + (1,) * (count - chunk_id) + tail)
      windows.insert(0, jnp.broadcast_to(prefix, batch_dims + tail))
    return jnp.concatenate(windows, axis=count + 1)

  def right_align_decode_state_with_prefix(self, max_prefix_size: int, right_align_fn) -> None:
    """Joins up to max_prefix_size prefix positions to each state, right-aligns with
    right_align_fn, and empties the prefix chunks."""
    count = self._broadcast_prefixes_count
    for name, state in list(self.variables[DECODE_CACHE].items()):
      if not isinstance(state, jax.Array):
        continue
      joined = self._left_concat_decode_state(name, max_prefix_size)
      shape = joined.shape
      flat = joined.reshape((math.prod(shape[: count + 1]),) + shape[count + 1 :])
      self.update_decode_state(name, right_align_fn(flat, 0, 1).reshape(shape))
      for i in range(count):
        prefix = self._prefix(name, i)
        empty_shape = list(prefix.shape)
        empty_shape[i + 1] = 0
        self.put_variable(
          PREFIX_DECODE_CACHE, f"{name}_{i}_pfx", jnp.zeros(empty_shape, prefix.dtype)
        )

  # -- attention over prefixes + current state --------------------------------------------------

  def _dot_atten_one_step(
    self, query, key_state_name, value_state_name, atten_mask, relative_bias=None, time_step=None
  ):
    """query [B', N, H] (one step) or [B', T, N, H] (n steps), B' = B * samples."""
    del time_step
    count = self._broadcast_prefixes_count
    everything = self._broadcast_prefix_length()
    key = self._left_concat_decode_state(key_state_name, everything)
    value = self._left_concat_decode_state(value_state_name, everything)
    s = key.shape[count + 1]
    key = key.reshape((-1,) + key.shape[count + 1 :])  # [B', S, N, H]
    value = value.reshape((-1,) + value.shape[count + 1 :])
    # A mask (or bias) may cover more positions than the state holds yet.
    atten_mask = atten_mask[..., :s]
    one_step = query.ndim == 3
    q = self._scale_query(query if not one_step else query[:, None])  # [B', T, N, H]
    logits = self._atten_logits(q, key)  # [B', N, T, S]
    if relative_bias is not None:
      logits = logits + relative_bias[..., :s]
    if self.scale_logits_by_head_dims:
      logits = logits * (1.0 / np.sqrt(key.shape[-1]))
    logits = self._cap_logits(logits).astype(jnp.float32)
    mask = atten_mask[:, :, None, :] if one_step else atten_mask  # [1|B', 1, T|1, S]
    probs = self._softmax(attention_masks.apply_mask_to_logits(logits, mask), key.dtype)
    encoded = self._atten_context(probs, value)  # [B', T, N, H]
    if self.zero_fully_masked:
      threshold = attention_masks.large_negative_number(jnp.float32) / 2
      fully_masked = jnp.all(mask < threshold, axis=-1)[:, 0, :, None, None]  # [B', T, 1, 1]
      encoded = encoded * (1 - fully_masked).astype(encoded.dtype)
    if one_step:
      return encoded[:, 0], probs[:, :, 0]
    return encoded, probs

  def extend_step(
    self,
    query_vec: jax.Array,
    *,
    atten_mask: jax.Array,
    time_step: jax.Array,
    segment_pos: jax.Array | None = None,
    is_cross_attention: bool = False,
  ) -> jax.Array:
    """One step (query_vec [B', D]) or n steps (query_vec [B', T, D]) over prefixes + state.

    With is_cross_attention (Pax's), only the query is projected (and rotated): the keys and
    values are the source's, cached by the fprop, and stay as they are.
    """
    count = self._broadcast_prefixes_count
    batch_dims = self.get_decode_state("key_state").shape[: 1 + count]
    one_step = query_vec.ndim == 2
    time_step = jnp.asarray(time_step)
    prefix_length = self._broadcast_prefix_length()

    def unflatten(x):  # [B', ...] -> batch_dims + [...]
      return x.reshape(batch_dims + x.shape[1:])

    def flatten(x):
      return x.reshape((-1,) + x.shape[len(batch_dims) :])

    def extend(name, value):
      return self.extend_decode_state(
        name, unflatten(value), time_step - prefix_length, time_dim=1 + count
      )

    if self.combine_qkv:
      query_proj, key_proj, value_proj = self.combined_qkv(query_vec)
    else:
      query_proj = self.query(query_vec)
      key_proj = value_proj = None
      if not is_cross_attention:
        key_proj = self.key(query_vec)
        value_proj = self.value(query_vec)
    if not is_cross_attention:
      extend("key_state", key_proj)
      extend("value_state", value_proj)
    key_name, value_name = "key_state", "value_state"
    if segment_pos is not None:
      segment_pos = flatten(unflatten(segment_pos))
    if self.dconv_qkv:
      if is_cross_attention:
        raise NotImplementedError("DotProductAttentionWithLPB: cross-attention with dconv_qkv.")
      if not one_step:
        raise NotImplementedError("DotProductAttentionWithLPB: extending n steps with dconv.")
      extend("query_state", query_proj)
      window = min(self.dconv_q.kernel_size - 1, prefix_length)
      step = time_step - prefix_length + window

      def conv(layer, name):
        return layer.extend_step(
          flatten(self._left_concat_decode_state(name, window)),
          axis=1,
          step=step,
          segment_pos=segment_pos,
        )

      query_proj = conv(self.dconv_q, "query_state")
      key_proj = conv(self.dconv_k, "key_state")
      value_proj = conv(self.dconv_v, "value_state")
      key_name, value_name = "key_post_dconv", "value_post_dconv"
      extend(key_name, key_proj)
      extend(value_name, value_proj)
    if self.use_rotary_position_emb:
      if segment_pos is None:
        position = jnp.broadcast_to(time_step, (query_vec.shape[0],))
      else:
        position = segment_pos
      if one_step:
        rotate = self.rotary_position_emb.extend_step
      else:  # each of the T steps at its own position
        if position.ndim == 1:
          position = position[:, None] + jnp.arange(query_vec.shape[1])[None, :]
        rotate = self.rotary_position_emb
      query_proj = rotate(query_proj, position)
      key_name = "key_state" if self.consolidate_rope_key_state else "key_post_rotary_pos_emb"
      if not is_cross_attention:
        extend(key_name, rotate(key_proj, position))
    relative_bias = None
    if self.relative_bias_tpl is not None:
      if not one_step:
        raise NotImplementedError(
          "DotProductAttentionWithLPB: extending n steps with relative bias."
        )
      relative_bias = self.relative_bias.extend_step(
        seq_length=self.decoding_state_sequence_length(), time_step=time_step
      )
    encoded, _ = self._dot_atten_one_step(
      query_proj, key_name, value_name, atten_mask, relative_bias
    )
    encoded = self.post(encoded)
    return self._shard_bd(encoded) if one_step else self._shard_bld(encoded)
