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

import flax.linen as nn
import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import decoder_hparams
from praxis import decoder_utils
from praxis import pytypes

NestedMap = pytypes.NestedMap
JTensor = pytypes.JTensor
BeamSearchHParams = decoder_hparams.BeamSearchHParams
# The K best finished hypotheses of each row: ids [B, K, T], lengths [B, K], scores [B, K],
# per-token log-probs [B, K, T].
GlobalBeam = tuple[JTensor, JTensor, JTensor, JTensor]
# (logits [B*K, V], model, extend ids [B*K], segment_pos [B*K], loop state) -> log-probs [B*K, V].
ComputeLogprobsFn = Callable[[JTensor, Any, JTensor, JTensor, NestedMap], JTensor]


def update_global_beam(end_hyps: GlobalBeam, cur_hyps: GlobalBeam) -> GlobalBeam:
  """Keeps the K best (by score) of the K finished hypotheses and M new ones, best first."""
  end_ids, end_lengths, end_scores, end_logprobs = end_hyps
  cur_ids, cur_lengths, cur_scores, cur_logprobs = cur_hyps
  k = end_ids.shape[1]
  ids = jnp.concatenate([end_ids, cur_ids], axis=1)  # [B, K+M, T]
  lengths = jnp.concatenate([end_lengths, cur_lengths], axis=1)  # [B, K+M]
  scores = jnp.concatenate([end_scores, cur_scores], axis=1)  # [B, K+M]
  logprobs = jnp.concatenate([end_logprobs, cur_logprobs], axis=1)  # [B, K+M, T]
  best_scores, best = jax.lax.top_k(scores, k)  # [B, K]
  pick = lambda x: jnp.take_along_axis(x, best.reshape(best.shape + (1,) * (x.ndim - 2)), axis=1)
  return pick(ids), pick(lengths), best_scores, pick(logprobs)


def shuffle_state(x: JTensor, hyp_id: JTensor, use_one_hot_matmul: bool = False) -> JTensor:
  """x [B, K, ...] reordered along the beam: x[b, hyp_id[b, k]]; anything of rank < 2 (or not
  an array) is returned as it is. `use_one_hot_matmul` does it as a one-hot einsum (the same
  values; a matmul is what some accelerators gather fastest)."""
  if not isinstance(x, jax.Array) or x.ndim < 2:
    return x
  if use_one_hot_matmul:
    one_hot = jax.nn.one_hot(hyp_id, x.shape[1], dtype=x.dtype)  # [B, K', K]
    return jnp.einsum("bk...,bjk->bj...", x, one_hot)
  return _reorder(x, hyp_id)


def broadcast_beam_dim(x: JTensor, beam_dim: int, beam_size: int) -> JTensor:
  """`beam_size` copies of x along a new axis `beam_dim`."""
  return jnp.repeat(jnp.expand_dims(x, beam_dim), beam_size, axis=beam_dim)


def default_compute_logprobs_fn(logits, model, extend_ids, segment_pos, decode_loop_state):
  """Pax's default ComputeLogprobsFn: log_softmax of the logits."""
  del model, extend_ids, segment_pos, decode_loop_state
  return jax.nn.log_softmax(logits)


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


def beam_search_over_fn(
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


# -- Pax's beam search over a bound model (LanguageModel.decode with BeamSearchHParams) -----------


def beam_search(
  model: Any,
  extend_step_fn: Callable,
  fprop_fn: Callable,
  transform_state_fn: Callable,
  prefix_ids: JTensor,
  prefix_paddings: JTensor,
  beam_search_hparams: BeamSearchHParams,
  compute_logprobs_fn: ComputeLogprobsFn = default_compute_logprobs_fn,
  decode_loop_mesh_axes_transpose: dict[str, str] | None = None,
  model_var_pspecs: Any = None,
  process_result_fn: Callable | None = None,
  lazy_broadcast_prefix_fn: Callable | None = None,
) -> NestedMap:
  """Pax's vanilla beam search: prefill with `fprop_fn`, then `beam_search_after_prefix_fprop`.

  `model` is the bound model whose decode cache the loop carries; `extend_step_fn(model, ids
  [B*K], segment_pos [B*K])` (or with a 4th `decode_loop_state` argument) returns logits
  [B*K, V]; `transform_state_fn(model, fn)` applies fn(x, batch_dim, time_dim) to the cache.
  prefix_ids / prefix_paddings [B, P] are the prompts, right-aligned (Pax's fprop_for_prefix).
  """
  if decode_loop_mesh_axes_transpose:
    raise NotImplementedError(
      "beam_search: decode_loop_mesh_axes_transpose is not implemented in this praxis; leave it "
      "None."
    )
  del model_var_pspecs  # Only used with the mesh transpose.
  fprop_fn(model, prefix_ids, prefix_paddings)
  result = beam_search_after_prefix_fprop(
    model,
    extend_step_fn,
    transform_state_fn,
    prefix_ids,
    prefix_paddings,
    beam_search_hparams,
    compute_logprobs_fn,
    lazy_broadcast_prefix_fn,
  )
  if process_result_fn is not None:
    result = process_result_fn(model, result)
  return result


def _reshape_beam(x: JTensor, batch_dim: int, beam: int) -> JTensor:
  """[..., B*K, ...] -> [..., B, K, ...] at batch_dim."""
  shape = list(x.shape)
  shape[batch_dim : batch_dim + 1] = [x.shape[batch_dim] // beam, beam]
  return x.reshape(shape)


def beam_search_after_prefix_fprop(
  model: Any,
  extend_step_fn: Callable,
  transform_state_fn: Callable,
  prefix_ids: JTensor,
  prefix_paddings: JTensor,
  beam_search_hparams: BeamSearchHParams,
  compute_logprobs_fn: ComputeLogprobsFn = default_compute_logprobs_fn,
  lazy_broadcast_prefix_fn: Callable | None = None,
) -> NestedMap:
  """The search once the cache holds the prompts (see `beam_search`).

  Per row, K live hypotheses (one at the start: the others begin 1e9 apart) are extended by
  one token per step. Each step every live hypothesis also offers "itself + EOS" (the best of
  the EOS ids) as a finished candidate scored sum(logprobs) / length_norm(new tokens); the K
  best finished candidates are kept. EOS is not allowed before `min_decode_steps` new tokens,
  and with `early_exit` False EOS never extends a live hypothesis (it only finishes it); with
  `early_exit` True it may, a hypothesis that did is `done`, and the loop ends once every one
  is. The loop stops after `max_decode_steps` (a list: several stops, the cache padded between
  them).

  Returns NestedMap: output_ids [B, K, S] (the finished hypotheses, best first, left-aligned:
  prompt then new tokens, S = P + max steps), scores [B, K] (normalized), logprobs [B, K, S]
  (each new token's log-prob, 1.0 for the prompt, 0 after the end), decode_lengths [B, K],
  prefix_lengths [B, K], original_lengths [B, K], prefix_ids [B, 1, P], done [B, K] (the live
  hypotheses' flags), hyp_ids [B, K] (the last reordering), segment_pos [B*K].
  """
  hp = beam_search_hparams
  if hp.max_decode_steps is None:
    raise ValueError("BeamSearchHParams.max_decode_steps must be set: it sizes the output.")
  stops = sorted(
    [hp.max_decode_steps] if isinstance(hp.max_decode_steps, int) else hp.max_decode_steps
  )
  beam = hp.beam_size
  batch, max_prefix_len = prefix_ids.shape
  eos_ids = (
    []
    if hp.eos_id is None
    else (list(hp.eos_id) if isinstance(hp.eos_id, Sequence) else [hp.eos_id])
  )
  if not eos_ids:
    raise ValueError("BeamSearchHParams.eos_id must be set: hypotheses finish only with EOS.")
  seq_len = stops[-1] + max_prefix_len
  tokens_per_beam = beam if hp.tokens_per_beam is None else hp.tokens_per_beam

  if lazy_broadcast_prefix_fn is not None:
    # The prompt stays shared; the last prompt position is fed again as the first step.
    transform_state_fn(model, decoder_utils.slice_state_fn(0, -1))
    lazy_broadcast_prefix_fn(model, beam, stops[0] + 1)
  else:
    transform_state_fn(model, decoder_utils.pad_state_fn(stops[0]))
    transform_state_fn(model, lambda x, b, t: jnp.repeat(x, beam, axis=b))

  prefix_lengths = jnp.sum(1 - prefix_paddings.astype(jnp.int32), axis=1)  # [B]
  prefix_lengths = broadcast_beam_dim(prefix_lengths, 1, beam)  # [B, K]
  prefix_ids = broadcast_beam_dim(prefix_ids, 1, beam)  # [B, K, P]
  output_ids = (
    jnp.zeros((batch, beam, seq_len), jnp.int32).at[:, :, :max_prefix_len].set(prefix_ids)
  )
  val = NestedMap(
    output_ids=output_ids,
    end_ids=output_ids,
    end_scores_norm=jnp.full((batch, beam), NO_SCORE, jnp.float32),
    # Only hypothesis 0 is live at the start.
    hyp_scores=jnp.broadcast_to(-jnp.arange(beam, dtype=jnp.float32) * 1e9, (batch, beam)),
    hyp_ids=jnp.zeros((batch, beam), jnp.int32),
    logprobs=jnp.ones((batch, beam, seq_len), jnp.float32),
    end_logprobs=jnp.zeros((batch, beam, seq_len), jnp.float32),
    done=jnp.zeros((batch, beam), jnp.bool_),
    step=max_prefix_len - 1,
    segment_pos=(prefix_lengths - 1).reshape(batch * beam),
    end_decode_lengths=jnp.full((batch, beam), seq_len, jnp.int32),
  )
  extend = decoder_utils.coerce_to_expanded_extend_step_fn(extend_step_fn)

  def cond_for(stop):
    def cond(model, val):
      del model
      going = val.step < min(seq_len - 1, max_prefix_len + stop - 1)
      return jnp.logical_and(going, jnp.logical_not(jnp.all(val.done))) if hp.early_exit else going

    return cond

  def body(model, val):
    step = val.step
    extend_ids = val.output_ids[:, :, step].reshape(-1)  # [B*K]
    logits = extend(model, extend_ids, val.segment_pos, val)  # [B*K, V]
    logprobs = compute_logprobs_fn(
      logits.astype(jnp.float32), model, extend_ids, val.segment_pos, val
    )
    logprobs = logprobs.reshape(batch, beam, -1)  # [B, K, V]
    if hp.min_decode_steps > 0:
      too_early = step < max_prefix_len - 1 + hp.min_decode_steps
      blocked = logprobs.at[:, :, jnp.asarray(eos_ids)].set(-1e20)
      logprobs = jnp.where(too_early, blocked, logprobs)

    # Every live hypothesis + its best EOS is a finished candidate.
    eos_scores = jnp.full((batch, beam), NO_SCORE, jnp.float32)
    cand_ids, cand_logprobs = val.output_ids, val.logprobs
    for eos in eos_ids:
      score = val.hyp_scores + logprobs[:, :, eos]  # [B, K]
      better = score > eos_scores
      eos_scores = jnp.maximum(eos_scores, score)
      cand_ids = cand_ids.at[:, :, step + 1].set(jnp.where(better, eos, cand_ids[:, :, step + 1]))
      cand_logprobs = cand_logprobs.at[:, :, step + 1].set(
        jnp.where(better, logprobs[:, :, eos], cand_logprobs[:, :, step + 1])
      )
    new_tokens = step + 2 - max_prefix_len
    cand_lengths = new_tokens + prefix_lengths  # [B, K]
    cand_scores = eos_scores / decoder_utils.length_norm(
      jnp.asarray(new_tokens), hp.length_norm_alpha
    )
    val.end_ids, val.end_decode_lengths, val.end_scores_norm, val.end_logprobs = update_global_beam(
      (val.end_ids, val.end_decode_lengths, val.end_scores_norm, val.end_logprobs),
      (cand_ids, cand_lengths, cand_scores, cand_logprobs),
    )

    # The K best extensions (EOS kept out unless early_exit).
    _, top_ids, scores, flat = decoder_utils.two_stage_topk(
      logprobs, val.hyp_scores, [] if hp.early_exit else eos_ids, tokens_per_beam
    )
    val.hyp_scores = scores
    hyp_id = flat // tokens_per_beam  # [B, K] parent of each new hypothesis
    val.hyp_ids = hyp_id
    matmul = hp.use_matmul_beam_shuffle

    def reorder_cache(x, batch_dim, time_dim):
      del time_dim
      if lazy_broadcast_prefix_fn is not None:
        return shuffle_state(x, hyp_id, matmul)
      return shuffle_state(_reshape_beam(x, batch_dim, beam), hyp_id, matmul).reshape(x.shape)

    transform_state_fn(model, reorder_cache)
    new_ids = decoder_utils.gather_output_id(top_ids, flat)  # [B, K]
    new_logprobs = decoder_utils.gather_logprobs(logprobs, hyp_id, new_ids)  # [B, K]
    new_ids = new_ids + hp.output_id_offset
    val.output_ids = shuffle_state(val.output_ids, hyp_id, matmul).at[:, :, step + 1].set(new_ids)
    val.logprobs = shuffle_state(val.logprobs, hyp_id, matmul).at[:, :, step + 1].set(new_logprobs)
    val.done = shuffle_state(val.done, hyp_id, matmul) | decoder_utils.has_any_eos(new_ids, eos_ids)
    val.step += 1
    val.segment_pos += 1
    return val

  for i, stop in enumerate(stops):
    if i > 0:
      transform_state_fn(model, decoder_utils.pad_state_fn(stop - stops[i - 1]))
    val = nn.while_loop(
      cond_for(stop),
      body,
      model,
      val,
      split_rngs={base_layer.RANDOM: True},
      carry_variables=[base_layer.DECODE_CACHE],
    )

  flat_lengths = prefix_lengths.reshape(-1)
  left = lambda x: decoder_utils.left_align_tensor(
    x.reshape(batch * beam, -1), flat_lengths, max_prefix_len
  ).reshape(batch, beam, -1)
  result = NestedMap(
    output_ids=left(val.end_ids),
    scores=val.end_scores_norm,
    logprobs=left(val.end_logprobs),
    decode_lengths=val.end_decode_lengths,
    original_lengths=prefix_lengths,
    prefix_lengths=prefix_lengths,
    prefix_ids=decoder_utils.left_align_tensor(
      prefix_ids[:, 0, :], prefix_lengths[:, 0], max_prefix_len
    )[:, None, :],
    done=val.done,
    hyp_ids=val.hyp_ids,
    segment_pos=val.segment_pos,
  )
  return result
