"""GroupedQueryAttention: N query heads sharing K key/value heads (N % K == 0), einsum-based.

Shape letters: B batch, T query length, S key length, D model dim, N query heads, K key/value
heads, G = N // K query heads per key/value head, H dim per head.

Masks here are booleans where True means "masked out" (Pax's convention in this module, unlike
the additive masks of praxis.layers.attentions).
"""

from __future__ import annotations

from collections.abc import Sequence

from flax import linen as nn
import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import einsum
from praxis.layers import sharding as shd
from praxis import pytypes

SplitDimsMapping = base_layer.SplitDimsMapping


def causal_mask(seqlen: int) -> jax.Array:
  """[1, 1, T, T] bool: True where the key comes after the query."""
  mask = jnp.arange(seqlen)[:, None] < jnp.arange(seqlen)[None, :]
  return mask[None, None, :, :]


def segment_mask(segment_ids: jax.Array, src_segment_ids: jax.Array | None = None) -> jax.Array:
  """segment_ids [B, T], src_segment_ids [B, S] -> [B, 1, T, S] bool: True across segments."""
  if src_segment_ids is None:
    src_segment_ids = segment_ids
  return (segment_ids[..., :, None] != src_segment_ids[..., None, :])[:, None, :, :]


def attention_mask(segment_ids: jax.Array) -> jax.Array:
  """[B, 1, T, T] bool: causal and within-segment self-attention."""
  return jnp.logical_or(causal_mask(segment_ids.shape[1]), segment_mask(segment_ids))


def padding_mask(paddings: jax.Array) -> jax.Array:
  """paddings [B, T] (1.0 = padded) -> [B, 1, 1, T]."""
  return paddings[:, None, None, :]


def apply_mask(logits: jax.Array, atten_mask: jax.Array) -> jax.Array:
  """logits with a large negative number wherever atten_mask is True (broadcast)."""
  return jnp.where(atten_mask, py_utils.get_large_negative_number(logits.dtype), logits)


def apply_rope(
  inputs: jax.Array,
  min_timescale: int,
  max_timescale: int,
  position: jax.Array | None = None,
) -> jax.Array:
  """Rotary position embedding of inputs [B, S, ..., H] at positions [B, S].

  Pairs dim i with dim i + H/2 and rotates the pair by position / timescale_i, the timescales
  geometric from min_timescale to max_timescale.
  """
  dim = inputs.shape[-1]
  half = dim // 2
  timescale = min_timescale * (max_timescale / min_timescale) ** (2 * jnp.arange(half) / dim)
  timescale = jnp.expand_dims(timescale, tuple(range(inputs.ndim - 1)))  # [1, ..., H/2]
  if position is None:
    position = jnp.arange(inputs.shape[1])[None, :]
  position = jnp.expand_dims(position, tuple(range(2, inputs.ndim)))  # [B, S, 1, ...]
  angle = position / timescale
  sin, cos = jnp.sin(angle), jnp.cos(angle)
  first, second = jnp.split(inputs, 2, axis=-1)
  rotated_first = (first * cos - second * sin).astype(inputs.dtype)
  rotated_second = (second * cos + first * sin).astype(inputs.dtype)
  return jnp.concatenate([rotated_first, rotated_second], axis=-1)


def apply_dropout(
  x: jax.Array, prng_key: jax.Array, dropout_prob: float, broadcast_dims: Sequence[int] = ()
) -> jax.Array:
  """Inverted dropout of x, one draw shared along `broadcast_dims`."""
  if dropout_prob == 0.0:
    return x
  shape = [1 if d in broadcast_dims else x.shape[d] for d in range(x.ndim)]
  keep = jax.random.bernoulli(prng_key, 1.0 - dropout_prob, shape=shape)
  return x * keep / (1.0 - dropout_prob)


class GroupedQueryAttention(base_layer.BaseLayer):
  """Dot-product attention whose N query heads share K key/value heads in groups of N // K.

  Children (Pax's names): `query` (Einsum w [D, N, H]), `key` and `value` (w [D, K, H], or
  [D, H] when K == 1), `post` (w [D, N, H]); each with a bias b when use_bias.

  Attributes:
    input_dim: D.
    hidden_dim: unused (Pax's legacy field).
    num_heads: N.
    num_kv_heads: K; must divide N.
    dim_per_head: H.
    atten_dropout_prob: dropout on the attention probabilities while training.
    atten_temp: logits are divided by this temperature.
    use_bias: the projections have biases.
    atten_logit_cap: > 0 caps logits at cap * tanh(logits / cap).
    rope_min_max_timescales: (min, max) timescales of rotary embeddings on q and k; None: none.
  """

  input_dim: int = 0
  hidden_dim: int = 0
  num_heads: int = 1
  num_kv_heads: int = 1
  dim_per_head: int = 0
  atten_dropout_prob: float = 0.0
  atten_temp: float = 1.0
  use_bias: bool = True
  atten_logit_cap: float = 0.0
  rope_min_max_timescales: tuple[int, int] | None = None

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """dnh: the query and post weights; dkh: key and value weights (None: dnh's)."""

    dnh: SplitDimsMapping = None
    dkh: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """btd: inputs and outputs; btnh: projected queries; bskh: projected keys and values."""

    btd: SplitDimsMapping = None
    btnh: SplitDimsMapping = None
    bskh: SplitDimsMapping = None

  def _projection(self, name: str, num_heads: int, wt: SplitDimsMapping, post: bool = False):
    d, h = self.input_dim, self.dim_per_head
    if post:
      eqn, shape = "...NH,DNH->...D", (d, num_heads, h)
    elif num_heads == 1:
      eqn, shape, wt = "...D,DH->...H", (d, h), shd.derive(wt, "dnh->dh")
    else:
      eqn, shape = "...D,DNH->...NH", (d, num_heads, h)
    cfg = pax_fiddle.Config(
      einsum.Einsum,
      eqn=eqn,
      w_shape=shape,
      use_bias=self.use_bias,
      weight_split_dims_mapping=pax_fiddle.Config(einsum.Einsum.WeightSharding, wt=wt),
    )
    self.create_child(name, cfg)

  def setup(self) -> None:
    n, k = self.num_heads, self.num_kv_heads
    if not self.input_dim or not self.dim_per_head or n % k:
      raise ValueError(
        f"GroupedQueryAttention needs input_dim and dim_per_head set and num_heads % "
        f"num_kv_heads == 0; got input_dim={self.input_dim}, dim_per_head={self.dim_per_head}, "
        f"num_heads={n}, num_kv_heads={k}."
      )
    ws = self.weight_split_dims_mapping
    self._projection("query", n, ws.dnh)
    self._projection("key", k, ws.dkh or ws.dnh)
    self._projection("value", k, ws.dkh or ws.dnh)
    self._projection("post", n, ws.dnh, post=True)

  def _atten_context(
    self, query: jax.Array, key: jax.Array, value: jax.Array, atten_mask: jax.Array
  ) -> tuple[jax.Array, jax.Array]:
    """q [B, T, N, H], k / v [B, S, K, H], mask [B, 1 or N, T, S] -> ([B, T, N, H], probs)."""
    b, t, n, h = query.shape
    s, k = key.shape[1:3]
    query = query * (self.dim_per_head**-0.5) / self.atten_temp
    grouped = jnp.reshape(query, (b, t, k, n // k, h))  # [B, T, K, G, H]
    logits = jnp.einsum("BTKGH,BSKH->BKGTS", grouped, key)
    logits = checkpoint_name(logits, "logits")
    if self.atten_logit_cap and self.atten_logit_cap > 0.0:
      # Cap before masking: the tanh would also cap the large negative mask value.
      cap = jnp.array(self.atten_logit_cap, logits.dtype)
      logits = cap * jnp.tanh(logits / cap)
    logits = logits.astype(jnp.float32)  # the softmax always runs in float32
    if atten_mask.shape[1] == 1:
      atten_mask = atten_mask[:, :, None, :, :]  # [B, 1, 1, T, S]
    else:
      atten_mask = atten_mask.reshape((atten_mask.shape[0], k, n // k, t, s))
    probs = jax.nn.softmax(apply_mask(logits, atten_mask), axis=-1).astype(key.dtype)
    if self.atten_dropout_prob > 0.0 and not self.do_eval:
      probs = apply_dropout(probs, self.next_prng_key(), self.atten_dropout_prob)
    encoded = jnp.einsum("BKGTS,BSKH->BTKGH", probs, value)
    encoded = checkpoint_name(jnp.reshape(encoded, (b, t, n, h)), "context")
    return encoded, probs

  def _maybe_rope(self, x: jax.Array, position: jax.Array) -> jax.Array:
    if self.rope_min_max_timescales is None:
      return x
    min_ts, max_ts = self.rope_min_max_timescales
    return apply_rope(x, min_ts, max_ts, position)

  def _qkv(
    self, q_in: jax.Array, k_in: jax.Array, v_in: jax.Array, unshard_kv_d: bool
  ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Inputs [B, (T,) D] -> q [B, (T,) N, H], k / v [B, (S,) K, H]."""
    sh = self.activation_split_dims_mapping
    q_in = shd.shard(q_in, sh.btd, "btd->b[t]d")
    # unshard_kv_d: Pax leaves the kv inputs' D unsharded here (an XLA partitioner workaround).
    kv_eqn = "btd->b[t]x" if unshard_kv_d else "btd->b[t]d"
    k_in = shd.shard(k_in, sh.btd, kv_eqn)
    v_in = shd.shard(v_in, sh.btd, kv_eqn)
    q = shd.shard(checkpoint_name(self.query(q_in), "query_proj"), sh.btd, "btd->b[t]??")
    k = checkpoint_name(self.key(k_in), "key_proj")
    v = checkpoint_name(self.value(v_in), "value_proj")
    if self.num_kv_heads == 1:
      k = jnp.expand_dims(shd.shard(k, sh.btd, "btd->b[t]?"), -2)  # [B, (S,) 1, H]
      v = jnp.expand_dims(shd.shard(v, sh.btd, "btd->b[t]?"), -2)
    else:
      k = shd.shard(k, sh.btd, "btd->b[t]??")
      v = shd.shard(v, sh.btd, "btd->b[t]??")
    q = shd.shard(q, sh.btnh, "btnh->b[t]nh")
    kv_eqn = "bskh->b[s]1h" if self.num_kv_heads == 1 else "bskh->b[s]kh"
    return q, shd.shard(k, sh.bskh, kv_eqn), shd.shard(v, sh.bskh, kv_eqn)

  def __call__(
    self,
    query_vec: jax.Array,
    key_vec: jax.Array,
    value_vec: jax.Array,
    atten_mask: jax.Array,
    query_segment_pos: jax.Array,
    key_segment_pos: jax.Array,
  ) -> tuple[jax.Array, jax.Array]:
    """query_vec [B, T, D], key_vec / value_vec [B, S, D], atten_mask bool [B/1, 1, T/1, S]
    (True = masked), positions [B, T] and [B, S] -> (encoded [B, T, D], probs [B, K, G, T, S]).

    Also stores the projected keys and values as decode state key_state / value_state.
    """
    q, k, v = self._qkv(query_vec, key_vec, value_vec, unshard_kv_d=True)
    q = self._maybe_rope(q, query_segment_pos)
    k = self._maybe_rope(k, key_segment_pos)
    self.update_decode_state("key_state", k)
    self.update_decode_state("value_state", v)
    k = shd.shard_one_dim(k, None, dim=1)  # the whole key sequence on every shard
    v = shd.shard_one_dim(v, None, dim=1)
    atten_mask = shd.shard_one_dim(atten_mask, None, dim=3)
    encoded, probs = self._atten_context(q, k, v, atten_mask)
    sh = self.activation_split_dims_mapping
    encoded = self.post(shd.shard(encoded, sh.btnh))  # [B, T, D]
    return checkpoint_name(shd.shard(encoded, sh.btd), "out_proj"), probs

  def _kv_state_sharding(self, state: jax.Array) -> jax.Array:
    eqn = "bskh->bs1h" if self.num_kv_heads == 1 else None
    return shd.shard(state, self.activation_split_dims_mapping.bskh, eqn)

  @nn.nowrap
  def extend_decode_state(self, name: str, value: jax.Array, time_step: jax.Array) -> jax.Array:
    """Writes value [B, K, H] at time_step of the [B, S, K, H] decode state `name`."""
    state = self.get_decode_state(name)
    if state is None:
      raise ValueError(
        f"GroupedQueryAttention has no decode state {name!r}: run the layer over the prefix "
        "with mutable=[DECODE_CACHE] before extend_step."
      )
    start = [0] * state.ndim
    start[1] = time_step.astype(jnp.int32)
    update = jnp.expand_dims(value, 1).astype(state.dtype)  # [B, 1, K, H]
    new_state = self._kv_state_sharding(jax.lax.dynamic_update_slice(state, update, start))
    self.update_decode_state(name, new_state)
    return new_state

  def extend_step(
    self,
    query_vec: jax.Array,
    *,
    atten_mask: jax.Array,
    time_step: jax.Array,
    segment_pos: jax.Array | None,
    is_cross_attention: bool = False,
  ) -> jax.Array:
    """One decoding step: query_vec [B, D], atten_mask bool [B/1, 1, S] -> [B, D].

    time_step: scalar slot of the KV cache to write; segment_pos [B] (None: time_step) is the
    rotary position. Cross-attention reads the cache without writing it.
    """
    time_step = jnp.asarray(time_step)
    if time_step.ndim != 0:
      raise ValueError(f"extend_step time_step must be a scalar, got shape {time_step.shape}.")
    q, k, v = self._qkv(query_vec, query_vec, query_vec, unshard_kv_d=False)
    if segment_pos is None:
      position = jnp.broadcast_to(time_step, [query_vec.shape[0]])[:, None]  # [B, 1]
    else:
      position = segment_pos[:, None]
    q = self._maybe_rope(q, position)
    k = self._maybe_rope(k, position)
    if not is_cross_attention:
      self.extend_decode_state("key_state", k, time_step)
      self.extend_decode_state("value_state", v, time_step)
    encoded, _ = self._atten_context(
      q[:, None],  # [B, 1, N, H]
      self.get_decode_state("key_state"),
      self.get_decode_state("value_state"),
      atten_mask[:, :, None, :],  # [B, 1, 1, S]
    )
    sh = self.activation_split_dims_mapping
    encoded = shd.shard(shd.shard(encoded, sh.btnh), sh.btd, "btd->bt??")
    encoded = shd.shard(self.post(encoded), sh.btd)  # [B, 1, D]
    return jnp.squeeze(encoded, 1)

  def decoding_state_sequence_length(self) -> int:
    """S, the length of the KV cache."""
    return self.get_decode_state("key_state").shape[1]

  def transform_decode_state(self, transform_fn) -> None:
    """Applies transform_fn(state, batch_dim=0, time_dim=1) to every decode-state array."""
    for name, state in self.variables[base_layer.DECODE_CACHE].items():
      if isinstance(state, jax.Array):
        self.update_decode_state(name, self._kv_state_sharding(transform_fn(state, 0, 1)))


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
