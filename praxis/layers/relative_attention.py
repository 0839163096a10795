"""Pax's attention with relative positions: Transformer-XL (full and local) and local ALiBi.

DotProductAttentionXL (Dai et al. 2019, section 3.3) adds to the content logits q·k a position
term (q + v)·R(i - j), where R(d) is the sinusoidal embedding of the distance d projected per
head (`pos_emb`, `pos_proj`); with biases, the content term uses q + u. Weights: `pos_proj.w`
[rel_pos_emb_dim, N, H] and `u`, `v` [N, H] (when use_bias).

Letters: B batch, T query positions, S key positions, N heads, H dims per head, L = 2T - 1
distances, U blocks, W block size, C block context, F = left + right context.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from praxis import pax_fiddle
from praxis.layers import attention_masks
from praxis.layers import attention_parts
from praxis.layers import position_embeddings
from praxis.layers.dot_product_attention import DotProductAttention
from praxis.layers.local_attention import LocalSelfAttention

WeightInit = attention_parts.WeightInit


def create_relative_positional_embedding(layer) -> None:
  """Adds `pos_emb`, `pos_proj` (and `u`, `v` with use_bias) to an XL layer, in its setup."""
  if layer.rel_pos_emb_dim <= 0:
    raise ValueError(
      f"{type(layer).__name__} needs rel_pos_emb_dim > 0, got {layer.rel_pos_emb_dim}."
    )
  layer.create_child(
    "pos_emb",
    pax_fiddle.Config(
      position_embeddings.PositionalEmbedding, embedding_dims=layer.rel_pos_emb_dim
    ),
  )
  h = layer._dim_per_head  # pylint: disable=protected-access
  proj = layer.proj_tpl.clone().set(
    input_dim=layer.rel_pos_emb_dim, num_heads=layer.num_heads, dim_per_head=h, use_bias=False
  )
  proj.weight_split_dims_mapping.wt = layer.weight_split_dims_mapping.proj
  layer.create_child("pos_proj", proj)
  if layer.use_bias:
    for name in ("u", "v"):
      layer.create_variable(
        name,
        attention_parts.weight_hparams(
          layer, [layer.num_heads, h], ("heads", "kv"), init=WeightInit.Constant(0.0)
        ),
      )


def _distance_embeddings(layer, distances: jax.Array) -> jax.Array:
  """Projected sinusoids of the given distances [D] -> [D, N, H]."""
  sinusoids = layer.pos_emb(position=distances[None, :])  # [1, D, E]
  return layer.pos_proj(sinusoids)[0]


class DotProductAttentionXL(DotProductAttention):
  """Transformer-XL self-attention with relative position logits.

  Attributes:
    rel_pos_emb_dim: size of the sinusoidal distance embedding before projection.
  """

  rel_pos_emb_dim: int = 0

  def setup(self) -> None:
    super().setup()
    create_relative_positional_embedding(self)

  def _content_and_position(self, query):
    if self.use_bias:
      return query + self.theta.u, query + self.theta.v
    return query, query

  def _rel_position_bias(self, content: jax.Array, abs_pos_emb: jax.Array) -> jax.Array:
    """out[b, n, i, j] = content[b, i, n] · abs_pos_emb[i - j + T - 1, n] -> [B, N, T, T]."""
    t = content.shape[1]
    scores = jnp.einsum("BTNH,LNH->BNTL", content, abs_pos_emb)  # [B, N, T, 2T-1]
    index = jnp.arange(t)[:, None] - jnp.arange(t)[None, :] + t - 1  # [T, T]
    return jnp.take_along_axis(scores, index[None, None], axis=-1)

  def _atten_logits(self, query, key):
    b, t, n, h = query.shape
    if key.shape != (b, t, n, h):
      raise ValueError(
        f"DotProductAttentionXL is self-attention only: query {query.shape} and "
        f"key {key.shape} must match."
      )
    # Distances i - j from -(T-1) to T-1.
    pos = _distance_embeddings(self, jnp.arange(-(t - 1), t))  # [2T-1, N, H]
    content, position = self._content_and_position(query)
    return jnp.einsum("BTNH,BSNH->BNTS", content, key) + self._rel_position_bias(position, pos)

  def _dot_atten_one_step(
    self, query, key_state_name, value_state_name, atten_mask, relative_bias=None, time_step=None
  ):
    cache_batch = self.get_decode_state(key_state_name).shape[0]
    key, value = self._cached_kv(key_state_name, value_state_name, query.shape[0])
    atten_mask = self._repeat_mask(atten_mask, query.shape[0], cache_batch)
    query = self._scale_query(self._shard_bnh(query))
    s = key.shape[1]
    pos = _distance_embeddings(self, time_step - jnp.arange(s))  # [S, N, H]: distance t - s
    content, position = self._content_and_position(query)
    logits = jnp.einsum("BNH,BSNH->BNS", content, key) + jnp.einsum("BNH,SNH->BNS", position, pos)
    if relative_bias is not None:
      logits = logits + jnp.squeeze(relative_bias, axis=2)
    logits = self._cap_logits(logits).astype(jnp.float32)
    probs = self._softmax(attention_masks.apply_mask_to_logits(logits, atten_mask), key.dtype)
    encoded = jnp.einsum("BNS,BSNH->BNH", probs, value)
    return self._shard_bnh(encoded), probs


class LocalSelfAttentionXL(LocalSelfAttention):
  """Local (blocked) Transformer-XL self-attention; no extend_step.

  Attributes:
    rel_pos_emb_dim: size of the sinusoidal distance embedding before projection.
  """

  rel_pos_emb_dim: int = 0

  def setup(self) -> None:
    super().setup()
    if self.simulated:
      raise ValueError("LocalSelfAttentionXL does not support simulated=True.")
    create_relative_positional_embedding(self)

  def _atten_logits(self, query, key):
    if query.ndim == 4:
      return super()._atten_logits(query, key)
    c = key.shape[2]
    w = query.shape[2]
    left, right = self.left_context, self.right_context
    f = left + right
    if self.use_bias:
      content, position = query + self.theta.u, query + self.theta.v
    else:
      content, position = query, query
    term_ac = jnp.einsum("BUWNH,BUCNH->BNUWC", content, key)
    # Context slot j of query i (both block offsets) is at distance i - j + left - 1; the F
    # window distances are left-1 .. -right, at index k = j - i.
    pos = _distance_embeddings(self, jnp.arange(left - 1, -right - 1, -1))  # [F, N, H]
    by_offset = jnp.einsum("BUWNH,FNH->BNUWF", position, pos)  # [B, N, U, W, F]
    k = jnp.arange(c)[None, :] - jnp.arange(w)[:, None]  # [W, C]
    inside = (k >= 0) & (k < f)
    term_bd = jnp.take_along_axis(by_offset, jnp.clip(k, 0, f - 1)[None, None, None], axis=-1)
    term_bd = jnp.where(inside, term_bd, 0.0)
    return term_ac + term_bd

  def extend_step(
    self, query_vec, *, atten_mask, time_step, segment_pos=None, is_cross_attention=False
  ):
    raise NotImplementedError("LocalSelfAttentionXL has no extend_step (as in Pax).")


def _alibi_slopes(num_heads: int) -> jax.Array:
  """ALiBi's geometric head slopes: 2^(-8/n), 2^(-16/n), ... for the largest power of two n
  <= N, then the odd multiples of 2^(-4/n) for the remaining heads."""
  n = 2 ** int(math.floor(math.log2(num_heads)))
  slopes = [2.0 ** (-8.0 / n * (i + 1)) for i in range(n)]
  slopes += [2.0 ** (-4.0 / n * (2 * i + 1)) for i in range(num_heads - n)]
  return jnp.asarray(slopes[:num_heads], jnp.float32)


class LocalSelfAttentionAlibi(LocalSelfAttention):
  """Local attention with ALiBi biases: slope_n * (j - i + W - 1) for query i, context slot j.

  (Pax's form: within a row the bias grows linearly along the context, which after the softmax
  is a linear recency bias.)
  """

  def _atten_logits(self, query, key):
    if query.ndim == 4:
      return super()._atten_logits(query, key)
    w, n = query.shape[2], query.shape[3]
    c = key.shape[2]
    offsets = jnp.arange(c)[None, :] - jnp.arange(w)[:, None] + w - 1  # [W, C]
    bias = _alibi_slopes(n)[:, None, None] * offsets[None].astype(jnp.float32)  # [N, W, C]
    logits = jnp.einsum("BUWNH,BUCNH->BNUWC", query, key)
    return logits + bias[None, :, None]
