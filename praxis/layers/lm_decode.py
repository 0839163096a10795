"""LanguageModel.decode with Pax's decoder settings (praxis.decoder_hparams), as Pax runs it.

`decode_with_params(model, decoder_params, input_batch)` is Pax's LanguageModel method of that
name, written as a function of the bound LanguageModel so models.py stays small. It drives
`model.lm` through its methods (Pax's module-driven decode; apply with
`mutable=["decoder_cache"]`):
  fprop (`lm(ids, paddings, segment_ids, segment_pos, start_time_step, causal_attention_mask)`,
  the prefill), `lm.transform_decode_state(fn)`, `lm.lazy_broadcast_prefix(n, length)` and
  `lm.extend_step(ids, segment_pos=...)`, through praxis.sample_decode for GreedyDecoderHParams
and SampleDecoderHParams, praxis.flat_beam_search for FlatBeamSearchHParams and
praxis.beam_search.beam_search (Pax's loop over the LM's extend_step) for BeamSearchHParams.

The prompt (Pax's `_prepare_decode_data`): row b's prompt is `ids[b, :prefix_lengths[b]]`, with
prefix_lengths from the batch, else the sum of inputs_indicator (PREFIX LMs), else the
unpadded length.
  fprop_for_prefix=False: the prefill sees one dummy position; decoding then feeds the prompt
    one token at a time (seq_len = decoder_params.seqlen).
  fprop_for_prefix=True: the prompts are right-aligned and prefilled in one pass (positions
    and segments right-aligned, the left padding its own segment); seq_len = the ids length +
    max_decode_steps.
Returns Pax's triple (metrics, decode_out, decode_metrics); decode_out is the decoder's
NestedMap ([B, N, ...]) updated with every entry of the batch.

Shape letters: B batch, T the batch's ids length, S the output buffer, N samples or beams.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import base_hyperparams
from praxis import beam_search
from praxis import decoder_hparams
from praxis import decoder_utils
from praxis import flat_beam_search
from praxis import pytypes
from praxis import sample_decode
from praxis.layers import attentions

NestedMap = pytypes.NestedMap
DECODE_CACHE = base_layer.DECODE_CACHE
PREFIX_DECODE_CACHE = base_layer.PREFIX_DECODE_CACHE


def cached_lm_fns(model: Any, buffer: jax.Array) -> tuple[Any, Callable]:
  """Prefills `model.lm`'s KV cache with buffer [B, S]; returns (cache, extend_fn).

  extend_fn(cache, ids [B'], time_step) -> (cache, logits [B', V]) runs the LM's extend_step as
  a pure function (an unbound copy applied to this model's weights), so beam search and the
  seed's loop can carry, repeat and reorder the cache as a plain pytree.
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
  """Each row's prompt length [B] (at least 1): the batch's prefix_lengths, else its unpadded
  length. The seed's loop and beam search start from a real token."""
  lengths = input_batch.get("prefix_lengths")
  if lengths is None:
    lengths = jnp.sum(1 - input_batch.paddings.astype(jnp.int32), axis=-1)
  return jnp.maximum(jnp.asarray(lengths, jnp.int32).reshape(-1), 1)


def _max_steps(steps: int | Sequence[int] | None) -> int | None:
  if steps is None or isinstance(steps, int):
    return steps
  return max(steps)


def prepare_decode_data(model: Any, input_batch: NestedMap, hp) -> NestedMap:
  """Pax's `_prepare_decode_data`: the prompt layout and the prefill's inputs (module doc)."""
  is_prefix_lm = model.model_type.value == "prefix"
  ids = input_batch.ids
  batch, max_prefix_len = ids.shape
  if "prefix_lengths" in input_batch:
    prefix_lengths = jnp.asarray(input_batch.prefix_lengths, jnp.int32)
  elif is_prefix_lm:
    if "inputs_indicator" not in input_batch:
      raise ValueError(
        "LanguageModel(model_type=PREFIX).decode needs inputs_indicator [B, T] (1 on the "
        "prompt) or prefix_lengths [B] in the batch."
      )
    prefix_lengths = jnp.sum(input_batch.inputs_indicator.astype(jnp.int32), axis=1)
  else:
    # In integers: a bf16 sum of paddings is not exact.
    prefix_lengths = jnp.sum(1 - input_batch.paddings.astype(jnp.int32), axis=1)
  if model.model_type.value == "bidirectional":
    raise NotImplementedError("LanguageModel.decode: a BIDIRECTIONAL LM cannot decode.")
  causal_mask = None
  if is_prefix_lm:
    if "inputs_indicator" in input_batch:
      causal_mask = 1 - input_batch.inputs_indicator
    else:
      causal_mask = jnp.arange(max_prefix_len)[None, :] >= prefix_lengths[:, None]
  data = NestedMap(prefix_lengths=prefix_lengths, max_prefix_len=max_prefix_len)
  if hp.fprop_for_prefix:
    if hp.max_decode_steps is None:
      raise ValueError("fprop_for_prefix=True needs decoder_tpl.max_decode_steps.")
    steps = hp.max_decode_steps
    first = min(steps) if isinstance(steps, Sequence) else steps
    data.seqlen = max_prefix_len + _max_steps(steps)
    data.start_time_step = max_prefix_len - 1
    data.fprop_input_ids, data.fprop_input_paddings = sample_decode.right_align_prefix_ids(
      ids, prefix_lengths, model.fprop_dtype
    )
    data.fprop_segment_pos = sample_decode.right_align_segment_position(
      prefix_lengths, max_prefix_len
    )
    # The left padding is segment 0, so models that read only segments ignore it.
    left_pad = jnp.arange(max_prefix_len)[None, :] < (max_prefix_len - prefix_lengths)[:, None]
    data.fprop_segment_ids = jnp.where(left_pad, 0, 1).astype(data.fprop_segment_pos.dtype)
    data.state_padding_size = first
    data.input_ids = jnp.pad(data.fprop_input_ids, [(0, 0), (0, first)])
    data.input_paddings = jnp.pad(
      data.fprop_input_paddings, [(0, 0), (0, first)], constant_values=1.0
    )
    if causal_mask is not None:
      causal_mask = decoder_utils.right_align_tensors(causal_mask, prefix_lengths)
  else:
    data.seqlen = hp.seqlen
    data.start_time_step = 0
    data.input_ids = ids
    data.input_paddings = input_batch.paddings
    data.fprop_input_ids = jnp.zeros((batch, 1), ids.dtype)
    data.fprop_input_paddings = jnp.ones((batch, 1), model.fprop_dtype)
    data.fprop_segment_pos = None
    data.fprop_segment_ids = None
    data.state_padding_size = hp.seqlen - 1
  data.causal_attention_mask = causal_mask
  data.extra_input_kwargs = (
    dict(input_batch.get("extra_input_kwargs", {})) if hp.use_extra_input_kwargs else {}
  )
  return data


def _fprop_fn(data: NestedMap, ids, paddings, segment_pos, segment_ids, causal_mask):
  """fprop_fn(mdl, ids, paddings) that prefills with the given inputs (the loop's are ignored)."""

  def fprop(mdl, unused_ids, unused_paddings):
    del unused_ids, unused_paddings
    mdl(
      ids,
      paddings,
      segment_ids=segment_ids,
      segment_pos=segment_pos,
      start_time_step=data.start_time_step,
      causal_attention_mask=causal_mask,
      **data.extra_input_kwargs,
    )

  return fprop


def _without_last(data: NestedMap):
  """The prefill's inputs without the last prompt position (vanilla_sample_decode starts there)."""
  if data.fprop_input_ids.shape[1] == 1:
    return (
      jnp.zeros_like(data.fprop_input_ids),
      jnp.ones_like(data.fprop_input_paddings),
      data.fprop_segment_pos,
      data.fprop_segment_ids,
      data.causal_attention_mask,
    )
  cut = lambda x: None if x is None else x[:, :-1]  # noqa: E731
  return (
    cut(data.fprop_input_ids),
    cut(data.fprop_input_paddings),
    cut(data.fprop_segment_pos),
    cut(data.fprop_segment_ids),
    cut(data.causal_attention_mask),
  )


def _extend_step_fn(mdl, ids, segment_pos):
  return mdl.extend_step(ids, segment_pos=segment_pos).logits


def _transform_state_fn(mdl, transform_fn):
  mdl.transform_decode_state(transform_fn)


def _lazy_broadcast_prefix_fn(mdl, num_suffix_samples, suffix_length):
  mdl.lazy_broadcast_prefix(num_suffix_samples, suffix_length)


def _next_token_sampler(hp, input_batch: NestedMap):
  """The decoder's sampler, with k, p, ... copied onto it (Pax's override, on by default)."""
  config = hp.next_token_sampler_tpl.clone()
  if hp.override_next_token_sampler_params:
    config.top_k = hp.k
    config.top_p = hp.p
    config.global_normalize = hp.global_normalize
    config.top_k_recall_target = hp.top_k_recall_target
    config.use_top_k_for_logprobs = hp.use_top_k_for_logprobs
  extra = config.__fn_or_cls__.get_extra_kwargs(input_batch, hp.num_samples)
  return base_hyperparams.instantiate(config, **extra)


def _sample(model, hp, input_batch, data, result_callback, return_result_for_suffix_score):
  lm_inputs = (
    data.fprop_input_ids,
    data.fprop_input_paddings,
    data.fprop_segment_pos,
    data.fprop_segment_ids,
    data.causal_attention_mask,
  )
  sampler = _next_token_sampler(hp, input_batch)
  temperature = input_batch.get("temperature", hp.temperature)
  random = hp.k > 1 or (hp.k == 0 and (isinstance(temperature, jax.Array) or temperature > 0))
  if random and not model.has_rng(base_layer.RANDOM):
    raise ValueError(
      "LanguageModel.decode samples (SampleDecoderHParams with k != 1) and needs a 'random' "
      "rng: apply(..., method='decode', rngs={'random': key})."
    )
  gumbel_prng_key = input_batch.get("gumbel_prng_key")
  eos_id = input_batch.get("eos_id", hp.eos_id)
  if hp.vanilla_sample_decode:
    return sample_decode.vanilla_sample_decode(
      model.lm,
      _fprop_fn(data, *_without_last(data)),
      _extend_step_fn,
      _transform_state_fn,
      sampler,
      data.fprop_input_ids,
      data.fprop_input_paddings,
      temperature=temperature,
      gumbel_prng_key=gumbel_prng_key,
      max_decode_steps=hp.max_decode_steps,
      eos_id=eos_id,
      decode_loop_mesh_axes_transpose=hp.decode_loop_mesh_axes_transpose,
    )
  return sample_decode.sample_decode(
    model.lm,
    _extend_step_fn,
    _transform_state_fn,
    _lazy_broadcast_prefix_fn if hp.lazy_prefix_broadcast else None,
    sampler,
    data.input_ids,
    data.input_paddings,
    data.seqlen,
    fprop_fn=_fprop_fn(data, *lm_inputs),
    num_samples=hp.num_samples,
    fprop_for_prefix=hp.fprop_for_prefix,
    temperature=temperature,
    per_example_top_p=input_batch.get("per_example_top_p"),
    per_example_top_k=input_batch.get("per_example_top_k"),
    max_prefix_len=data.max_prefix_len,
    max_decode_steps=hp.max_decode_steps,
    per_example_max_decode_steps=input_batch.get("per_example_max_decode_steps"),
    prefix_lengths=data.prefix_lengths,
    eos_id=eos_id,
    return_result_for_suffix_score=return_result_for_suffix_score,
    result_callback=result_callback,
    gumbel_prng_key=gumbel_prng_key,
    controlled_decoding=hp.controlled_decoding,
    decode_loop_mesh_axes_transpose=hp.decode_loop_mesh_axes_transpose,
    sort_samples=hp.sort_samples,
    top_k_recall_target=hp.top_k_recall_target,
    use_top_k_for_logprobs=hp.use_top_k_for_logprobs,
    return_entropy_score="return_entropy_score" in input_batch,
    process_result_fn=hp.process_result_fn,
    optimize_eos=hp.optimize_eos,
    sample_constraint=hp.sample_constraint,
    enforce_sample_constraints=input_batch.get("enforce_sample_constraints"),
    num_per_token_logprobs=input_batch.get("num_per_token_logprobs"),
    early_exit=hp.early_exit,
    min_decode_steps=hp.min_decode_steps,
  )


def _greedy(model, hp, data):
  return sample_decode.greedy_decode(
    model.lm,
    _extend_step_fn,
    data.input_ids,
    data.input_paddings,
    data.seqlen,
    fprop_for_prefix=hp.fprop_for_prefix,
    fprop_fn=_fprop_fn(
      data,
      data.fprop_input_ids,
      data.fprop_input_paddings,
      data.fprop_segment_pos,
      data.fprop_segment_ids,
      data.causal_attention_mask,
    ),
    transform_state_fn=_transform_state_fn,
    max_prefix_len=data.max_prefix_len,
    max_decode_steps=hp.max_decode_steps,
    prefix_lengths=data.prefix_lengths,
    eos_id=hp.eos_id,
    decode_loop_mesh_axes_transpose=hp.decode_loop_mesh_axes_transpose,
    process_result_fn=hp.process_result_fn,
    min_decode_steps=hp.min_decode_steps,
  )


def _pad_to(ids: jax.Array, length: int, what: str) -> jax.Array:
  if ids.shape[1] > length:
    raise ValueError(
      f"LanguageModel.decode: the batch's ids have length {ids.shape[1]}, longer than the "
      f"output buffer {length} ({what}); raise it or shorten the prompts."
    )
  return jnp.pad(ids.astype(jnp.int32), [(0, 0), (0, length - ids.shape[1])])


def _beam(model, hp, data) -> NestedMap:
  """Pax's beam search on the LM's own cache (prefill with the prepared prompts)."""
  if _max_steps(hp.max_decode_steps) is None:
    raise ValueError("BeamSearchHParams.max_decode_steps must be set: it sizes the output.")
  fprop = _fprop_fn(
    data,
    data.fprop_input_ids,
    data.fprop_input_paddings,
    data.fprop_segment_pos,
    data.fprop_segment_ids,
    data.causal_attention_mask,
  )
  return beam_search.beam_search(
    model.lm,
    _extend_step_fn,
    fprop,
    _transform_state_fn,
    data.fprop_input_ids,
    data.fprop_input_paddings,
    hp,
    process_result_fn=hp.process_result_fn,
    lazy_broadcast_prefix_fn=_lazy_broadcast_prefix_fn if hp.lazy_prefix_broadcast else None,
  )


def _flat_beam(model, hp, data):
  """Pax's flat beam search: the hypotheses of a row go through extend_step together."""
  _fprop_fn(
    data,
    data.fprop_input_ids,
    data.fprop_input_paddings,
    data.fprop_segment_pos,
    data.fprop_segment_ids,
    data.causal_attention_mask,
  )(model.lm, None, None)
  model.lm.transform_decode_state(decoder_utils.pad_state_fn(data.state_padding_size))
  result = flat_beam_search.flat_beam_search(
    model.lm,
    lambda mdl, ids, segment_pos: mdl.extend_step(ids, segment_pos=segment_pos).logits,
    data.input_ids,
    data.input_paddings,
    data.seqlen,
    beam_size=hp.beam_size,
    fprop_dtype=model.fprop_dtype,
    max_decode_steps=_max_steps(hp.max_decode_steps),
    eos_id=hp.eos_id,
    length_norm_alpha=hp.length_norm_alpha,
  )
  if hp.process_result_fn is not None:
    result = hp.process_result_fn(model.lm, result)
  return result


def decode_with_params(
  model: Any,
  hp: decoder_hparams.DecoderHParams,
  input_batch: NestedMap,
  result_callback: decoder_utils.StreamingResultCallback | None = None,
  return_result_for_suffix_score: bool = False,
):
  """Pax's LanguageModel.decode_with_params for the bound LanguageModel `model`."""
  decoder_hparams.check_supported(hp)
  if hp.seqlen <= 0:
    raise ValueError(f"Must set decoder_tpl.seqlen > 0, current value = {hp.seqlen}.")
  if isinstance(hp, decoder_hparams.FlatBeamSearchHParams):
    result = _flat_beam(model, hp, prepare_decode_data(model, input_batch, hp))
  elif isinstance(hp, decoder_hparams.BeamSearchHParams):
    result = _beam(model, hp, prepare_decode_data(model, input_batch, hp))
  else:
    data = prepare_decode_data(model, input_batch, hp)
    if isinstance(hp, decoder_hparams.SampleDecoderHParams):
      result = _sample(
        model, hp, input_batch, data, result_callback, return_result_for_suffix_score
      )
    elif isinstance(hp, decoder_hparams.GreedyDecoderHParams):
      result = _greedy(model, hp, data)
    else:
      raise NotImplementedError(f"Decoding algorithm {type(hp).__name__} is not implemented.")
  result.update(input_batch)
  if "eval_sample_weights" in result:
    num_decoded = jnp.sum(result.eval_sample_weights)
  else:
    num_decoded = jnp.asarray(result.ids.shape[0], jnp.float32)
  metrics = NestedMap(num_decoded=(num_decoded, jnp.asarray(1, jnp.float32)))
  return metrics, result, NestedMap()


def decode_with_own_cache(model: Any, input_batch: NestedMap, **kwargs):
  """Runs `model.decode` in a nested apply whose decode caches are mutable.

  Pax's callers apply decode with mutable=["decoder_cache"]; paxml's eval loop (and other
  callers of ours) apply it with the weights only. The nested apply is the same decode on the
  same weights, with its "random" stream seeded from the caller's.
  """
  rngs = {}
  if model.has_rng(base_layer.RANDOM):
    rngs[base_layer.RANDOM] = model.make_rng(base_layer.RANDOM)
  variables = {
    k: v for k, v in model.variables.items() if k not in (DECODE_CACHE, PREFIX_DECODE_CACHE)
  }
  out, _ = model.clone(parent=None).apply(
    variables,
    input_batch,
    method="decode",
    rngs=rngs,
    mutable=[DECODE_CACHE, PREFIX_DECODE_CACHE],
    **kwargs,
  )
  return out
