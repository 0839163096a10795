"""A small decoder-only Transformer language model on Flax linen.

The model is pre-LayerNorm: each block computes `x + attention(ln(x))` and then
`x + mlp(ln(x))`; a final LayerNorm precedes the logits, which reuse the token
embedding (tied softmax), as Pax's `TransformerLm` does.

Einsum letters, used in every shape comment in this file:
  B  batch
  T  query positions (sequence length)
  S  key/value positions (the same sequence, seen as the attended-to side)
  D  model dims
  N  attention heads
  H  dims per head (D = N * H)
  F  hidden dims of the MLP
  V  vocabulary
"""

import enum

import flax.linen as nn
import jax
import jax.numpy as jnp

# Added to masked attention logits. Finite (not -inf) so a fully masked row gives
# a uniform softmax instead of NaNs; large enough that exp() underflows to 0.
_MASK_VALUE = -1e9


class PositionEmbedding(enum.Enum):
  """How the model tells positions apart."""

  LEARNED = "learned"  # A trained [max_seq_len, D] table.
  SINUSOIDAL = "sinusoidal"  # The fixed sin/cos code of "Attention Is All You Need".


def sinusoidal_embedding(positions: jax.Array, dims: int) -> jax.Array:
  """Returns the fixed sin/cos code of `positions` [B, T] as [B, T, D]."""
  if dims % 2:
    raise ValueError(f"sinusoidal positions need an even model_dims, got {dims}")
  half = dims // 2
  # Wavelengths form a geometric series from 2*pi to 10000*2*pi.
  inv_timescales = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
  angles = positions[..., None].astype(jnp.float32) * inv_timescales  # [B, T, D/2]
  return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # [B, T, D]


def causal_self_attention(
    query: jax.Array, key: jax.Array, value: jax.Array
) -> jax.Array:
  """Scaled dot-product attention where position t sees positions <= t.

  Args:
    query: [B, T, N, H].
    key: [B, S, N, H] with S == T (self-attention).
    value: [B, S, N, H].

  Returns:
    [B, T, N, H], each query position's softmax-weighted sum of values.
  """
  dims_per_head = query.shape[-1]
  logits = jnp.einsum("BTNH,BSNH->BNTS", query, key)  # [B, N, T, S]
  # Scale so the logits' variance does not grow with the head size.
  logits = logits / jnp.sqrt(dims_per_head).astype(logits.dtype)
  t, s = logits.shape[-2:]
  causal = jnp.arange(t)[:, None] >= jnp.arange(s)[None, :]  # [T, S]
  logits = jnp.where(causal, logits, _MASK_VALUE)
  # Softmax in float32: in bf16 the normaliser loses precision over long rows.
  probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(value.dtype)
  return jnp.einsum("BNTS,BSNH->BTNH", probs, value)  # [B, T, N, H]


class MultiHeadAttention(nn.Module):
  """Causal multi-head self-attention with separate Q, K, V projections."""

  num_heads: int
  """N: number of attention heads."""
  dims_per_head: int
  """H: size of each head's query, key and value."""

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """Maps x [B, T, D] to [B, T, D]."""
    model_dims = x.shape[-1]
    shape_in = (model_dims, self.num_heads, self.dims_per_head)  # [D, N, H]
    # Fan-in is D for the input projections and N*H for the output one.
    init_in = nn.initializers.lecun_normal(in_axis=0, out_axis=(1, 2))
    init_out = nn.initializers.lecun_normal(in_axis=(0, 1), out_axis=2)
    w_query = self.param("query", init_in, shape_in)
    w_key = self.param("key", init_in, shape_in)
    w_value = self.param("value", init_in, shape_in)
    w_out = self.param("out", init_out, shape_in[1:] + shape_in[:1])  # [N, H, D]

    query = jnp.einsum("BTD,DNH->BTNH", x, w_query)  # [B, T, N, H]
    key = jnp.einsum("BSD,DNH->BSNH", x, w_key)  # [B, S, N, H]
    value = jnp.einsum("BSD,DNH->BSNH", x, w_value)  # [B, S, N, H]
    context = causal_self_attention(query, key, value)  # [B, T, N, H]
    return jnp.einsum("BTNH,NHD->BTD", context, w_out)  # [B, T, D]


class Mlp(nn.Module):
  """Two dense layers with a GELU between them."""

  hidden_dims: int
  """F: width of the hidden layer."""

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """Maps x [B, T, D] to [B, T, D]."""
    model_dims = x.shape[-1]
    h = nn.Dense(self.hidden_dims, name="wi")(x)  # [B, T, F]
    h = nn.gelu(h)
    return nn.Dense(model_dims, name="wo")(h)  # [B, T, D]


class TransformerBlock(nn.Module):
  """One pre-LayerNorm block: attention then MLP, each on a residual branch."""

  num_heads: int
  """N: number of attention heads."""
  hidden_dims: int
  """F: width of the MLP's hidden layer."""
  dropout_rate: float = 0.0
  """Dropout on each residual branch's output (Pax's residual_dropout_prob)."""

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    """Maps x [B, T, D] to [B, T, D]."""
    model_dims = x.shape[-1]
    attention = MultiHeadAttention(
        num_heads=self.num_heads,
        dims_per_head=model_dims // self.num_heads,
        name="attention",
    )
    h = attention(nn.LayerNorm(name="attention_norm")(x))  # [B, T, D]
    x = x + nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)
    h = Mlp(self.hidden_dims, name="mlp")(nn.LayerNorm(name="mlp_norm")(x))
    return x + nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)


class TransformerLm(nn.Module):
  """Decoder-only Transformer LM: token ids [B, T] to next-token logits [B, T, V].

  The unbound module is the model's configuration: experiments construct it
  with plain values and the trainer calls `init` and `apply` on it.
  """

  vocab_size: int
  """V: number of token ids; ids must lie in [0, vocab_size)."""
  model_dims: int
  """D: width of the residual stream and of the embeddings."""
  num_layers: int
  """Number of Transformer blocks."""
  num_heads: int
  """N: attention heads per block; must divide model_dims."""
  hidden_dims: int
  """F: width of each MLP's hidden layer (commonly 4 * model_dims)."""
  max_seq_len: int
  """Longest sequence the learned position table covers."""
  position_embedding: PositionEmbedding = PositionEmbedding.LEARNED
  """Learned table or fixed sinusoids."""
  dropout_rate: float = 0.0
  """Residual dropout, active only when `deterministic=False`."""

  @nn.compact
  def __call__(
      self,
      ids: jax.Array,
      segment_pos: jax.Array | None = None,
      *,
      deterministic: bool = True,
  ) -> jax.Array:
    """Returns logits [B, T, V] for ids [B, T].

    Args:
      ids: [B, T] int token ids.
      segment_pos: [B, T] position of each token in its sequence; defaults to
        0..T-1 in every row.
      deterministic: if False, applies dropout and needs a 'dropout' rng.
    """
    if self.model_dims % self.num_heads:
      raise ValueError(
          f"num_heads={self.num_heads} must divide model_dims={self.model_dims}"
      )
    seq_len = ids.shape[-1]
    if seq_len > self.max_seq_len:
      raise ValueError(
          f"sequence length {seq_len} exceeds max_seq_len={self.max_seq_len}; "
          "raise max_seq_len or feed shorter sequences"
      )
    if segment_pos is None:
      segment_pos = jnp.broadcast_to(jnp.arange(seq_len), ids.shape)  # [B, T]

    # Small init plus a sqrt(D) scale on the way in: the input has unit
    # variance while the tied softmax starts with logits of order 1.
    embed = nn.Embed(
        self.vocab_size,
        self.model_dims,
        embedding_init=nn.initializers.normal(stddev=self.model_dims**-0.5),
        name="embedding",
    )
    x = embed(ids) * jnp.sqrt(self.model_dims)  # [B, T, D]
    if self.position_embedding is PositionEmbedding.LEARNED:
      positions = nn.Embed(self.max_seq_len, self.model_dims, name="position")
      x = x + positions(segment_pos)  # [B, T, D]
    else:
      x = x + sinusoidal_embedding(segment_pos, self.model_dims)  # [B, T, D]
    x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)

    for i in range(self.num_layers):
      block = TransformerBlock(
          num_heads=self.num_heads,
          hidden_dims=self.hidden_dims,
          dropout_rate=self.dropout_rate,
          name=f"block_{i}",
      )
      x = block(x, deterministic=deterministic)  # [B, T, D]
    x = nn.LayerNorm(name="final_norm")(x)
    return embed.attend(x)  # [B, T, V] = einsum("BTD,VD->BTV")


def lm_loss(
    logits: jax.Array, labels: jax.Array, weights: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """Weighted mean next-token cross-entropy and accuracy.

  Args:
    logits: [B, T, V].
    labels: [B, T] int target ids.
    weights: [B, T]; 0 excludes a position (padding), 1 counts it fully.

  Returns:
    (loss, accuracy), float32 scalars. Both are 0 when every weight is 0.
  """
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [B, T, V]
  target_log_probs = jnp.take_along_axis(
      log_probs, labels[..., None], axis=-1
  )[..., 0]  # [B, T]
  weights = weights.astype(jnp.float32)
  # The floor keeps all-padding batches at 0 instead of 0/0 = NaN.
  total_weight = jnp.maximum(jnp.sum(weights), 1e-8)
  loss = -jnp.sum(target_log_probs * weights) / total_weight
  correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)  # [B, T]
  accuracy = jnp.sum(correct * weights) / total_weight
  return loss, accuracy
