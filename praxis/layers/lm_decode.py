"""LanguageModel decoding with Pax's decoder settings (praxis.decoder_hparams).

`LanguageModel.decode` hands a Pax `decoder_tpl` (GreedyDecoderHParams, SampleDecoderHParams,
BeamSearchHParams) to `pax_decode` here. Every strategy runs the same way: the prompts are run
through the LM once (the prefill, which fills its KV cache for the whole output buffer), then a
loop feeds one position at a time through `extend_step` as a pure function of the cache:
`praxis.layers.sample_decode` for greedy and sampling, `praxis.beam_search` for beam search.

The output follows Pax's shapes: every per-row result has a samples / beam dim N (1 for greedy,
num_samples, beam_size): output_ids [B, N, S], prefix_lengths [B, N], decode_lengths [B, N],
logprobs [B, N, S] (each generated token's log-prob, 0 elsewhere) and scores [B, N] (the sum of
the logprobs; for beam search Pax's length-normalized score), best first when sorted. The call
returns Pax's triple (metrics, decode_out, decode_metrics).

Shape letters: B batch, T the batch's ids length, S the output buffer, N samples or beams.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import beam_search
from praxis import decoder_hparams
from praxis import pytypes
from praxis.layers import attentions
from praxis.layers import sample_decode

NestedMap = pytypes.NestedMap


def cached_lm_fns(model: Any, buffer: jax.Array) -> tuple[Any, Callable]:
  """Prefills `model.lm`'s KV cache with buffer [B, S]; returns (cache, extend_fn).

  extend_fn(cache, ids [B'], time_step) -> (cache, logits [B', V]) runs the LM's extend_step as
  a pure function (an unbound copy applied to this model's weights), so the decode loops can
  carry, repeat and reorder the cache as a plain pytree.
  The prefill passes no paddings: positions after a prompt hold junk whose cache entries are
  rewritten by extend_step before any later position reads them (attention is causal).
  """
  # Unpacked (one prompt per row), for LMs that have the option.
  overrides = {"packed_input": False} if hasattr(model.lm, "packed_input") else {}
  lm = model.lm.clone(parent=None, **overrides)
  lm_variables = {
    k: v
    for k, v in model.lm.variables.items()
    if k not in (attentions.DECODER_CACHE, base_layer.AUX_LOSS, base_layer.SUMMARIES)
  }
  _, prefill = lm.apply(
    lm_variables, buffer, jnp.zeros(buffer.shape, jnp.float32), mutable=[attentions.DECODER_CACHE]
  )

  def extend_fn(cache, step_ids, time_step):
    out, updated = lm.apply(
      {**lm_variables, attentions.DECODER_CACHE: cache},
      step_ids,
      time_step=time_step,
      method="extend_step",
      mutable=[attentions.DECODER_CACHE],
    )
    return updated[attentions.DECODER_CACHE], out.logits

  return prefill[attentions.DECODER_CACHE], extend_fn


def prompt_lengths(input_batch: NestedMap) -> jax.Array:
  """Each row's prompt length [B]: the batch's prefix_lengths, else its unpadded length."""
  lengths = input_batch.get("prefix_lengths")
  if lengths is None:
    lengths = jnp.sum(1 - input_batch.paddings.astype(jnp.int32), axis=-1)
  return jnp.maximum(jnp.asarray(lengths, jnp.int32).reshape(-1), 1)


def _pad_to(ids: jax.Array, length: int, what: str) -> jax.Array:
  if ids.shape[1] > length:
    raise ValueError(
      f"LanguageModel.decode: the batch's ids have length {ids.shape[1]}, longer than the "
      f"output buffer {length} ({what}); raise it or shorten the prompts."
    )
  return jnp.pad(ids.astype(jnp.int32), [(0, 0), (0, length - ids.shape[1])])


def _sample(model, input_batch, hp, rng) -> NestedMap:
  """Greedy or sampling: num_samples copies of every row through sample_decode's loop."""
  if hp.seqlen <= 0:
    raise ValueError(
      f"{type(hp).__name__}.seqlen must be set (> 0) to decode; it is the output length."
    )
  num = getattr(hp, "num_samples", 1)
  temperature = getattr(hp, "temperature", 0.0)
  if isinstance(hp, decoder_hparams.GreedyDecoderHParams) or not isinstance(
    hp, decoder_hparams.SampleDecoderHParams
  ):
    temperature, num = 0.0, 1
  loop_hp = sample_decode.DecoderHParams(
    seqlen=hp.seqlen,
    max_decode_steps=_single_max_steps(hp),
    temperature=temperature,
    top_k=getattr(hp, "k", 0) if temperature > 0 else 0,
    eos_id=hp.eos_ids() or None,
    min_decode_steps=hp.min_decode_steps,
  )
  # As Pax, ids longer than seqlen are cut to it (prompts longer than seqlen are cut too).
  ids = input_batch.ids[:, : hp.seqlen]
  buffer = jnp.repeat(_pad_to(ids, hp.seqlen, "decoder_tpl.seqlen"), num, axis=0)
  lengths = jnp.repeat(prompt_lengths(input_batch), num, axis=0)  # [B*N]
  cache, extend_fn = cached_lm_fns(model, buffer)
  out = sample_decode.sample_decode(extend_fn, cache, buffer, lengths, loop_hp, rng)
  out = jax.tree_util.tree_map(lambda x: x.reshape((-1, num) + x.shape[1:]), out)
  if num > 1 and getattr(hp, "sort_samples", False):
    order = jnp.argsort(-out.scores, axis=1)  # [B, N], best first
    out = jax.tree_util.tree_map(
      lambda x: jnp.take_along_axis(x, order.reshape(order.shape + (1,) * (x.ndim - 2)), axis=1),
      out,
    )
  return out


def _single_max_steps(hp) -> int | None:
  steps = hp.max_decode_steps
  if steps is None or isinstance(steps, int):
    return steps
  # Pax pads the cache at each listed step; the last one is the limit.
  return max(steps)


def _beam(model, input_batch, hp) -> NestedMap:
  steps = _single_max_steps(hp)
  if steps is None:
    raise ValueError("BeamSearchHParams.max_decode_steps must be set: it sizes the output.")
  if not hp.eos_ids():
    raise ValueError("BeamSearchHParams.eos_id must be set: hypotheses finish only with EOS.")
  length = input_batch.ids.shape[1] + steps
  buffer = _pad_to(input_batch.ids, length, "ids length + max_decode_steps")
  cache, extend_fn = cached_lm_fns(model, buffer)
  return beam_search.beam_search(
    extend_fn,
    cache,
    buffer,
    prompt_lengths(input_batch),
    beam_size=hp.beam_size,
    max_decode_steps=steps,
    eos_id=hp.eos_ids(),
    length_norm_alpha=hp.length_norm_alpha,
    min_decode_steps=hp.min_decode_steps,
    tokens_per_beam=hp.tokens_per_beam,
    output_id_offset=hp.output_id_offset,
  )


def pax_decode(model: Any, input_batch: NestedMap, hp: decoder_hparams.DecoderHParams):
  """Decodes `input_batch` with `model` (a bound LanguageModel); see the module docstring."""
  decoder_hparams.check_supported(hp)
  rng = None
  if isinstance(hp, decoder_hparams.SampleDecoderHParams) and hp.temperature > 0:
    if not model.has_rng(base_layer.RANDOM):
      raise ValueError(
        "LanguageModel.decode samples (SampleDecoderHParams, temperature > 0) and needs a "
        "'random' rng: apply(..., method='decode', rngs={'random': key})."
      )
    rng = model.make_rng(base_layer.RANDOM)
  if isinstance(hp, decoder_hparams.BeamSearchHParams):
    out = _beam(model, input_batch, hp)
  else:
    out = _sample(model, input_batch, hp, rng)
  out.prefix_ids = input_batch.ids
  if hp.process_result_fn is not None:
    out = hp.process_result_fn(model, out)
  batch = input_batch.ids.shape[0]
  generated = (out.decode_lengths - out.prefix_lengths).astype(jnp.float32)
  metrics = NestedMap(
    num_decoded=(jnp.asarray(batch, jnp.float32), jnp.ones((), jnp.float32)),
    decode_length=(jnp.mean(generated[:, 0]), jnp.asarray(batch, jnp.float32)),
  )
  return metrics, out, NestedMap()
