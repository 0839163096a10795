"""Dot-product attention with multi-head, grouped-query and multi-query heads, and its masks.

    atten = DotProductAttention.HParams.config(input_dim=64, hidden_dim=64, num_heads=8,
                                               num_kv_heads=2)       # grouped-query
    layer = atten.Instantiate()
    mask = causal_segment_mask(segment_ids)                          # [B, 1, T, T]
    variables = layer.init(key, x, x, x, mask)
    encoded, probs = layer.apply(variables, x, x, x, mask)           # [B, T, D], [B, N, T, S]

Masks are additive, as in Pax: 0 where a query may attend to a key, a large negative number
(`large_negative_number`) where it may not; masks are combined with `jnp.minimum`
(`merge_masks`).

Decoding. Applying the layer with `mutable=["decoder_cache"]` also stores the projected keys and
values of every position (`key_state`, `value_state`, [B, S, K, H]) in the "decoder_cache"
collection; `extend_step` then projects one new position, writes its key/value at `time_step`
and attends over the cache. Keys are cached after the rotary embedding, so they are not rotated
twice.

Remat. The projections are tagged with `jax.ad_checkpoint.checkpoint_name` ("query_proj",
"key_proj", "value_proj", "combined_qkv_proj", "context" for the per-head attention output,
"out_proj" for the output projection) so that checkpoint_policy can save exactly those.

Einsum letters:
  B batch            T query positions     S key positions
  D model dims       N query heads         K key/value heads (N for multi-head, 1 for multi-query)
  G query heads per key/value head (N // K)                  H dims per head
"""

from __future__ import annotations

import math

import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis.layers import embedding_softmax
from praxis.layers import stochastics

DECODER_CACHE = "decoder_cache"

# 1 / softplus(0): makes PerDimScale's factor exactly 1 / sqrt(H) at its zero initialisation.
_INV_SOFTPLUS_0 = 1.0 / math.log(2.0)


# ----------------------------------------------------------------------------------------------
# Masks.
# ----------------------------------------------------------------------------------------------


def large_negative_number(dtype) -> jax.Array:
  """The additive mask value for dtype: far below any logit, yet safe from overflow when added."""
  dtype = jnp.dtype(dtype) if jnp.issubdtype(dtype, jnp.floating) else jnp.dtype(jnp.float32)
  return jnp.asarray(-0.7 * jnp.finfo(dtype).max, dtype)


def merge_masks(a: jax.Array, b: jax.Array) -> jax.Array:
  """Combines two additive masks (broadcasting): a position is kept only if both keep it."""
  return jnp.minimum(a, b)


def _mask_dtype(x: jax.Array, dtype) -> jnp.dtype:
  if dtype is not None:
    return jnp.dtype(dtype)
  return x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.dtype(jnp.float32)


def causal_mask(input_t: jax.Array, dtype=None) -> jax.Array:
  """[1, 1, T, T] mask letting position t attend to positions <= t.

  Args:
    input_t: any array whose second dim is the sequence length T ([B, T] ids or [B, T, D]).
    dtype: mask dtype; default: input_t's dtype if floating, else float32.
  """
  dtype = _mask_dtype(input_t, dtype)
  length = input_t.shape[1]
  future = jnp.arange(length)[None, :] > jnp.arange(length)[:, None]  # [T, S]: key after query
  return (future * large_negative_number(dtype)).astype(dtype)[None, None]  # [1, 1, T, T]


def segment_mask(segment_ids: jax.Array, source_segment_ids: jax.Array | None = None,
                 dtype=jnp.float32) -> jax.Array:
  """[B, 1, T, S] mask letting a query attend only to keys of its own segment (packed inputs).

  Args:
    segment_ids: [B, T] segment id of each query position.
    source_segment_ids: [B, S] segment id of each key position; default `segment_ids`.
    dtype: mask dtype.
  """
  if source_segment_ids is None:
    source_segment_ids = segment_ids
  other = segment_ids[:, :, None] != source_segment_ids[:, None, :]  # [B, T, S]
  return (other * large_negative_number(dtype)).astype(dtype)[:, None]  # [B, 1, T, S]


def causal_segment_mask(segment_ids: jax.Array, dtype=jnp.float32,
                        causal_attention_mask: jax.Array | None = None) -> jax.Array:
  """[B, 1, T, T] mask: same segment and not in the future.

  Args:
    segment_ids: [B, T] segment ids (all equal for an unpacked row).
    dtype: mask dtype.
    causal_attention_mask: optional [B, T], 1 where causality applies to a key position and 0
      where it does not (a prefix-LM's prefix: every query of the segment may see those keys).
  """
  causal = causal_mask(segment_ids, dtype)  # [1, 1, T, T]
  if causal_attention_mask is not None:
    # Keys with 0 are visible to every query: scale their column of the causal mask to 0.
    causal = causal * causal_attention_mask[:, None, None, :].astype(dtype)  # [B, 1, T, T]
  return merge_masks(segment_mask(segment_ids, dtype=dtype), causal)


def convert_paddings_to_mask(paddings: jax.Array, dtype=jnp.float32) -> jax.Array:
  """[B, 1, 1, S] mask hiding padded key positions (paddings [B, S]: 1.0 = padding)."""
  return (paddings[:, None, None, :] * large_negative_number(dtype)).astype(dtype)


def extend_step_causal_mask(time_step: jax.Array, cache_length: int,
                            dtype=jnp.float32) -> jax.Array:
  """[1, 1, S] mask for extend_step: the cache positions <= time_step are visible."""
  future = jnp.arange(cache_length) > time_step  # [S]
  return (future * large_negative_number(dtype)).astype(dtype)[None, None]


# ----------------------------------------------------------------------------------------------
# Pieces of the attention layer.
# ----------------------------------------------------------------------------------------------


class AttentionProjection(base_layer.BaseLayer):
  """Per-head projection with the weight w[D, N, H] (Pax's layout for both directions).

  Input projection: [..., D] -> [..., N, H]. Output projection (`is_output_projection`):
  [..., N, H] -> [..., D], summing over heads.

  Attributes:
    input_dim: model dims D.
    num_heads: heads N (K for a key/value projection).
    dim_per_head: dims per head H.
    is_output_projection: project heads back to the model dims.
    use_bias: add a bias (b[N, H] for input projections, b[D] for the output projection).
    heads_axis: logical axis name of the heads dim ("heads", or "kv_heads" for the keys and
      values of grouped- or multi-query attention, whose few heads may not divide a mesh axis).
  """

  input_dim: int = 0
  num_heads: int = 0
  dim_per_head: int = 0
  is_output_projection: bool = False
  use_bias: bool = True
  heads_axis: str = "heads"

  def setup(self):
    shape = (self.input_dim, self.num_heads, self.dim_per_head)
    if min(shape) <= 0:
      raise ValueError(f"AttentionProjection needs positive input_dim, num_heads and "
                       f"dim_per_head, got {shape}.")
    # The output projection sums over (N, H): those are its fan-in dims.
    fan_in_axes = (1, 2) if self.is_output_projection else (0,)
    self.w = self.create_variable("w", shape, ("embed", self.heads_axis, "kv"),
                                  fan_in_axes=fan_in_axes)
    if self.use_bias:
      zero = base_layer.WeightInit.Constant(0.0)
      if self.is_output_projection:
        self.b = self.create_variable("b", (self.input_dim,), ("embed",), init=zero)
      else:
        self.b = self.create_variable("b", shape[1:], (self.heads_axis, "kv"), init=zero)

  def __call__(self, inputs: jax.Array) -> jax.Array:
    w = self.w.astype(self.compute_dtype)
    inputs = inputs.astype(self.compute_dtype)
    if self.is_output_projection:
      out = jnp.einsum("...NH,DNH->...D", inputs, w)  # [..., D]
    else:
      out = jnp.einsum("...D,DNH->...NH", inputs, w)  # [..., N, H]
    if self.use_bias:
      out = out + self.b.astype(self.compute_dtype)
    return out


class CombinedQKVProjection(base_layer.BaseLayer):
  """Query, key and value projections as one weight w[3, D, N, H] (one matmul, self-attention).

  Attributes: as AttentionProjection's input projection.
  """

  input_dim: int = 0
  num_heads: int = 0
  dim_per_head: int = 0
  use_bias: bool = True

  def setup(self):
    shape = (3, self.input_dim, self.num_heads, self.dim_per_head)
    if min(shape) <= 0:
      raise ValueError(f"CombinedQKVProjection needs positive input_dim, num_heads and "
                       f"dim_per_head, got {shape[1:]}.")
    self.w = self.create_variable("w", shape, (None, "embed", "heads", "kv"), fan_in_axes=(1,))
    if self.use_bias:
      self.b = self.create_variable("b", (3, self.num_heads, self.dim_per_head),
                                    (None, "heads", "kv"),
                                    init=base_layer.WeightInit.Constant(0.0))

  def __call__(self, inputs: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    w = self.w.astype(self.compute_dtype)
    out = jnp.einsum("...D,CDNH->C...NH", inputs.astype(self.compute_dtype), w)  # [3, ..., N, H]
    if self.use_bias:
      bias = self.b.astype(self.compute_dtype)  # [3, N, H]
      out = out + bias.reshape((3,) + (1,) * (out.ndim - 3) + bias.shape[1:])
    return out[0], out[1], out[2]


class PerDimScale(base_layer.BaseLayer):
  """Learned per-dim query scale: x * softplus(w) / (softplus(0) * sqrt(H)); w[H] starts at 0.

  At initialisation this is the usual 1 / sqrt(H) scaling; training may re-weight head dims.
  """

  dim: int = 0

  def setup(self):
    self.per_dim_scale = self.create_variable("per_dim_scale", (self.dim,), ("kv",),
                                              init=base_layer.WeightInit.Constant(0.0))

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if inputs.shape[-1] != self.dim:
      raise ValueError(f"PerDimScale expects inputs [..., {self.dim}], got {inputs.shape}.")
    scale = _INV_SOFTPLUS_0 / math.sqrt(self.dim) * jax.nn.softplus(
        self.per_dim_scale.astype(jnp.float32))  # [H]
    return (inputs * scale).astype(inputs.dtype)


# ----------------------------------------------------------------------------------------------
# The attention layer.
# ----------------------------------------------------------------------------------------------


class DotProductAttention(base_layer.BaseLayer):
  """Multi-head dot-product attention; grouped-query and multi-query via `num_kv_heads`.

  Query heads n = k * G + g (g < G) share key/value head k, as in Pax's GroupedQueryAttention.

  Children (weights): `query`, `key`, `value` (AttentionProjection, w[D, N|K, H]) or
  `combined_qkv` (w[3, D, N, H]); `post` (output projection w[D, N, H]); `per_dim_scale` when
  enabled.

  Dropout on the attention probabilities is applied only when called with
  `deterministic=False` (and then a "dropout" rng must be given); the default is deterministic.

  Attributes:
    input_dim: model dims D of the query/key/value inputs and of the output.
    hidden_dim: N * H; used to derive dim_per_head when that is not set.
    num_heads: query heads N.
    dim_per_head: dims per head H; default hidden_dim // num_heads.
    num_kv_heads: key/value heads K: None means N (multi-head), 1 multi-query, otherwise
      grouped-query (N must be a multiple of K).
    use_bias: projections have biases.
    combine_qkv: one [3, D, N, H] projection of `query_vec` (self-attention only: key_vec and
      value_vec are then not read); needs num_kv_heads None or equal to num_heads.
    atten_logit_cap: if > 0, logits become cap * tanh(logits / cap) before masking.
    internal_enable_per_dim_scale: scale queries with a learned PerDimScale instead of
      1 / sqrt(H).
    use_rotary_position_emb: rotate queries and keys by their positions (RoPE).
    atten_dropout_prob: dropout probability on the attention probabilities.
    dropout_tpl: template of the attention dropout (keep_prob is set from atten_dropout_prob).
    rotary_position_emb_tpl: template of the rotary embedding (embedding_dims is set to H).
  """

  input_dim: int = 0
  hidden_dim: int = 0
  num_heads: int = 1
  dim_per_head: int | None = None
  num_kv_heads: int | None = None
  use_bias: bool = True
  combine_qkv: bool = False
  atten_logit_cap: float = 0.0
  internal_enable_per_dim_scale: bool = False
  use_rotary_position_emb: bool = False
  atten_dropout_prob: float = 0.0
  dropout_tpl: base_hyperparams.Config = base_hyperparams.template_field(stochastics.Dropout)
  rotary_position_emb_tpl: base_hyperparams.Config = base_hyperparams.template_field(
      embedding_softmax.RotaryPositionalEmbedding)

  @property
  def head_dim(self) -> int:
    if self.dim_per_head:
      return self.dim_per_head
    if self.hidden_dim <= 0 or self.hidden_dim % self.num_heads:
      raise ValueError(f"DotProductAttention: hidden_dim {self.hidden_dim} is not a positive "
                       f"multiple of num_heads {self.num_heads}; set dim_per_head or fix them.")
    return self.hidden_dim // self.num_heads

  @property
  def kv_heads(self) -> int:
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  def setup(self):
    n, k, h = self.num_heads, self.kv_heads, self.head_dim
    if k <= 0 or n % k:
      raise ValueError(f"DotProductAttention: num_heads {n} must be a multiple of num_kv_heads "
                       f"{k} (1 = multi-query, {n} = multi-head).")
    if self.combine_qkv:
      if k != n:
        raise ValueError(f"combine_qkv needs as many key/value heads as query heads, got "
                         f"num_kv_heads={k} and num_heads={n}; use separate projections.")
      self.combined_qkv = CombinedQKVProjection(
          input_dim=self.input_dim, num_heads=n, dim_per_head=h, use_bias=self.use_bias,
          dtype=self.dtype, fprop_dtype=self.fprop_dtype, params_init=self.params_init)
    else:
      kv_axis = "heads" if k == n else "kv_heads"
      common = dict(input_dim=self.input_dim, dim_per_head=h, use_bias=self.use_bias,
                    dtype=self.dtype, fprop_dtype=self.fprop_dtype, params_init=self.params_init)
      self.query = AttentionProjection(num_heads=n, **common)
      self.key = AttentionProjection(num_heads=k, heads_axis=kv_axis, **common)
      self.value = AttentionProjection(num_heads=k, heads_axis=kv_axis, **common)
    self.post = AttentionProjection(
        input_dim=self.input_dim, num_heads=n, dim_per_head=h, is_output_projection=True,
        use_bias=self.use_bias, dtype=self.dtype, fprop_dtype=self.fprop_dtype,
        params_init=self.params_init)
    if self.internal_enable_per_dim_scale:
      self.per_dim_scale = PerDimScale(dim=h, dtype=self.dtype, fprop_dtype=self.fprop_dtype)
    if self.use_rotary_position_emb:
      self.rotary_position_emb = self.create_child(self.rotary_position_emb_tpl,
                                                   embedding_dims=h)
    self.atten_dropout = self.create_child(self.dropout_tpl,
                                           keep_prob=1.0 - self.atten_dropout_prob)

  # -- pieces ------------------------------------------------------------------------------------

  def _project_qkv(self, query_vec, key_vec, value_vec):
    """Returns q [B, T, N, H], k [B, S, K, H], v [B, S, K, H]."""
    if self.combine_qkv:
      q, k, v = self.combined_qkv(query_vec)
      q = checkpoint_name(q, "combined_qkv_proj")
      k = checkpoint_name(k, "combined_qkv_proj")
      v = checkpoint_name(v, "combined_qkv_proj")
    else:
      q = checkpoint_name(self.query(query_vec), "query_proj")
      k = checkpoint_name(self.key(key_vec), "key_proj")
      v = checkpoint_name(self.value(value_vec), "value_proj")
    kv_axis = "heads" if self.kv_heads == self.num_heads else "kv_heads"
    q = self.maybe_shard(q, ("batch", "length", "heads", "kv"))
    k = self.maybe_shard(k, ("batch", "length", kv_axis, "kv"))
    v = self.maybe_shard(v, ("batch", "length", kv_axis, "kv"))
    return q, k, v

  def _scale_query(self, q: jax.Array) -> jax.Array:
    if self.internal_enable_per_dim_scale:
      return self.per_dim_scale(q)
    return (q * (1.0 / math.sqrt(self.head_dim))).astype(q.dtype)

  def _dot_atten(self, q, k, v, atten_mask, deterministic):
    """Attention of scaled q [B, T, N, H] over k, v [B, S, K, H] -> ([B, T, N, H], [B, N, T, S])."""
    b, t, n, h = q.shape
    s, kv = k.shape[1], k.shape[2]
    g = n // kv
    q = q.reshape(b, t, kv, g, h)  # [B, T, K, G, H]: head n = k * G + g
    logits = jnp.einsum("BTKGH,BSKH->BKGTS", q, k).astype(jnp.float32)  # [B, K, G, T, S]
    logits = logits.reshape(b, n, t, s)  # [B, N, T, S]
    if self.atten_logit_cap > 0.0:
      cap = jnp.float32(self.atten_logit_cap)
      logits = cap * jnp.tanh(logits / cap)
    if atten_mask.ndim != 4 or atten_mask.shape[1] not in (1, n):
      raise ValueError(f"atten_mask must be [B|1, 1|N, T|1, S], got {atten_mask.shape} for "
                       f"logits [B, N, T, S] = {logits.shape}.")
    # Dropped positions get the float32 large negative rather than logits + mask, so a mask in
    # another dtype cannot overflow or leave a dropped logit competitive.
    mask = atten_mask.astype(jnp.float32)
    keep = mask > 0.5 * large_negative_number(jnp.float32)
    logits = jnp.where(keep, logits + mask, large_negative_number(jnp.float32))
    probs = jax.nn.softmax(logits, axis=-1)  # [B, N, T, S], float32
    probs = self.atten_dropout(probs, deterministic=deterministic).astype(v.dtype)
    encoded = jnp.einsum("BKGTS,BSKH->BTKGH", probs.reshape(b, kv, g, t, s), v)
    return encoded.reshape(b, t, n, h), probs  # [B, T, N, H], [B, N, T, S]

  def _post_projection(self, encoded: jax.Array) -> jax.Array:
    encoded = checkpoint_name(encoded, "context")
    out = checkpoint_name(self.post(encoded), "out_proj")  # [B, T, D]
    return out

  # -- public ------------------------------------------------------------------------------------

  def __call__(self, query_vec: jax.Array, key_vec: jax.Array, value_vec: jax.Array,
               atten_mask: jax.Array, query_segment_pos: jax.Array | None = None,
               key_segment_pos: jax.Array | None = None,
               deterministic: bool = True) -> tuple[jax.Array, jax.Array]:
    """Attends from query_vec [B, T, D] over key_vec/value_vec [B, S, D].

    Args:
      query_vec: [B, T, D].
      key_vec: [B, S, D].
      value_vec: [B, S, D].
      atten_mask: additive mask broadcastable as [B, 1|N, T, S].
      query_segment_pos: [B, T] positions for the rotary embedding (default 0..T-1).
      key_segment_pos: [B, S] positions for the rotary embedding (default 0..S-1).
      deterministic: False applies attention dropout (needs a "dropout" rng).

    Returns:
      (encoded [B, T, D], probs [B, N, T, S]).
    """
    q, k, v = self._project_qkv(query_vec, key_vec, value_vec)
    if self.use_rotary_position_emb:
      if query_segment_pos is None:
        query_segment_pos = jnp.arange(q.shape[1])[None, :]
      if key_segment_pos is None:
        key_segment_pos = jnp.arange(k.shape[1])[None, :]
      q = self.rotary_position_emb(q, jnp.broadcast_to(query_segment_pos, q.shape[:2]))
      k = self.rotary_position_emb(k, jnp.broadcast_to(key_segment_pos, k.shape[:2]))
    if self.is_mutable_collection(DECODER_CACHE) and not self.is_initializing():
      self.put_variable(DECODER_CACHE, "key_state", k)  # [B, S, K, H]
      self.put_variable(DECODER_CACHE, "value_state", v)
    encoded, probs = self._dot_atten(self._scale_query(q), k, v, atten_mask, deterministic)
    out = self._post_projection(encoded)
    return self.maybe_shard(out, ("batch", "length", "embed")), probs

  def extend_step(self, query_vec: jax.Array, *, atten_mask: jax.Array, time_step: jax.Array,
                  segment_pos: jax.Array | None = None) -> jax.Array:
    """One decoding step of self-attention over the cache (apply with mutable decoder_cache).

    Args:
      query_vec: [B, D], the input at position `time_step`.
      atten_mask: additive mask [B|1, 1|N, S] over the cache positions; it must hide the
        positions after time_step (see extend_step_causal_mask).
      time_step: int scalar (may be traced): where this step's key/value is written.
      segment_pos: [B] rotary position of this step; default time_step.

    Returns:
      [B, D], what __call__ would give at position time_step.
    """
    if not self.has_variable(DECODER_CACHE, "key_state"):
      raise ValueError("DotProductAttention.extend_step found no decoder_cache: first apply the "
                       "layer to a [B, S, D] sequence (S = cache length) with "
                       "mutable=['decoder_cache'], then extend_step with mutable=['decoder_cache'].")
    x = query_vec[:, None, :]  # [B, 1, D]
    q, k, v = self._project_qkv(x, x, x)  # [B, 1, N|K, H]
    if self.use_rotary_position_emb:
      if segment_pos is None:
        segment_pos = jnp.full((q.shape[0],), time_step)
      q = self.rotary_position_emb(q, segment_pos[:, None])
      k = self.rotary_position_emb(k, segment_pos[:, None])
    key_state = self.get_variable(DECODER_CACHE, "key_state")  # [B, S, K, H]
    value_state = self.get_variable(DECODER_CACHE, "value_state")
    key_state = jax.lax.dynamic_update_slice_in_dim(key_state, k.astype(key_state.dtype),
                                                    time_step, axis=1)
    value_state = jax.lax.dynamic_update_slice_in_dim(value_state, v.astype(value_state.dtype),
                                                      time_step, axis=1)
    self.put_variable(DECODER_CACHE, "key_state", key_state)
    self.put_variable(DECODER_CACHE, "value_state", value_state)
    encoded, _ = self._dot_atten(self._scale_query(q), key_state, value_state,
                                 atten_mask[:, :, None, :], deterministic=True)
    return self._post_projection(encoded)[:, 0]  # [B, D]
