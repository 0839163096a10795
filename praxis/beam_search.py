"""Beam search over an `extend_step` function, with Pax's length normalization and EOS handling.

Like `praxis.layers.sample_decode`, the search knows nothing about layers. It is given a pure

    extend_fn(state, ids [B*K], time_step) -> (state, logits [B*K, V])

and the state after the prompt's prefill, whose arrays have the batch as their leading dim (a
KV cache [B, S, N, H], ...). The search repeats every array K times (beam b*K + k is
hypothesis k of row b) and reorders them whenever hypotheses are re-ranked.

Pax's rules (praxis/beam_search.py), per row:
  - A live hypothesis has a score, the sum of its tokens' log-probs. The first step starts from
    one hypothesis (the others are penalized out of the way).
  - At every step each live hypothesis offers one finished candidate: itself followed by EOS,
    scored sum(logprobs) / length_norm(n), n the number of generated tokens including the EOS
    and length_norm(n) = ((5 + n) / 5) ** length_norm_alpha. The K best finished candidates so far
    are kept.
  - The live hypotheses are then replaced by the K best non-EOS extensions (each hypothesis
    offers its `tokens_per_beam` best tokens first).
  - EOS may not be chosen before `min_decode_steps` tokens were generated; no token is
    generated after `max_decode_steps`.
  - The output is the K finished hypotheses, best first. A hypothesis that never emitted EOS is
    never finished (Pax's vanilla beam search), so a row may have fewer than K real results:
    the missing ones have score -1e9.
Prompts are left-aligned in the buffer with per-row lengths (as in sample_decode): a row inside
its prompt keeps the prompt token in all its hypotheses ("teacher forcing") and starts
searching at its own prompt's end; n counts that row's new tokens.

Shape letters: B batch, K beam_size, S buffer length (prompt + max_decode_steps), V vocabulary.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from praxis import decoder_utils
from praxis import pytypes

NestedMap = pytypes.NestedMap
ExtendFn = Callable[[Any, jax.Array, jax.Array], tuple[Any, jax.Array]]
# Pax's score of an unused slot; far below any real sum of log-probs.
NO_SCORE = -1e9


def _reorder(x: jax.Array, hyp_ids: jax.Array) -> jax.Array:
  """x [B, K, ...] -> x[b, hyp_ids[b, k], ...]."""
  return jnp.take_along_axis(x, hyp_ids.reshape(hyp_ids.shape + (1,) * (x.ndim - 2)), axis=1)


def _reorder_state(state: Any, hyp_ids: jax.Array) -> Any:
  """Reorders every [B*K, ...] array of the state by hyp_ids [B, K]; scalars stay."""
  batch, beam = hyp_ids.shape

  def one(x):
    if not hasattr(x, "ndim") or x.ndim == 0:
      return x
    grouped = x.reshape((batch, beam) + x.shape[1:])
    return _reorder(grouped, hyp_ids).reshape(x.shape)

  return jax.tree_util.tree_map(one, state)


def _repeat_state(state: Any, beam: int) -> Any:
  """Repeats every [B, ...] array of the state K times: [B*K, ...] (b*K + k)."""

  def one(x):
    if not hasattr(x, "ndim") or x.ndim == 0:
      return x
    return jnp.repeat(x, beam, axis=0)

  return jax.tree_util.tree_map(one, state)


def _top_candidates(
  hyp_scores: jax.Array, logprobs: jax.Array, beam: int, tokens_per_beam: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The K best extensions: (scores [B, K], parent hypothesis [B, K], token [B, K])."""
  tokens_per_beam = min(tokens_per_beam, logprobs.shape[-1])  # a vocabulary smaller than K
  per_hyp, tokens = jax.lax.top_k(logprobs, tokens_per_beam)  # [B, K, P] each
  totals = (hyp_scores[..., None] + per_hyp).reshape(hyp_scores.shape[0], -1)  # [B, K*P]
  scores, flat = jax.lax.top_k(totals, beam)  # [B, K]
  parents = flat // tokens_per_beam
  chosen = jnp.take_along_axis(tokens.reshape(tokens.shape[0], -1), flat, axis=1)
  return scores, parents, chosen.astype(jnp.int32)


def _merge_finished(finished: tuple, candidates: tuple, beam: int) -> tuple:
  """Keeps the K best of the finished hypotheses and the new candidates (by score)."""
  merged = [jnp.concatenate([a, b], axis=1) for a, b in zip(finished, candidates)]
  scores, order = jax.lax.top_k(merged[0], beam)
  return (scores,) + tuple(_reorder(x, order) for x in merged[1:])


def beam_search(
  extend_fn: ExtendFn,
  state: Any,
  ids: jax.Array,
  prefix_lengths: jax.Array,
  *,
  beam_size: int,
  max_decode_steps: int,
  eos_id: int | Sequence[int],
  length_norm_alpha: float = 0.8,
  min_decode_steps: int = 0,
  tokens_per_beam: int | None = None,
  pad_id: int = 0,
  output_id_offset: int = 0,
) -> NestedMap:
  """Runs the search (see the module docstring).

  Args:
    extend_fn: feeds one position of every hypothesis; `state` is threaded through it.
    state: the state after the prefill of `ids` (arrays with leading dim B).
    ids: [B, S] int, the prompts left-aligned; positions >= prefix_lengths are ignored.
    prefix_lengths: [B] int, each row's prompt length, at least 1.
    beam_size: K.
    max_decode_steps: the most new tokens per row (EOS included).
    eos_id: the token or tokens that finish a hypothesis.
    length_norm_alpha: exponent of Pax's length normalization.
    min_decode_steps: EOS is allowed only as new token number min_decode_steps + 1 or later.
    tokens_per_beam: candidates per hypothesis before the global top-K (default K).
    pad_id: written after a hypothesis's EOS.
    output_id_offset: added to every generated id.

  Returns:
    NestedMap with
      output_ids [B, K, S]: prompt, generated tokens (ending with EOS), then pad_id; best first;
      scores [B, K]: length-normalized scores (NO_SCORE where fewer than K hypotheses finished);
      decode_lengths [B, K]: prompt plus generated tokens, EOS included;
      logprobs [B, K, S]: each generated token's log-prob, 0 elsewhere;
      prefix_lengths [B, K].
  """
  eos_ids = tuple(eos_id) if isinstance(eos_id, Sequence) else (eos_id,)
  if not eos_ids:
    raise ValueError("beam_search needs an eos_id: hypotheses finish only with EOS.")
  if beam_size < 1 or max_decode_steps < 1:
    raise ValueError(
      f"beam_search needs beam_size >= 1 and max_decode_steps >= 1, got {beam_size} and "
      f"{max_decode_steps}."
    )
  batch, seqlen = ids.shape
  beam = beam_size
  per_beam = beam if tokens_per_beam is None else tokens_per_beam
  prefix_lengths = jnp.clip(prefix_lengths.astype(jnp.int32), 1, seqlen)  # [B]
  positions = jnp.arange(seqlen, dtype=jnp.int32)
  prompt = jnp.where(positions[None, :] < prefix_lengths[:, None], ids.astype(jnp.int32), pad_id)
  live_ids = jnp.repeat(prompt[:, None, :], beam, axis=1)  # [B, K, S]
  live_logprobs = jnp.zeros((batch, beam, seqlen), jnp.float32)
  # Only hypothesis 0 is real at the start: the others would repeat it.
  live_scores = jnp.broadcast_to(
    -jnp.arange(beam, dtype=jnp.float32) * -NO_SCORE, (batch, beam)
  )  # [B, K]
  finished = (
    jnp.full((batch, beam), NO_SCORE, jnp.float32),  # normalized scores
    live_ids,  # ids
    jnp.full((batch, beam), seqlen, jnp.int32),  # decode lengths
    live_logprobs,  # logprobs
  )
  state = _repeat_state(state, beam)
  eos_array = jnp.asarray(eos_ids, jnp.int32)

  def body(t, carry):
    live_ids, live_logprobs, live_scores, finished, state = carry
    step_ids = live_ids[:, :, t].reshape(-1)  # [B*K]
    state, logits = extend_fn(state, step_ids, t)
    logprobs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    logprobs = logprobs.reshape(batch, beam, -1)  # [B, K, V]
    pos = t + 1
    num_new = pos - prefix_lengths + 1  # [B]: new tokens if one is generated at pos
    searching = (num_new >= 1) & (num_new <= max_decode_steps)  # [B]
    # Rows still in their prompt copy it; rows past max_decode_steps stop changing.
    eos_ok = num_new > min_decode_steps  # [B]

    # Finished candidates: every live hypothesis followed by its best EOS.
    eos_logprobs = logprobs[:, :, eos_array]  # [B, K, E]
    best_eos = jnp.argmax(eos_logprobs, axis=-1)  # [B, K]
    eos_logprob = jnp.max(eos_logprobs, axis=-1)  # [B, K]
    norm = decoder_utils.length_norm(num_new, length_norm_alpha)[:, None]  # [B, 1]
    cand_scores = (live_scores + eos_logprob) / norm
    # Penalized start-up slots (and -inf extensions) are no hypotheses: they never finish.
    real = live_scores > NO_SCORE / 2  # [B, K]
    cand_scores = jnp.where((searching & eos_ok)[:, None] & real, cand_scores, NO_SCORE)
    cand_ids = live_ids.at[:, :, pos].set(eos_array[best_eos] + output_id_offset)
    cand_logprobs = live_logprobs.at[:, :, pos].set(eos_logprob)
    cand_lengths = jnp.broadcast_to((prefix_lengths + num_new)[:, None], (batch, beam))
    merged = _merge_finished(finished, (cand_scores, cand_ids, cand_lengths, cand_logprobs), beam)
    finished = tuple(
      jnp.where(searching.reshape((batch,) + (1,) * (new.ndim - 1)), new, old)
      for new, old in zip(merged, finished)
    )

    # Live hypotheses: the K best non-EOS extensions.
    no_eos = logprobs.at[:, :, eos_array].set(-jnp.inf)
    scores, parents, tokens = _top_candidates(live_scores, no_eos, beam, per_beam)
    parent_logprobs = _reorder(logprobs, parents)  # [B, K, V]
    token_logprobs = jnp.take_along_axis(parent_logprobs, tokens[..., None], axis=-1)[..., 0]
    identity = jnp.broadcast_to(jnp.arange(beam, dtype=jnp.int32), (batch, beam))
    parents = jnp.where(searching[:, None], parents, identity)
    new_ids = _reorder(live_ids, parents)
    new_logprobs = _reorder(live_logprobs, parents)
    in_prompt = (pos < prefix_lengths)[:, None]  # [B, 1]
    token = jnp.where(in_prompt, live_ids[:, :, pos], tokens + output_id_offset)
    write = in_prompt | searching[:, None]
    new_ids = new_ids.at[:, :, pos].set(jnp.where(write, token, new_ids[:, :, pos]))
    new_logprobs = new_logprobs.at[:, :, pos].set(
      jnp.where(searching[:, None], token_logprobs, new_logprobs[:, :, pos])
    )
    live_scores = jnp.where(searching[:, None], scores, live_scores)
    state = _reorder_state(state, parents)
    return new_ids, new_logprobs, live_scores, finished, state

  start = jnp.min(prefix_lengths) - 1
  stop = jnp.minimum(jnp.max(prefix_lengths) + max_decode_steps - 1, seqlen - 1)
  carry = (live_ids, live_logprobs, live_scores, finished, state)
  _, _, _, finished, _ = jax.lax.fori_loop(start, stop, body, carry)
  scores, out_ids, lengths, logprobs = finished
  # Clear anything after a hypothesis's end (unfinished slots keep only their prompt).
  ended = positions[None, None, :] >= lengths[..., None]
  return NestedMap(
    output_ids=jnp.where(ended, pad_id, out_ids),
    scores=scores,
    decode_lengths=lengths,
    logprobs=jnp.where(ended, 0.0, logprobs),
    prefix_lengths=jnp.broadcast_to(prefix_lengths[:, None], (batch, beam)),
  )
