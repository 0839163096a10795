"""Pax's `praxis.gshard_utils`: the mixture-of-experts gating functions, same names and arguments.

A gating function turns router logits into the two tensors that move tokens to experts and back:
  dispatch [G, S, E, C]: 1 where token s of group g takes slot c of expert e;
  combine  [G, S, E, C]: the gate weight of that token for that expert at that slot.
(expert_choice gives [G, E, C] gates and a [G, E, C, S] one-hot instead.)

Letters: G routing groups, S tokens per group, E experts, C slots per expert (the capacity).

Top-2 (GShard, arXiv:2006.16668, Algorithm 2): each token goes to its best expert and to a second
one (greedy, sampled, or kept at random); an expert takes tokens in group order until its C slots
are full, first choices before second choices; overflowing tokens are dropped for that expert.
The load-balancing aux loss is E^2 * mean_e(mean_s(gates[:, e]) * fraction of tokens whose first
choice is e), 1.0 when routing is uniform.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def cum_sum(elements: jax.Array, axis: int = 0, exclusive: bool = False, reverse: bool = False):
  """tf.cumsum's options on jnp.cumsum: `exclusive` starts at 0, `reverse` sums from the end."""
  if reverse:
    elements = jnp.flip(elements, axis=axis)
  out = jnp.cumsum(elements, axis=axis)
  if exclusive:
    out = out - elements
  return jnp.flip(out, axis=axis) if reverse else out


def top_k(x: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """The k largest entries of the last dim and their indices, in ascending order (as Pax's)."""
  vals, idxs = jax.lax.top_k(x, k)
  return jnp.flip(vals, -1), jnp.flip(idxs, -1)


def _over_capacity_ratio(mask, position_in_expert, capacity) -> jax.Array:
  """The fraction of routed tokens whose slot is past the capacity (a summary)."""
  over = jnp.sum(jnp.greater_equal(mask * position_in_expert, capacity)).astype(jnp.float32)
  return over / jnp.maximum(1.0, jnp.sum(mask).astype(jnp.float32))


def _cap_logits(logits: jax.Array, gating_logit_cap: float) -> jax.Array:
  if gating_logit_cap > 0.0:
    cap = jnp.asarray(gating_logit_cap, logits.dtype)
    logits = cap * jnp.tanh(logits / cap)
  return logits


def _auto_capacity(expert_capacity_dim, capacity_factor, group_size: int, experts_dim: int) -> int:
  """Pax's rule: C grows to int(S * factor / E), rounded up to a multiple of 4, when larger."""
  capacity = expert_capacity_dim or 1
  if capacity_factor:
    auto = int(group_size * capacity_factor / experts_dim)
    if capacity < auto:
      capacity = (auto + 3) // 4 * 4
  return int(capacity)


def _slots(gate, index, position, experts_dim: int, capacity: int) -> jax.Array:
  """[G, S, E, C] with `gate` at (index, position) of each token: one choice's combine part."""
  a = jnp.expand_dims(gate, -1) * jax.nn.one_hot(index, experts_dim, dtype=jnp.float32)  # [G,S,E]
  b = jax.nn.one_hot(position.astype(jnp.int32), capacity, dtype=jnp.float32)  # [G, S, C]
  return jnp.einsum("GSE,GSC->GSEC", a, b)


def top2_gating_on_logits(
  paddings,
  logits,
  experts_dim,
  expert_capacity_dim,
  fprop_dtype,
  prng_key=None,
  second_expert_policy="all",
  second_expert_threshold=0.0,
  legacy_mtf_behavior=True,
  capacity_factor=None,
  importance=None,
  mask_dtype=jnp.int32,
  gating_logit_cap=0.0,
):
  """GShard top-2 gating: logits [G, S, E] (paddings [G, S]) -> (aux_loss, combine, dispatch,
  summaries).

  second_expert_policy: 'all' (greedy second choice), 'sampling' (second choice sampled from the
  softmax without the first, by the Gumbel-max trick) or 'random' (the greedy second choice is
  kept with probability gate_2 / second_expert_threshold); the last two need `prng_key`.
  legacy_mtf_behavior: renormalise the two gates before capacity drops (Mesh TensorFlow's), and
  average densities over all S tokens; otherwise renormalise after drops and average over the
  non-padded tokens.
  capacity_factor: C is at least int(S * capacity_factor / E) (see _auto_capacity).
  importance: [G, S]; only tokens of importance 1 get a first choice (paddings are then ignored).
  summaries: (over_capacity_1, over_capacity_2, dispatch_0, dispatch_1, dispatch_2), the ratios
  of first / second choices dropped and the counts of tokens sent to 0, 1 and 2 experts.
  """
  if not (capacity_factor or expert_capacity_dim):
    raise ValueError("top2 gating needs capacity_factor or expert_capacity_dim; set one.")
  if second_expert_policy not in ("all", "sampling", "random"):
    raise ValueError(
      f"second_expert_policy {second_expert_policy!r} is not one of 'all', 'sampling', 'random'."
    )
  if second_expert_policy != "all" and prng_key is None:
    raise ValueError(f"second_expert_policy {second_expert_policy!r} needs a prng_key.")
  mask_dtype = mask_dtype or fprop_dtype
  logits = _cap_logits(logits.astype(jnp.float32), gating_logit_cap)
  raw_gates = jax.nn.softmax(logits, axis=-1)  # [G, S, E]
  capacity = _auto_capacity(expert_capacity_dim, capacity_factor, logits.shape[1], experts_dim)

  index_1 = jnp.argmax(raw_gates, axis=-1)  # [G, S]
  mask_1 = jax.nn.one_hot(index_1, experts_dim, dtype=mask_dtype)  # [G, S, E]
  density_1_proxy = raw_gates
  if importance is not None:
    keep = jnp.expand_dims(jnp.equal(importance, 1.0), -1)
    mask_1 *= keep.astype(mask_1.dtype)
    density_1_proxy *= keep.astype(density_1_proxy.dtype)
  else:
    importance = jnp.ones(mask_1.shape[:2], fprop_dtype)
    if paddings is not None:
      nonpaddings = 1.0 - paddings
      mask_1 *= jnp.expand_dims(nonpaddings, -1).astype(mask_1.dtype)
      density_1_proxy *= jnp.expand_dims(nonpaddings, -1).astype(density_1_proxy.dtype)
      importance = nonpaddings

  gate_1 = jnp.einsum("GSE,GSE->GS", raw_gates, mask_1.astype(raw_gates.dtype))
  gates_without_top_1 = raw_gates * (1.0 - mask_1.astype(raw_gates.dtype))  # [G, S, E]

  if second_expert_policy == "sampling":
    prng_key, subkey = jax.random.split(prng_key)
    gumbel = -jnp.log(-jnp.log(jax.random.uniform(subkey, logits.shape, logits.dtype)))
    # The first choice's logit becomes very negative so that it is never sampled again.
    very_negative = jnp.full_like(logits, -0.7 * np.finfo(np.float32).max)
    index_2 = jnp.argmax(jnp.where(mask_1 > 0, very_negative, logits) + gumbel, axis=-1)
  else:
    index_2 = jnp.argmax(gates_without_top_1, axis=-1)  # [G, S]
  mask_2 = jax.nn.one_hot(index_2, experts_dim, dtype=mask_dtype)
  if paddings is not None:
    mask_2 *= jnp.expand_dims(importance > 0.0, -1).astype(mask_2.dtype)
  gate_2 = jnp.einsum("GSE,GSE->GS", gates_without_top_1, mask_2.astype(raw_gates.dtype))

  if legacy_mtf_behavior:
    denom = gate_1 + gate_2 + 1e-9
    gate_1, gate_2 = gate_1 / denom, gate_2 / denom

  # Slot of each first choice: how many earlier tokens of the group chose the same expert.
  position_in_expert_1 = cum_sum(mask_1, exclusive=True, axis=-2)  # [G, S, E]
  if legacy_mtf_behavior:
    density_denom = jnp.asarray(1.0, jnp.float32)
  else:
    density_denom = jnp.mean(importance, axis=1, dtype=jnp.float32)[:, None] + 1e-6
  density_1 = jnp.mean(mask_1.astype(jnp.float32), axis=-2) / density_denom  # [G, E]
  density_1_proxy = jnp.mean(density_1_proxy, axis=-2, dtype=jnp.float32) / density_denom
  aux_loss = jnp.mean(density_1_proxy * density_1, dtype=jnp.float32) * experts_dim * experts_dim

  over_capacity_1 = _over_capacity_ratio(mask_1, position_in_expert_1, capacity)
  mask_1 *= jnp.less(position_in_expert_1, capacity).astype(mask_1.dtype)
  position_in_expert_1 = jnp.einsum("GSE,GSE->GS", position_in_expert_1, mask_1)
  mask_1_count = jnp.einsum("GSE->GE", mask_1)  # first choices each expert took
  mask_1_flat = jnp.sum(mask_1, axis=-1, dtype=mask_dtype)  # [G, S]: 0 where dropped

  if second_expert_policy == "random":
    prng_key, subkey = jax.random.split(prng_key)
    sampled_2 = jnp.less(
      jax.random.uniform(subkey, gate_2.shape, gate_2.dtype),
      gate_2 / max(second_expert_threshold, 1e-9),
    )
    gate_2 *= sampled_2.astype(gate_2.dtype)
    mask_2 *= jnp.expand_dims(sampled_2, -1).astype(mask_2.dtype)

  # Second choices queue behind all first choices of their expert.
  position_in_expert_2 = cum_sum(mask_2, exclusive=True, axis=-2) + mask_1_count[:, None, :]
  over_capacity_2 = _over_capacity_ratio(mask_2, position_in_expert_2, capacity)
  mask_2 *= jnp.less(position_in_expert_2, capacity).astype(mask_2.dtype)
  position_in_expert_2 = jnp.einsum("GSE,GSE->GS", position_in_expert_2, mask_2)
  mask_2_flat = jnp.sum(mask_2, axis=-1, dtype=mask_dtype)

  gate_1 *= mask_1_flat.astype(gate_1.dtype)
  gate_2 *= mask_2_flat.astype(gate_2.dtype)
  if not legacy_mtf_behavior:
    denom = gate_1 + gate_2
    denom = jnp.where(denom > 0, denom, jnp.ones_like(denom))
    gate_1, gate_2 = gate_1 / denom, gate_2 / denom

  combine = _slots(
    gate_1 * mask_1_flat, index_1, position_in_expert_1, experts_dim, capacity
  ) + _slots(gate_2 * mask_2_flat, index_2, position_in_expert_2, experts_dim, capacity)

  experts_per_token = jnp.sum(combine.astype(bool).astype(jnp.int32), [-2, -1])  # [G, S]
  dispatch_0 = jnp.sum(experts_per_token == 0)
  if paddings is not None:  # padded tokens are not counted as dropped
    dispatch_0 -= jnp.sum(paddings.astype(jnp.int32))
  dispatch_1 = jnp.sum(experts_per_token == 1)
  dispatch_2 = jnp.sum(experts_per_token == 2)
  dispatch = combine.astype(bool).astype(fprop_dtype)
  summaries = (over_capacity_1, over_capacity_2, dispatch_0, dispatch_1, dispatch_2)
  return aux_loss, combine.astype(fprop_dtype), dispatch, summaries


def expert_choice_gating_on_logits(
  logits, experts_dim, expert_capacity_dim, fprop_dtype, capacity_factor=None, mask_dtype=jnp.int32
):
  """Expert choice (arXiv:2202.09368): each expert takes its int(S // E * capacity_factor)
  best-scoring tokens. logits [G, S, E] -> (0.0, gates [G, E, C], one-hot [G, E, C, S]).

  The capacity comes from capacity_factor alone (Pax's; expert_capacity_dim is not read).
  """
  del expert_capacity_dim
  if not capacity_factor:
    raise ValueError("expert_choice gating needs capacity_factor > 0 (C = S // E * factor).")
  raw_gates = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(fprop_dtype)
  group_size = logits.shape[1]
  bucket_size = int(group_size // experts_dim * capacity_factor)
  gates, indices = top_k(jnp.transpose(raw_gates, [0, 2, 1]), bucket_size)  # [G, E, C]
  perm = jax.nn.one_hot(indices, group_size, dtype=mask_dtype)  # [G, E, C, S]
  return jnp.asarray(0.0, fprop_dtype), gates, perm


def expert_choice_gating_on_logits_v2(
  paddings,
  logits,
  experts_dim,
  expert_capacity_dim,
  fprop_dtype,
  capacity_factor=None,
  mask_dtype=jnp.int32,
  gating_logit_cap=0.0,
):
  """Expert choice over non-padded tokens, in GShard's [G, S, E, C] layout: each expert picks its
  C best tokens by gate (padded tokens score 0 and are never dispatched); a token's slot in an
  expert follows token order. Returns (0.0, combine, dispatch)."""
  mask_dtype = mask_dtype or fprop_dtype
  logits = _cap_logits(logits.astype(jnp.float32), gating_logit_cap)
  gates = jax.nn.softmax(logits, axis=-1)  # [G, S, E]
  nonpaddings = jnp.ones(logits.shape[:2], logits.dtype)
  if paddings is not None:
    nonpaddings = 1.0 - paddings.astype(logits.dtype)
  scores = jnp.transpose(gates * nonpaddings[..., None], [0, 2, 1])  # [G, E, S]
  group_size = logits.shape[1]
  capacity = int(expert_capacity_dim or 0)
  if capacity_factor is not None:
    capacity = _auto_capacity(capacity, capacity_factor, group_size, experts_dim)
  _, token_indices = top_k(scores, capacity)  # [G, E, C]
  # [G, S, E]: 1 where expert e picked token s (and s is not padding).
  chosen = jnp.sum(jax.nn.one_hot(token_indices, group_size, dtype=mask_dtype), axis=2)  # [G,E,S]
  chosen = jnp.transpose(chosen, [0, 2, 1]) * nonpaddings[..., None].astype(mask_dtype)
  position = cum_sum(chosen, exclusive=True, axis=-2)  # [G, S, E]
  position *= jnp.less(position, capacity).astype(position.dtype) * chosen
  slot = jax.nn.one_hot(position, capacity, dtype=jnp.float32) * chosen[..., None]  # [G,S,E,C]
  combine = (gates * chosen)[..., None] * slot
  dispatch = combine.astype(bool).astype(fprop_dtype)
  return jnp.asarray(0.0, fprop_dtype), combine.astype(fprop_dtype), dispatch


def compute_gating(
  paddings,
  logits,
  experts_dim,
  expert_capacity_dim,
  fprop_dtype,
  gating_func="top2",
  prng_key=None,
  second_expert_policy="all",
  second_expert_threshold=0.0,
  legacy_mtf_behavior=True,
  capacity_factor=None,
  mask_dtype=jnp.int32,
  gating_logit_cap=0.0,
):
  """Dispatches to the gating named by `gating_func`: 'top2', 'expert_choice' or
  'expert_choice_v2' (see each for what it returns)."""
  if gating_func == "top2":
    return top2_gating_on_logits(
      paddings=paddings,
      logits=logits,
      experts_dim=experts_dim,
      expert_capacity_dim=expert_capacity_dim,
      fprop_dtype=fprop_dtype,
      prng_key=prng_key,
      second_expert_policy=second_expert_policy,
      second_expert_threshold=second_expert_threshold,
      legacy_mtf_behavior=legacy_mtf_behavior,
      capacity_factor=capacity_factor,
      mask_dtype=mask_dtype,
      gating_logit_cap=gating_logit_cap,
    )
  if gating_func == "expert_choice":
    return expert_choice_gating_on_logits(
      logits, experts_dim, expert_capacity_dim, fprop_dtype, capacity_factor, jnp.int32
    )
  if gating_func == "expert_choice_v2":
    return expert_choice_gating_on_logits_v2(
      paddings, logits, experts_dim, expert_capacity_dim, fprop_dtype, capacity_factor, jnp.int32
    )
  raise ValueError(
    f"gating_func {gating_func!r} is not one of 'top2', 'expert_choice', 'expert_choice_v2'."
  )
