"""Decoding loops for SequenceModel: Pax's module-driven sampling loop and a beam-search adapter.

SequenceModel decodes through its encoder-decoder's Pax protocol (`__call__` with a mutable
DECODE_CACHE fills the cache, `transform_decode_state` reshapes it, `extend_step(ids)` feeds one
position). Two ways to loop over it:

  sample_decode: Pax's `praxis.sample_decode.sample_decode` loop for fprop_for_prefix=False,
    driven on the bound model: `nn.while_loop` over the model with the "random" rng split per
    iteration and the cache carried, and Pax's DefaultNextTokenSampler (top-k, gumbel-max
    sampling with `model.next_prng_key()`; k=1 or temperature 0 is greedy). Its random stream
    is Pax's, so the same weights and rng give Pax's samples. This praxis' own decode loops
    (`praxis.layers.sample_decode`, `praxis.beam_search`) are pure functions of a cache pytree
    and draw their randomness differently; until a module-driven Pax loop exists in
    `praxis.sample_decode`, this adapter is it (SequenceModel only).
  beam_search: runs `praxis.beam_search.beam_search` over a pure copy of the encoder-decoder
    (an unbound clone applied to the model's weights) and reshapes its output to Pax's
    SequenceModel beam output (the start token dropped, lengths counted without it).

Shape letters: B batch, N samples or beams, S output length (seqlen), V vocabulary, P prefix.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import beam_search as beam_search_lib
from praxis import decoder_utils
from praxis import pytypes
from praxis import sample_decode as sample_decode_lib

NestedMap = pytypes.NestedMap
RANDOM = base_layer.RANDOM
DECODE_CACHE = base_layer.DECODE_CACHE
# extend_step_fn(model, ids [B], segment_pos [B]) -> logits [B, V]; Pax's ExtendStepFn.
ExtendStepFn = Callable[[Any, jax.Array, jax.Array], jax.Array]


def next_token(model: Any, logits: jax.Array, *, top_k: int, temperature: float) -> jax.Array:
  """Pax's DefaultNextTokenSampler (no top-p): ids [B] from logits [B, V].

  k == 1, or temperature 0 with k == 0, is argmax. Otherwise Pax's gumbel-max trick over the
  top-k logits (all logits for k == 0): argmax(logits + gumbel * temperature), the noise drawn
  with `model.next_prng_key()` (one key per call, as Pax's).
  """
  if top_k == 1 or (top_k == 0 and temperature == 0.0):
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  if top_k > 1:
    # Clamped: a k above the vocabulary (Pax's default k is 40) means every token.
    top_logits, top_ids = jax.lax.top_k(logits, min(top_k, logits.shape[-1]))  # [B, K]
  else:
    top_logits, top_ids = logits, None
  noise = jax.random.gumbel(model.next_prng_key(), top_logits.shape).astype(top_logits.dtype)
  choice = jnp.argmax(top_logits + noise * temperature, axis=-1)  # [B]
  if top_ids is None:
    return choice.astype(jnp.int32)
  return jnp.take_along_axis(top_ids, choice[:, None], axis=-1)[:, 0].astype(jnp.int32)


def sample_decode(
  model: Any,
  extend_step_fn: ExtendStepFn,
  transform_state_fn: Callable[[Any, Any], None],
  fprop_fn: Callable[[Any, jax.Array, jax.Array], None],
  prefix_ids: jax.Array,
  prefix_paddings: jax.Array,
  seq_len: int,
  *,
  num_samples: int = 1,
  top_k: int = 1,
  temperature: float = 0.0,
  max_decode_steps: int | Sequence[int] | None = None,
  prefix_lengths: jax.Array | None = None,
  eos_id: int | Sequence[int] | None = None,
  sort_samples: bool = True,
  top_k_recall_target: float = 1.0,
) -> NestedMap:
  """Pax's sample_decode (fprop_for_prefix=False, early exit) on a bound model.

  fprop_fn(model, prefix_ids, prefix_paddings) fills the cache; it is padded to seq_len
  positions and repeated num_samples times per row. Position 0 of the output is prefix_ids[:, 0];
  row b keeps its prefix up to prefix_lengths[b] (default 0: everything after position 0 is
  generated). A row stops after an EOS (kept), after max_decode_steps new tokens, or at seq_len.

  Returns Pax's NestedMap, each entry [B, N, ...]: output_ids [B, N, S], logprobs [B, N, S]
  (1.0 where nothing was generated), decode_lengths, prefix_lengths, original_lengths [B, N],
  prefix_ids [B, N, P]; samples sorted by score when num_samples > 1 and sort_samples.
  """
  if seq_len <= 0:
    raise ValueError(f"The sequence length for decoding must be > 0, current value = {seq_len}.")
  fprop_fn(model, prefix_ids, prefix_paddings)
  transform_state_fn(model, decoder_utils.pad_state_fn(seq_len - 1))
  if isinstance(max_decode_steps, int):
    max_decode_steps = [max_decode_steps]
  max_decode_steps = sorted(max_decode_steps) if max_decode_steps else [seq_len]
  eos_ids = None if eos_id is None else ([eos_id] if isinstance(eos_id, int) else list(eos_id))
  if num_samples > 1:
    # [a, b] -> [a, a, a, b, b, b]: a row's samples are adjacent, as their cache rows.
    prefix_ids = jnp.repeat(prefix_ids, num_samples, axis=0)
    prefix_paddings = jnp.repeat(prefix_paddings, num_samples, axis=0)
    if prefix_lengths is not None:
      prefix_lengths = jnp.repeat(prefix_lengths, num_samples, axis=0)
    transform_state_fn(model, decoder_utils.batch_broadcast_state_fn(num_samples))
  batch = prefix_ids.shape[0]
  if prefix_lengths is None:
    prefix_lengths = jnp.zeros([batch], jnp.int32)
  max_steps = max(max_decode_steps)
  if temperature > 0.0 and top_k != 1 and not model.has_rng(RANDOM):
    raise ValueError(
      "Sampling (temperature > 0) needs a 'random' rng: apply(..., rngs={'random': key})."
    )

  val = NestedMap()
  val.output_ids = jnp.zeros((batch, seq_len), jnp.int32).at[:, 0].set(prefix_ids[:, 0])
  val.segment_pos = jnp.zeros([batch], jnp.int32)
  val.step = jnp.zeros((), jnp.int32)
  val.done = jnp.zeros([batch], jnp.bool_)
  val.decode_lengths = jnp.full([batch], seq_len, jnp.int32)
  val.logprobs = jnp.ones((batch, seq_len), jnp.float32)  # 1.0 marks "not generated"

  def body(model, val):
    step = val.step
    logits = extend_step_fn(model, val.output_ids[:, step], val.segment_pos)  # [B, V]
    new_ids = next_token(model, logits, top_k=top_k, temperature=temperature)  # [B]
    in_prefix = step < prefix_lengths - 1  # [B]: the next position is still the prompt's
    next_prefix = jax.lax.dynamic_index_in_dim(
      prefix_ids, jnp.minimum(step + 1, prefix_ids.shape[1] - 1), axis=1, keepdims=False
    )
    new_ids = jnp.where(in_prefix, next_prefix, new_ids)
    prev_done = val.done
    new_ids = jnp.where(prev_done, 0, new_ids)
    val.output_ids = val.output_ids.at[:, step + 1].set(new_ids)
    done = prev_done
    if eos_ids is not None:
      done = prev_done | decoder_utils.has_any_eos(new_ids, eos_ids)
    done = jnp.where(in_prefix, prev_done, done)  # an EOS inside the prompt ends nothing
    val.segment_pos = val.segment_pos + 1
    done = done | ((step + 2 - prefix_lengths) >= max_steps)
    finished_now = done & ~prev_done
    val.decode_lengths = jnp.where(finished_now, step + 2, val.decode_lengths)
    val.done = done
    logprobs = jax.nn.log_softmax(logits.astype(jnp.float32))  # [B, V]
    chosen = jnp.take_along_axis(logprobs, new_ids[:, None], axis=-1)[:, 0]
    val.logprobs = val.logprobs.at[:, step + 1].set(jnp.where(prev_done, 1.0, chosen))
    val.step = step + 1
    return val

  result = val
  for i, stop in enumerate(max_decode_steps):
    if i > 0:
      transform_state_fn(model, decoder_utils.pad_state_fn(stop - max_decode_steps[i - 1]))

    def cond(model, val, stop=stop):
      del model
      return (val.step < min(seq_len - 1, stop)) & ~jnp.all(val.done)

    result = nn.while_loop(
      cond, body, model, result, split_rngs={RANDOM: True}, carry_variables=[DECODE_CACHE]
    )

  out = NestedMap(
    output_ids=result.output_ids,
    decode_lengths=result.decode_lengths,
    logprobs=result.logprobs,
    prefix_lengths=prefix_lengths,
    original_lengths=jnp.sum(1.0 - prefix_paddings, axis=1).astype(jnp.int32),
  )
  positions = jnp.arange(prefix_ids.shape[1])[None, :]
  out.prefix_ids = jnp.where(positions < prefix_lengths[:, None], prefix_ids, 0)
  out = jax.tree_util.tree_map(lambda x: sample_decode_lib.split_batch_dim(x, 0, num_samples), out)
  if num_samples > 1 and sort_samples:
    out = sample_decode_lib.sort_samples_by_scores(out, top_k_recall_target)
  return out


def beam_search(
  model: Any,
  prefill_fn: Callable[[Any], None],
  start_ids: jax.Array,
  *,
  beam_size: int,
  max_decode_steps: int,
  eos_id: int | Sequence[int],
  length_norm_alpha: float,
  min_decode_steps: int = 0,
  tokens_per_beam: int | None = None,
  output_id_offset: int = 0,
) -> NestedMap:
  """Beam search from one start token per row, in Pax's SequenceModel output form.

  `model` is the bound encoder-decoder; prefill_fn(mdl) runs it (mutable DECODE_CACHE) on the
  batch with the start tokens `start_ids` [B] as a one-position target. The search itself is
  `praxis.beam_search.beam_search` over a pure copy of the model.

  Returns NestedMap(output_ids [B, K, 1 + max_decode_steps] (generated tokens from position 0,
  as Pax's, whose start token is padding), scores, decode_lengths (generated tokens, EOS
  included), prefix_lengths (0), original_lengths (0) [B, K], logprobs [B, K, 1 + steps],
  prefix_ids [B, 1, 1]).
  """
  mdl = model.clone(parent=None)
  skip = (DECODE_CACHE, base_layer.AUX_LOSS, base_layer.SUMMARIES)
  weights = {k: v for k, v in model.variables.items() if k not in skip}

  def prefill(m):
    prefill_fn(m)
    m.transform_decode_state(decoder_utils.pad_state_fn(max_decode_steps))

  _, cache = mdl.apply(weights, method=prefill, mutable=[DECODE_CACHE])

  def extend_fn(state, ids, time_step):
    # The model's own counter (its cache's time_step) equals time_step: both start at 0 and
    # advance once per call.
    del time_step
    out, updated = mdl.apply(
      {**weights, DECODE_CACHE: state}, ids, method="extend_step", mutable=[DECODE_CACHE]
    )
    return updated[DECODE_CACHE], out.logits

  batch = start_ids.shape[0]
  buffer = jnp.zeros((batch, 1 + max_decode_steps), jnp.int32).at[:, 0].set(start_ids)
  result = beam_search_lib.beam_search(
    extend_fn,
    cache[DECODE_CACHE],
    buffer,
    jnp.ones([batch], jnp.int32),
    beam_size=beam_size,
    max_decode_steps=max_decode_steps,
    eos_id=eos_id,
    length_norm_alpha=length_norm_alpha,
    min_decode_steps=min_decode_steps,
    tokens_per_beam=tokens_per_beam,
    output_id_offset=output_id_offset,
  )

  def drop_start(x):  # [B, K, S] -> the same without position 0, zero-padded at the end
    return jnp.pad(x[:, :, 1:], [(0, 0), (0, 0), (0, 1)])

  zeros = jnp.zeros((batch, beam_size), jnp.int32)
  return NestedMap(
    output_ids=drop_start(result.output_ids),
    logprobs=drop_start(result.logprobs),
    scores=result.scores,
    decode_lengths=result.decode_lengths - 1,
    prefix_lengths=zeros,
    original_lengths=zeros,
    prefix_ids=jnp.zeros((batch, 1, 1), jnp.int32),
  )
