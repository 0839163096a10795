"""Pax's flat beam search: K hypotheses per row fed to the model together as ids [B, K].

As in Pax (whose LanguageModel notes that flat beam search "doesn't work yet" with real LMs),
the model's `extend_step(ids [B, K], None)` must return scores [B, K, V] (or [B * K, V]) for
the next token of every hypothesis; they are summed as given (no log-softmax). Every
hypothesis starts from the last token of its row's prefix_ids. The cache is never reordered:
instead each hypothesis keeps a mask over the K * S slots of the output buffer (slot t * K + k
is what hypothesis k wrote at step t) naming the slots that make up its history.

Per step t (from 0): each live hypothesis offers a finished candidate, itself plus EOS, scored
(its score + the EOS score) / length_norm(t + 1); the K best finished candidates are kept. The
live hypotheses become the K best non-EOS extensions (decoder_utils.two_stage_topk). The loop
ends at seq_len - 1 or when every hypothesis has emitted EOS.

Output (Pax's): output_ids [B, K, S] (a hypothesis's tokens, its EOS written at its length),
decode_lengths [B, K] (the prefix token and the EOS included, at most max_decode_steps), scores
[B, K] (the length-normalized scores, best first), and the loop's masks and scores.

Shape letters: B batch, K beam_size, S seq_len, V vocabulary.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import decoder_utils
from praxis import pytypes

NestedMap = pytypes.NestedMap
JTensor = pytypes.JTensor
# Pax's score of a slot that holds no hypothesis.
_NO_SCORE = 1e9


def init_loop_var(
  target_prefix_ids: JTensor, beam_size: int, seq_len: int, fprop_dtype
) -> NestedMap:
  """The loop state: output_ids [S, B, K] (step 0: the prefixes' last tokens), hyp_scores and
  beam_mask [B, K, K * S] of the live hypotheses (only hypothesis 0 is real at first),
  end_scores, end_scores_norm and end_mask of the finished ones (none yet), done [B, K]."""
  batch = target_prefix_ids.shape[0]
  slots = beam_size * seq_len
  val = NestedMap(step=jnp.asarray(0, jnp.int32))
  val.output_ids = jnp.zeros((seq_len, batch, beam_size), jnp.int32)
  first = jnp.broadcast_to(target_prefix_ids[:, -1:].astype(jnp.int32), (batch, beam_size))
  val.output_ids = val.output_ids.at[0].set(first)
  own_slot = jax.nn.one_hot(jnp.arange(beam_size), slots, dtype=fprop_dtype)  # [K, K * S]
  val.beam_mask = jnp.broadcast_to(own_slot, (batch, beam_size, slots))
  val.hyp_scores = jnp.broadcast_to(
    -jnp.arange(beam_size, dtype=fprop_dtype) * _NO_SCORE, (batch, beam_size)
  )
  val.end_mask = jnp.zeros((batch, beam_size, slots), fprop_dtype)
  val.end_scores = jnp.full((batch, beam_size), -_NO_SCORE, fprop_dtype)
  val.end_scores_norm = val.end_scores
  val.done = jnp.zeros((batch, beam_size), jnp.bool_)
  return val


def update_beam_mask(beam_mask: JTensor, hyp_id: JTensor, time_step: Any | None) -> JTensor:
  """Hypothesis j's new history: its parent hyp_id[b, j]'s mask, plus its own slot at
  time_step (when given). beam_mask [B, K, K * S], hyp_id [B, K]."""
  beam_size, slots = beam_mask.shape[1], beam_mask.shape[2]
  parents = jax.nn.one_hot(hyp_id, beam_size, dtype=beam_mask.dtype)  # [B, K(new), K(old)]
  beam_mask = jnp.einsum("bkt,bjk->bjt", beam_mask, parents)  # [B, K, K * S]
  if time_step is not None:
    beam_mask += jax.nn.one_hot(jnp.arange(beam_size) + time_step * beam_size, slots)
  return beam_mask


def get_final_output_ids(beam_mask: JTensor, output_ids: JTensor) -> JTensor:
  """Each hypothesis's tokens [B, K, S]: at step l, the token of the hypothesis its mask
  names at l. beam_mask [B, K, K * S], output_ids [B, K, S] (what slot k wrote at step l)."""
  batch, beam, length = output_ids.shape
  mask = beam_mask.reshape(batch, beam, length, beam)  # [B, K(hyp), S, K(slot)]
  return jnp.einsum("bkl,bnlk->bnl", output_ids, mask).astype(jnp.int32)


def update_topk_scores_with_eos(end_hyps: tuple, cur_hyps: tuple) -> tuple:
  """The K best of the finished hypotheses and the new candidates, by normalized score.
  Each argument is (mask [B, K|M, K * S], score [B, K|M], normalized score [B, K|M])."""
  end_mask, end_scores, end_norm = end_hyps
  cur_mask, cur_scores, cur_norm = cur_hyps
  beam = end_mask.shape[1]
  mask = jnp.concatenate([end_mask, cur_mask], axis=1)
  scores = jnp.concatenate([end_scores, cur_scores], axis=1)
  norm, order = jax.lax.top_k(jnp.concatenate([end_norm, cur_norm], axis=1), beam)  # [B, K]
  pick = jax.nn.one_hot(order, mask.shape[1], dtype=mask.dtype)  # [B, K, K + M]
  return (
    jnp.einsum("bkt,bjk->bjt", mask, pick),
    jnp.einsum("bk,bjk->bj", scores, pick.astype(scores.dtype)),
    norm,
  )


def post_process(result: NestedMap, eos_id: int, max_decoding_steps: int) -> NestedMap:
  """The loop state -> Pax's outputs (see the module docstring)."""
  output_ids = jnp.transpose(result.output_ids, (1, 2, 0))  # [B, K, S]
  output_ids = get_final_output_ids(result.end_mask, output_ids)
  lengths = jnp.sum(result.end_mask, axis=-1).astype(jnp.int32)  # tokens before the EOS
  result.output_ids = output_ids + eos_id * jax.nn.one_hot(
    lengths, max_decoding_steps, dtype=jnp.int32
  )
  result.decode_lengths = jnp.minimum(lengths + 1, max_decoding_steps).astype(jnp.int32)
  result.scores = result.end_scores_norm
  del result.step, result.done, result.end_scores_norm
  return result


def flat_beam_search(
  model: Any,
  extend_step_fn: decoder_utils.ExtendStepFn,
  prefix_ids: JTensor,
  prefix_paddings: JTensor,
  seq_len: int,
  beam_size: int,
  fprop_dtype: Any,
  max_decode_steps: int | None = None,
  eos_id: int | None = None,
  length_norm_alpha: float = 0.8,
) -> NestedMap:
  """Runs the search (module docstring) after the caller prefilled `model`'s cache.

  max_decode_steps (default seq_len) caps the lengths and must equal seq_len when given, as
  the EOS is written with a one-hot of that width.
  """
  del prefix_paddings
  if seq_len <= 0:
    raise ValueError(f"The decode length seq_len must be > 0, got {seq_len}.")
  if eos_id is None or not isinstance(eos_id, int):
    raise ValueError(f"flat_beam_search needs one int eos_id, got {eos_id!r}.")
  max_decode_steps = max_decode_steps or seq_len
  if max_decode_steps != seq_len:
    raise ValueError(
      f"flat_beam_search writes outputs of seq_len {seq_len}; max_decode_steps "
      f"{max_decode_steps} must equal it (or be None)."
    )
  val = init_loop_var(prefix_ids, beam_size, seq_len, fprop_dtype)
  batch = prefix_ids.shape[0]

  def cond(model, val):
    del model
    return (val.step < seq_len - 1) & ~jnp.all(val.done)

  def body(model, val):
    step = val.step
    scores = extend_step_fn(model, val.output_ids[step], None)
    scores = scores.reshape(batch, beam_size, -1)  # [B, K, V]
    with_eos = (val.hyp_scores + scores[..., eos_id]) / decoder_utils.length_norm(
      step + 1, length_norm_alpha
    )
    val.end_mask, val.end_scores, val.end_scores_norm = update_topk_scores_with_eos(
      (val.end_mask, val.end_scores, val.end_scores_norm),
      (val.beam_mask, val.hyp_scores, with_eos),
    )
    _, candidates, best_scores, best = decoder_utils.two_stage_topk(
      scores, val.hyp_scores, [eos_id]
    )  # candidates [B, K * K] token ids, best [B, K] indices into them
    val.hyp_scores = best_scores
    val.beam_mask = update_beam_mask(val.beam_mask, best // beam_size, step + 1)
    new_ids = decoder_utils.gather_output_id(candidates, best)  # [B, K]
    new_ids = jnp.where(val.done, 0, new_ids)
    val.done = val.done | (new_ids == eos_id)
    val.output_ids = val.output_ids.at[step + 1].set(new_ids)
    val.step = step + 1
    return val

  result = nn.while_loop(cond, body, model, val, carry_variables=[base_layer.DECODE_CACHE])
  return post_process(result, eos_id, max_decode_steps)
