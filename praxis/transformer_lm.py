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

Sharding: every weight carries logical axis names (`nn.with_logical_partitioning`) and the main
activations a logical constraint (`nn.with_logical_constraint`). The names are those of
`LOGICAL_AXES` below; a rules table (paxml.partitioning) maps them to mesh axes. Without rules in
scope (plain `init`/`apply`) the constraints are no-ops and the weights unbox to plain arrays.

`LmModel` wraps `TransformerLm` in the model interface the trainer programs against:
`__call__(input_batch) -> (metrics, per_example_out)` and `decode(input_batch)`.
"""

import enum

import flax.linen as nn
import jax
import jax.numpy as jnp

from praxis import pytypes

NestedMap = pytypes.NestedMap

# The logical axis names used here, with the tensor dimension each one names. Weight names and
# activation names differ because Pax shards them differently (weights over `data` x `mdl`,
# activations' model dims over `mdl` only).
LOGICAL_AXES = {
    "vocab": "V of the embedding table",
    "embed": "D of a weight",
    "mlp": "F of a weight",
    "heads": "N of a weight",
    "kv": "H of a weight",
    "norm": "D of a LayerNorm scale or bias",
    "position": "max_seq_len of the position table",
    "activation_batch": "B of an activation",
    "activation_length": "T of an activation",
    "activation_embed": "D of an activation",
    "activation_mlp": "F of an activation",
    "activation_heads": "N of an activation",
    "activation_kv": "H of an activation",
    "activation_vocab": "V of the logits",
}
_BTD = ("activation_batch", "activation_length", "activation_embed")


def _annotated(init, *names):
  """`init` whose result carries the logical axis `names` (one per weight dimension)."""
  return nn.with_logical_partitioning(init, names)

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
    init_in = _annotated(init_in, "embed", "heads", "kv")
    init_out = _annotated(init_out, "heads", "kv", "embed")
    w_query = self.param("query", init_in, shape_in)
    w_key = self.param("key", init_in, shape_in)
    w_value = self.param("value", init_in, shape_in)
    w_out = self.param("out", init_out, shape_in[1:] + shape_in[:1])  # [N, H, D]

    blnh = ("activation_batch", "activation_length", "activation_heads", "activation_kv")
    query = jnp.einsum("BTD,DNH->BTNH", x, w_query)  # [B, T, N, H]
    key = jnp.einsum("BSD,DNH->BSNH", x, w_key)  # [B, S, N, H]
    value = jnp.einsum("BSD,DNH->BSNH", x, w_value)  # [B, S, N, H]
    query, key, value = (nn.with_logical_constraint(a, blnh) for a in (query, key, value))
    context = causal_self_attention(query, key, value)  # [B, T, N, H]
    out = jnp.einsum("BTNH,NHD->BTD", context, w_out)  # [B, T, D]
    return nn.with_logical_constraint(out, _BTD)


class Mlp(nn.Module):
  """Two dense layers with a GELU between them."""

  hidden_dims: int
  """F: width of the hidden layer."""

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """Maps x [B, T, D] to [B, T, D]."""
    model_dims = x.shape[-1]
    kernel_init = nn.initializers.lecun_normal()
    h = nn.Dense(
        self.hidden_dims, name="wi",
        kernel_init=_annotated(kernel_init, "embed", "mlp"),
        bias_init=_annotated(nn.initializers.zeros_init(), "mlp"),
    )(x)  # [B, T, F]
    h = nn.with_logical_constraint(
        nn.gelu(h), ("activation_batch", "activation_length", "activation_mlp"))
    h = nn.Dense(
        model_dims, name="wo",
        kernel_init=_annotated(kernel_init, "mlp", "embed"),
        bias_init=_annotated(nn.initializers.zeros_init(), "norm"),
    )(h)  # [B, T, D]
    return nn.with_logical_constraint(h, _BTD)


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
    h = attention(_layer_norm("attention_norm")(x))  # [B, T, D]
    x = x + nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)
    h = Mlp(self.hidden_dims, name="mlp")(_layer_norm("mlp_norm")(x))
    x = x + nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)
    return nn.with_logical_constraint(x, _BTD)


def _layer_norm(name: str) -> nn.LayerNorm:
  """flax's LayerNorm with its scale and bias annotated as `norm` (replicated by Pax's rules)."""
  return nn.LayerNorm(
      name=name,
      scale_init=_annotated(nn.initializers.ones_init(), "norm"),
      bias_init=_annotated(nn.initializers.zeros_init(), "norm"),
  )


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
        embedding_init=_annotated(
            nn.initializers.normal(stddev=self.model_dims**-0.5), "vocab", "embed"),
        name="embedding",
    )
    x = embed(ids) * jnp.sqrt(self.model_dims)  # [B, T, D]
    if self.position_embedding is PositionEmbedding.LEARNED:
      positions = nn.Embed(
          self.max_seq_len, self.model_dims, name="position",
          embedding_init=_annotated(nn.initializers.variance_scaling(
              1.0, "fan_in", "normal", out_axis=0), "position", "embed"))
      x = x + positions(segment_pos)  # [B, T, D]
    else:
      x = x + sinusoidal_embedding(segment_pos, self.model_dims)  # [B, T, D]
    x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
    x = nn.with_logical_constraint(x, _BTD)

    for i in range(self.num_layers):
      block = TransformerBlock(
          num_heads=self.num_heads,
          hidden_dims=self.hidden_dims,
          dropout_rate=self.dropout_rate,
          name=f"block_{i}",
      )
      x = block(x, deterministic=deterministic)  # [B, T, D]
    x = _layer_norm("final_norm")(x)
    logits = embed.attend(x)  # [B, T, V] = einsum("BTD,VD->BTV")
    return nn.with_logical_constraint(
        logits, ("activation_batch", "activation_length", "activation_vocab"))


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


class LmModel(nn.Module):
  """`TransformerLm` behind the model interface the trainer programs against.

  `__call__(input_batch)` returns `(metrics, per_example_out)`: metrics maps a name to a
  `(value, weight)` pair (Pax's WeightedScalars), and holds `total_loss`, the loss the trainer
  minimises. `decode(input_batch)` continues each row's first `decode_prefix_len` tokens greedily.

  The batch is a NestedMap of [B, T] arrays: ids, labels, weights (paddings, segment_ids and
  segment_pos optional). Dropout is on exactly when the caller passes a 'dropout' rng, which the
  trainer does for training steps only.
  """

  lm: TransformerLm
  """The network: token ids to logits."""
  decode_prefix_len: int = 1
  """`decode` keeps this many leading tokens of each row and generates the rest."""

  @property
  def transformer_dims(self) -> tuple[int, int, int]:
    """(layers L, heads N, dims per head H): what the attention FLOPs term needs."""
    return (self.lm.num_layers, self.lm.num_heads, self.lm.model_dims // self.lm.num_heads)

  def __call__(self, input_batch: NestedMap) -> tuple[pytypes.WeightedScalars, NestedMap]:
    logits = self.lm(
        input_batch.ids, input_batch.get("segment_pos"),
        deterministic=not self.has_rng("dropout"),
    )  # [B, T, V]
    weights = input_batch.weights.astype(jnp.float32)  # [B, T]
    if "paddings" in input_batch:
      weights = weights * (1.0 - input_batch.paddings.astype(jnp.float32))
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [B, T, V]
    xent = -jnp.take_along_axis(
        log_probs, input_batch.labels[..., None], axis=-1)[..., 0]  # [B, T]
    num_predictions = jnp.sum(weights)
    # The floor keeps an all-padding batch at 0 instead of 0/0 = NaN.
    denominator = jnp.maximum(num_predictions, 1e-8)
    avg_xent = jnp.sum(xent * weights) / denominator
    correct = (jnp.argmax(logits, axis=-1) == input_batch.labels).astype(jnp.float32)
    accuracy = jnp.sum(correct * weights) / denominator
    metrics = {
        "total_loss": (avg_xent, num_predictions),
        "avg_xent": (avg_xent, num_predictions),
        "aux_loss": (jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32)),
        "log_pplx": (avg_xent, num_predictions),
        "fraction_of_correct_next_step_preds": (accuracy, num_predictions),
        "num_predictions": (num_predictions, jnp.ones((), jnp.float32)),
    }
    return metrics, NestedMap(per_token_xent=xent * weights)

  def decode(self, input_batch: NestedMap) -> tuple[pytypes.WeightedScalars, NestedMap]:
    """Greedy continuation of each row's first `decode_prefix_len` tokens to its full length.

    Every position is recomputed at each step (no key/value cache): simple, and quick enough
    for the small models this wrapper serves.

    Returns:
      metrics: `decode_accuracy`, the fraction of generated tokens equal to the batch's `ids`
        at the same positions (weighted by `weights`).
      decode_out: NestedMap of `prefix_ids` [B, P], `output_ids` [B, T] (prefix included) and
        `target_ids` [B, T].
    """
    ids = input_batch.ids  # [B, T]
    seq_len = ids.shape[1]
    prefix_len = self.decode_prefix_len
    if not 1 <= prefix_len < seq_len:
      raise ValueError(
          f"decode_prefix_len={prefix_len} must lie in [1, {seq_len - 1}] for rows of "
          f"length {seq_len}")
    positions = jnp.arange(seq_len)

    def generate_one(t, tokens):
      logits = self.lm(tokens, input_batch.get("segment_pos"))  # [B, T, V]
      next_token = jnp.argmax(logits[:, t - 1], axis=-1).astype(tokens.dtype)  # [B]
      return jnp.where(positions[None, :] == t, next_token[:, None], tokens)  # [B, T]

    # Positions >= prefix_len are masked to 0 first: the model must not see the answer, and
    # causal attention keeps later positions from influencing position t - 1 anyway.
    tokens = jnp.where(positions[None, :] < prefix_len, ids, 0)
    # A Python loop, not lax.fori_loop: Flax modules cannot be called inside a raw JAX loop.
    for t in range(prefix_len, seq_len):
      tokens = generate_one(t, tokens)
    generated = (positions >= prefix_len)[None, :] * input_batch.weights.astype(jnp.float32)
    correct = (tokens == ids).astype(jnp.float32)
    weight = jnp.sum(generated)
    accuracy = jnp.sum(correct * generated) / jnp.maximum(weight, 1e-8)
    decode_out = NestedMap(prefix_ids=ids[:, :prefix_len], output_ids=tokens, target_ids=ids)
    return {"decode_accuracy": (accuracy, weight)}, decode_out
