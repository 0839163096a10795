"""The decode loop: greedy or temperature / top-k sampling over an `extend_step` function.

The loop knows nothing about layers. It is given a pure function

    extend_fn(state, ids [B], time_step) -> (state, logits [B, V])

that feeds the token at position `time_step` of every row and returns the logits of the next
position (for a Transformer LM, `state` is the "decoder_cache" collection holding the K/V of the
positions seen so far), and a buffer `ids [B, S]` whose first `prefix_lengths[b]` tokens are row
b's prompt. The caller must already have run the prompt through the model (the prefill), so that
`state` holds the K/V of every prompt position.

Rows may have prompts of different lengths. The loop starts at the last prompt position of the
shortest row and, at every position, keeps the prompt token for rows still inside their prompt
("teacher forcing") and picks a new token for the others. Re-feeding a prompt token rewrites the
cache entry the prefill wrote for that position with the same value, so every row sees exactly
its own prompt followed by its own samples.

A row stops after it emits `eos_id` (the EOS is kept and counted in its length), after
`max_decode_steps` new tokens, or at the end of the buffer (`seqlen`). Positions after a row's
end hold `pad_id`. The whole loop is one `jax.lax.while_loop`, which also ends as soon as every
row has stopped.

Shape letters: B batch, S seqlen (the buffer), V vocabulary, K top_k.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_hyperparams
from praxis import pytypes

NestedMap = pytypes.NestedMap
# extend_fn(state, ids [B], time_step scalar int32) -> (state, logits [B, V]).
ExtendFn = Callable[[Any, jax.Array, jax.Array], tuple[Any, jax.Array]]


@dataclasses.dataclass(frozen=True)
class DecoderHParams(base_hyperparams.HParamsMixin):
  """How to decode.

  Attributes:
    seqlen: length of the output buffer: prompt plus generated tokens (the KV cache length).
    max_decode_steps: the most new tokens per row; None means until EOS or the end of the buffer.
    temperature: 0 picks the most likely token (greedy); > 0 samples from softmax(logits / T).
    top_k: if > 0, sample only among the k most likely tokens (ignored when greedy).
    eos_id: the token that ends a row (2, Pax's default), or a tuple of such tokens; None never
      stops early.
    pad_id: written after a row's end.
    min_decode_steps: no EOS is chosen before this many new tokens (Pax's min_decode_steps).
  """

  seqlen: int = 0
  max_decode_steps: int | None = None
  temperature: float = 0.0
  top_k: int = 0
  eos_id: int | tuple[int, ...] | None = 2
  pad_id: int = 0
  min_decode_steps: int = 0

  def __post_init__(self):
    if self.seqlen <= 0:
      raise ValueError(
        f"DecoderHParams.seqlen must be positive (prompt + generated length), got {self.seqlen}."
      )
    if self.max_decode_steps is not None and self.max_decode_steps < 0:
      raise ValueError(
        f"DecoderHParams.max_decode_steps must be >= 0 or None, got {self.max_decode_steps}."
      )
    if self.temperature < 0:
      raise ValueError(
        f"DecoderHParams.temperature must be >= 0 (0 = greedy), got {self.temperature}."
      )
    if self.top_k < 0:
      raise ValueError(
        f"DecoderHParams.top_k must be >= 0 (0 = whole vocabulary), got {self.top_k}."
      )


def pick_next_token(
  logits: jax.Array, rng: jax.Array | None, *, temperature: float, top_k: int
) -> jax.Array:
  """Chooses one token per row from `logits [B, V]`; returns ids [B] (int32).

  temperature == 0 is greedy (argmax; `rng` is not used). Otherwise the token is drawn from
  softmax(logits / temperature), restricted to the `top_k` largest logits when top_k > 0.
  """
  logits = logits.astype(jnp.float32)
  if temperature == 0.0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  if rng is None:
    raise ValueError("Sampling with temperature > 0 needs an rng; pass one or set temperature=0.")
  if top_k > 0:
    top_k = min(top_k, logits.shape[-1])
    # Sample an index into the k largest logits, then map it back to a vocabulary id: exactly k
    # candidates even when logits tie, and nothing outside them can be drawn.
    top_logits, top_ids = jax.lax.top_k(logits, top_k)  # [B, K], [B, K]
    choice = jax.random.categorical(rng, top_logits / temperature, axis=-1)  # [B]
    return jnp.take_along_axis(top_ids, choice[:, None], axis=-1)[:, 0].astype(jnp.int32)
  return jax.random.categorical(rng, logits / temperature, axis=-1).astype(jnp.int32)


def sample_decode(
  extend_fn: ExtendFn,
  state: Any,
  ids: jax.Array,
  prefix_lengths: jax.Array,
  hparams: DecoderHParams,
  rng: jax.Array | None = None,
) -> NestedMap:
  """Runs the decode loop (see the module docstring).

  Args:
    extend_fn: feeds one position of every row; `state` is threaded through it.
    state: the cache after the prefill of `ids`.
    ids: [B, S] int, the prompts left-aligned; positions >= prefix_lengths are ignored.
    prefix_lengths: [B] int, each row's prompt length, at least 1 (e.g. a BOS token).
    hparams: the decoding parameters; `hparams.seqlen` must equal S.
    rng: key for sampling (folded with the position, so each step draws fresh noise).

  Returns:
    NestedMap with
      output_ids [B, S]: prompt, then generated tokens, then pad_id;
      prefix_lengths [B];
      decode_lengths [B]: prompt plus generated tokens (an EOS included);
      logprobs [B, S]: log-prob of each generated token under the model's distribution
        (log_softmax of the unscaled logits over the whole vocabulary), 0 elsewhere;
      scores [B]: the sum of a row's logprobs.
  """
  batch, seqlen = ids.shape
  eos_ids = () if hparams.eos_id is None else tuple(np.atleast_1d(hparams.eos_id).tolist())
  if seqlen != hparams.seqlen:
    raise ValueError(
      f"sample_decode: the ids buffer has length {seqlen} but "
      f"DecoderHParams.seqlen is {hparams.seqlen}; pad or cut the batch to seqlen."
    )
  prefix_lengths = jnp.clip(prefix_lengths.astype(jnp.int32), 1, seqlen)  # [B]
  positions = jnp.arange(seqlen, dtype=jnp.int32)[None, :]  # [1, S]
  in_prompt = positions < prefix_lengths[:, None]  # [B, S]
  output_ids = jnp.where(in_prompt, ids.astype(jnp.int32), hparams.pad_id)  # [B, S]
  max_new = seqlen if hparams.max_decode_steps is None else hparams.max_decode_steps
  # A row whose prompt fills the buffer, or that may not generate at all, is done from the start.
  done = (prefix_lengths >= seqlen) | (max_new == 0)  # [B]

  def cond(carry):
    t, _, _, done, _, _ = carry
    return (t < seqlen - 1) & ~jnp.all(done)

  def body(carry):
    t, output_ids, logprobs, done, num_new, state = carry
    state, logits = extend_fn(state, output_ids[:, t], t)  # logits [B, V] for position t + 1
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [B, V]
    step_rng = None if rng is None else jax.random.fold_in(rng, t)
    choose_from = logits
    if hparams.min_decode_steps > 0 and eos_ids:
      # The token chosen now is new token num_new + 1; EOS must wait until it is allowed.
      early = (num_new < hparams.min_decode_steps)[:, None]  # [B, 1]
      is_eos = jnp.isin(jnp.arange(logits.shape[-1]), jnp.asarray(eos_ids))[None, :]  # [1, V]
      choose_from = jnp.where(early & is_eos, -jnp.inf, logits)
    sampled = pick_next_token(
      choose_from, step_rng, temperature=hparams.temperature, top_k=hparams.top_k
    )  # [B]
    pos = t + 1
    prompt_token = output_ids[:, pos]  # [B]
    still_prompt = pos < prefix_lengths  # [B]
    generate = ~still_prompt & ~done  # [B]
    token = jnp.where(still_prompt, prompt_token, jnp.where(done, hparams.pad_id, sampled))
    token_logprob = jnp.take_along_axis(log_probs, token[:, None], axis=-1)[:, 0]  # [B]
    output_ids = output_ids.at[:, pos].set(token)
    logprobs = logprobs.at[:, pos].set(jnp.where(generate, token_logprob, 0.0))
    num_new = num_new + generate.astype(jnp.int32)
    finished = num_new >= max_new
    if eos_ids:
      finished |= jnp.isin(token, jnp.asarray(eos_ids))
    done = done | (generate & finished)
    return t + 1, output_ids, logprobs, done, num_new, state

  # Start at the last prompt position of the shortest prompt: the first position whose next token
  # some row has to choose.
  start = jnp.min(prefix_lengths) - 1
  carry = (
    start,
    output_ids,
    jnp.zeros((batch, seqlen), jnp.float32),
    done,
    jnp.zeros((batch,), jnp.int32),
    state,
  )
  _, output_ids, logprobs, _, num_new, _ = jax.lax.while_loop(cond, body, carry)
  return NestedMap(
    output_ids=output_ids,
    prefix_lengths=prefix_lengths,
    decode_lengths=prefix_lengths + num_new,
    logprobs=logprobs,
    scores=jnp.sum(logprobs, axis=-1),
  )
