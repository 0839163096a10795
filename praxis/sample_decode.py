"""Pax's `praxis.sample_decode`: greedy and sampling decode driven through a model's methods.

The loop never sees weights: it calls the model (usually a bound TransformerLm) the way Pax
does, with its decode cache in the "decoder_cache" collection (apply with
`mutable=["decoder_cache"]`):

  fprop_fn(model, ids, paddings)          # once: the prefill, fills the cache
  transform_state_fn(model, fn)           # reshapes the cache: pad time, repeat rows, ...
  extend_step_fn(model, ids [B], segment_pos [B]) -> logits [B, V]   # once per step

and `next_token_sampler(model, logits, temperature, loop_state, ...)` (praxis.token_samplers)
picks each token. The loop is a `flax.linen.while_loop` over the model that carries the cache
and splits the "random" stream per step.

Two layouts of the prompt (Pax's `fprop_for_prefix`):
  False: output row b starts with prefix_ids[b, 0]; the loop feeds one position at a time from
    step 0, copying the prompt's tokens until step prefix_lengths[b] - 1 ("extend_step for the
    prefix"). The output is seq_len long; a prompt token is never an EOS.
  True: the prompt was right-aligned and run through one fprop; the loop starts at the last
    prompt position (max_prefix_len - 1). Outputs are left-aligned again at the end, so row b
    is its prompt, its new tokens, then zeros; seq_len = max_prefix_len + max_decode_steps.
A row stops after an EOS (one of `eos_id`, or a per-row stop sequence [B, L] left-padded with
0), after max_decode_steps new tokens (counted from max_prefix_len with fprop_for_prefix, from
the row's prefix length otherwise) or at seq_len. `decode_lengths` counts the prompt and the new
tokens (EOS included); after the end come id 0 and logprob 1.0 (Pax's padding mark).

With num_samples N > 1 every row is repeated N times (the cache too, or, with
lazy_broadcast_prefix_fn, shared by the samples) and the outputs are [B, N, ...], sorted by
score (the sum of logprobs) when sort_samples.

Classifier-free guidance (Pax's cf_guidance_scale): the batch is (conditioned, unconditioned)
row pairs; the sampler sees uncond + scale * (cond - uncond), both rows continue with its token,
and only the conditioned rows are returned. Not provided (they raise): controlled decoding,
sample constraints, decode-loop mesh transposes. early_exit=False is Pax's fixed-length scan: every step runs
(finished rows emit padding), and summaries recorded in the loop come out stacked per step.

Shape letters: B rows (batch * samples inside the loop), N samples, S seq_len, P the prompt
buffer length (max_prefix_len), V vocabulary.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import decoder_utils
from praxis import py_utils
from praxis import pytypes
from praxis import token_samplers

NestedMap = pytypes.NestedMap
JTensor = pytypes.JTensor
StreamingResultCallback = decoder_utils.StreamingResultCallback

RANDOM = base_layer.RANDOM
PARAMS = base_layer.PARAMS
NON_TRAINABLE = base_layer.NON_TRAINABLE
AUX_LOSS = base_layer.AUX_LOSS
SUMMARIES = base_layer.SUMMARIES
DECODE_CACHE = base_layer.DECODE_CACHE
PREFIX_DECODE_CACHE = base_layer.PREFIX_DECODE_CACHE
HYPER_PARAMS = base_layer.HYPER_PARAMS
DUMMY_PRNG_KEY = decoder_utils.DUMMY_PRNG_KEY
# How many top candidates (ids and log-probs) Pax reports per decoded token at most.
MAX_NUM_PER_TOKEN_LOGPROBS = 5

# Pax exports its samplers from here too.
BaseNextTokenSampler = token_samplers.BaseNextTokenSampler
DefaultNextTokenSampler = token_samplers.DefaultNextTokenSampler
get_top_k = token_samplers.get_top_k
top_p_mask_logits = token_samplers.top_p_mask_logits
epsilon_mask_logits = token_samplers.epsilon_mask_logits
sample_from_top_k_and_top_p = token_samplers.sample_from_top_k_and_top_p


def _refuse_unsupported(**settings: Any) -> None:
  for name, value in settings.items():
    if value is not None:
      raise NotImplementedError(
        f"sample_decode: {name}={value!r} (Pax's) is not implemented in this praxis; leave it "
        "None. docs/praxis.md lists the decode features that are missing."
      )


def _top_candidates(num_per_token_logprobs: JTensor, logprobs: JTensor) -> tuple[JTensor, JTensor]:
  """The MAX_NUM_PER_TOKEN_LOGPROBS best (log-probs, ids) [B, M] of logprobs [B, V]; slots at or
  past a row's num_per_token_logprobs [B] hold 1.0 and 0."""
  k = min(logprobs.shape[-1], MAX_NUM_PER_TOKEN_LOGPROBS)
  values, ids = jax.lax.top_k(logprobs, k)  # [B, k], best first
  pad = [(0, 0), (0, MAX_NUM_PER_TOKEN_LOGPROBS - k)]
  values = jnp.pad(values, pad, constant_values=1.0)
  ids = jnp.pad(ids, pad)
  keep = jnp.arange(MAX_NUM_PER_TOKEN_LOGPROBS)[None, :] < num_per_token_logprobs[:, None]
  return jnp.where(keep, values, 1.0), jnp.where(keep, ids, 0)


def _first_steps(max_decode_steps: int | Sequence[int] | None, seq_len: int) -> list[int]:
  """max_decode_steps as Pax's sorted list of loop limits (the cache grows at each)."""
  if isinstance(max_decode_steps, int):
    return [max_decode_steps]
  return sorted(max_decode_steps) if max_decode_steps else [seq_len]


def _stream(callback, val, step, start_step, num_samples, num_per_token_logprobs) -> None:
  """Pax's streaming: after every `interval_steps` steps (or once every row is done) hands
  callback_fn the interval's tokens [B, N, I] (with their logprobs and top candidates when
  num_per_token_logprobs is set), decode_lengths (I), scores (their logprobs' sum), done."""
  interval = callback.interval_steps
  batch = val.output_ids.shape[0]

  def window(x, fill, first):
    """x [B, L, ...] -> x[:, first : first + I] (padded with `fill` past the end)."""
    pad = [(0, 0), (0, interval)] + [(0, 0)] * (x.ndim - 2)
    x = jnp.pad(x, pad, constant_values=fill)
    return jax.lax.dynamic_slice_in_dim(x, first, interval, axis=1)

  def send():
    steps_done = ((step - start_step) // interval) * interval  # this interval's first step
    out = NestedMap(output_ids=window(val.output_ids, 0, start_step + 1 + steps_done))
    logprobs = window(val.logprobs, 1.0, start_step + 1 + steps_done)
    if num_per_token_logprobs is not None:
      out.num_per_token_logprobs = num_per_token_logprobs
      out.top_candidate_ids = window(val.top_candidate_ids, 0, steps_done)
      out.top_candidate_logprobs = window(val.top_candidate_logprobs, 1.0, steps_done)
      out.logprobs = logprobs
    out.decode_lengths = jnp.full((batch,), interval, jnp.int32)
    out.scores = jnp.sum(jnp.minimum(logprobs, 0.0), axis=-1)  # 1.0 marks no token
    out.done = val.done
    out = jax.tree.map(lambda x: split_batch_dim(x, 0, num_samples), out)
    out.prefix_lengths = jnp.zeros((batch // num_samples,), jnp.int32)
    callback.callback_fn(out)

  ready = ((step - start_step + 1) % interval == 0) | jnp.all(val.done)
  jax.lax.cond(ready, send, lambda: None)


def sample_decode(
  model: Any,
  extend_step_fn: decoder_utils.ExtendStepFn | decoder_utils.ExpandedExtendStepFn,
  transform_state_fn: decoder_utils.TransformStateFn | None,
  lazy_broadcast_prefix_fn: decoder_utils.LazyBroadcastPrefixFn | None,
  next_token_sampler: Any,
  prefix_ids: JTensor,
  prefix_paddings: JTensor,
  seq_len: int,
  num_samples: int,
  fprop_fn: decoder_utils.FPropFn | None = None,
  cf_guidance_scale: Any = None,
  fprop_for_prefix: bool = False,
  temperature: float | JTensor = 1.0,
  gumbel_prng_key: JTensor | None = None,
  per_example_top_p: JTensor | None = None,
  per_example_top_k: JTensor | None = None,
  max_prefix_len: int | None = None,
  max_decode_steps: int | Sequence[int] | None = None,
  per_example_max_decode_steps: JTensor | None = None,
  prefix_lengths: JTensor | None = None,
  eos_id: int | Sequence[int] | JTensor | None = None,
  result_callback: StreamingResultCallback | None = None,
  decode_loop_mesh_axes_transpose: dict[str, str] | None = None,
  model_var_pspecs: Any = None,
  return_result_for_suffix_score: bool = False,
  sort_samples: bool = True,
  top_k_recall_target: float = 0.85,
  early_exit: bool = True,
  use_top_k_for_logprobs: bool = False,
  controlled_decoding: Any = None,
  return_entropy_score: bool = False,
  process_result_fn: decoder_utils.ProcessResultFn | None = None,
  optimize_eos: bool = False,
  sample_constraint: Any = None,
  enforce_sample_constraints: JTensor | None = None,
  num_per_token_logprobs: JTensor | None = None,
  min_decode_steps: int = 0,
) -> NestedMap:
  """Pax's sample_decode: the prefill (fprop_fn), the cache padded to its decode length, the
  loop (`sample_decode_after_fprop`, whose arguments these are), then process_result_fn.

  `min_decode_steps` (ours, Pax's DecoderHParams field): no EOS among a row's first that many
  new tokens.
  """
  del model_var_pspecs
  _refuse_unsupported(decode_loop_mesh_axes_transpose=decode_loop_mesh_axes_transpose or None)
  if fprop_fn is not None:
    fprop_fn(model, prefix_ids, prefix_paddings)
    if lazy_broadcast_prefix_fn is None and transform_state_fn is not None:
      # The prefill cached max_prefix_len (or, extending the prompt step by step, 1) positions.
      pad = min(_first_steps(max_decode_steps, seq_len)) if fprop_for_prefix else seq_len - 1
      transform_state_fn(model, decoder_utils.pad_state_fn(pad))
  result = sample_decode_after_fprop(
    model,
    extend_step_fn,
    transform_state_fn,
    lazy_broadcast_prefix_fn,
    next_token_sampler,
    prefix_ids,
    prefix_paddings,
    seq_len,
    num_samples,
    cf_guidance_scale=cf_guidance_scale,
    fprop_for_prefix=fprop_for_prefix,
    temperature=temperature,
    gumbel_prng_key=gumbel_prng_key,
    per_example_top_p=per_example_top_p,
    per_example_top_k=per_example_top_k,
    max_prefix_len=max_prefix_len,
    max_decode_steps=max_decode_steps,
    per_example_max_decode_steps=per_example_max_decode_steps,
    prefix_lengths=prefix_lengths,
    eos_id=eos_id,
    result_callback=result_callback,
    return_result_for_suffix_score=return_result_for_suffix_score,
    sort_samples=sort_samples,
    top_k_recall_target=top_k_recall_target,
    early_exit=early_exit,
    use_top_k_for_logprobs=use_top_k_for_logprobs,
    controlled_decoding=controlled_decoding,
    return_entropy_score=return_entropy_score,
    optimize_eos=optimize_eos,
    sample_constraint=sample_constraint,
    enforce_sample_constraints=enforce_sample_constraints,
    num_per_token_logprobs=num_per_token_logprobs,
    min_decode_steps=min_decode_steps,
  )
  if process_result_fn is not None:
    result = process_result_fn(model, result)
  return result


def _guidance_scale(scale, batch, num_samples, eos_id, *unsupported) -> JTensor:
  """Pax's cf_guidance_scale (a number, N numbers, [E] or [E, N]) as [E|1, N|1, 1] against the
  guided logits [E, N, V]; E = batch / 2 (rows come in (conditioned, unconditioned) pairs)."""
  if batch % 2:
    raise ValueError(
      f"cf_guidance_scale needs (conditioned, unconditioned) row pairs: an even batch, got {batch}."
    )
  names = ("num_per_token_logprobs", "result_callback", "optimize_eos", "use_top_k_for_logprobs",
           "min_decode_steps")  # fmt: skip
  used = [n for n, v in zip(names, unsupported) if v]
  if isinstance(eos_id, jax.Array) or used:
    raise NotImplementedError(
      f"cf_guidance_scale together with {used or ['stop sequences']} is not provided; "
      "use plain eos ids and leave those at their defaults."
    )
  if isinstance(scale, (int, float)):
    return jnp.asarray(scale, jnp.float32)
  if isinstance(scale, Sequence):
    if len(scale) != num_samples:
      raise ValueError(f"cf_guidance_scale as a list needs {num_samples} values, got {scale}.")
    return jnp.asarray(scale, jnp.float32)[None, :, None]
  scale = jnp.asarray(scale)
  if scale.ndim == 1:
    return scale[:, None, None]
  if scale.ndim == 2 and scale.shape[-1] == num_samples:
    return scale[:, :, None]
  raise ValueError(f"cf_guidance_scale must be [E] or [E, {num_samples}], got {scale.shape}.")


def _early_exit_loop(model, body, cond_for, transform_state_fn, steps, val) -> NestedMap:
  """Pax's early_exit=True: a while loop per bucket of max_decode_steps that stops once every
  row is done (the cache grows between buckets)."""
  result = val
  for i, stop_after in enumerate(steps):
    if i > 0:
      # Pax's growing cache: room for the next bucket of steps.
      transform_state_fn(model, decoder_utils.pad_state_fn(stop_after - steps[i - 1]))
    result = nn.while_loop(
      cond_for(stop_after),
      body,
      model,
      result,
      split_rngs={RANDOM: True},
      carry_variables=[DECODE_CACHE],
    )
  return result


def _fixed_length_loop(model, body, val, length: int) -> NestedMap:
  """Pax's early_exit=False: `length` steps of a scan, even for finished rows, so what the
  model records inside (summaries, aux losses) comes out stacked along a new leading step
  axis, e.g. a [B, V] summary becomes [length, B, V]."""

  def step_fn(model, val, unused_x):
    return body(model, val), None

  scan = nn.scan(
    step_fn,
    variable_axes={SUMMARIES: 0, AUX_LOSS: 0, HYPER_PARAMS: 0},
    variable_broadcast=[PARAMS, NON_TRAINABLE],
    variable_carry=[DECODE_CACHE, PREFIX_DECODE_CACHE],
    split_rngs={RANDOM: True},
    length=length,
  )
  # The scan stacks the summaries it sees: ones recorded before the loop would be stacked
  # (and clash), so they step aside and come back after, the loop's own keys winning.
  before = _take_collection(model, SUMMARIES)
  result, _ = scan(model, val, None)
  if before:
    _merge_missing(model.scope._mutable_collection(SUMMARIES), before)  # noqa: SLF001
  return result


def _take_collection(model, name: str) -> dict:
  """Empties the model's (mutable) collection `name`; returns what it held."""
  if not model.is_mutable_collection(name):
    return {}
  store = model.scope._mutable_collection(name)  # noqa: SLF001
  taken = {key: store[key] for key in list(store.keys())}
  for key in taken:
    del store[key]
  return taken


def _merge_missing(target, extra: dict) -> None:
  """Adds extra's leaves to the nested dict `target` where target has no value yet."""
  for key, value in extra.items():
    if key not in target:
      target[key] = value
    elif isinstance(value, dict) and isinstance(target[key], dict):
      _merge_missing(target[key], value)


def sample_decode_after_fprop(
  model: Any,
  extend_step_fn: decoder_utils.ExtendStepFn | decoder_utils.ExpandedExtendStepFn,
  transform_state_fn: decoder_utils.TransformStateFn | None,
  lazy_broadcast_prefix_fn: decoder_utils.LazyBroadcastPrefixFn | None,
  next_token_sampler: Any,
  prefix_ids: JTensor,
  prefix_paddings: JTensor,
  seq_len: int,
  num_samples: int,
  cf_guidance_scale: Any = None,
  fprop_for_prefix: bool = False,
  temperature: float | JTensor = 1.0,
  gumbel_prng_key: JTensor | None = None,
  per_example_top_p: JTensor | None = None,
  per_example_top_k: JTensor | None = None,
  max_prefix_len: int | None = None,
  max_decode_steps: int | Sequence[int] | None = None,
  per_example_max_decode_steps: JTensor | None = None,
  prefix_lengths: JTensor | None = None,
  eos_id: int | Sequence[int] | JTensor | None = None,
  result_callback: StreamingResultCallback | None = None,
  return_result_for_suffix_score: bool = False,
  sort_samples: bool = True,
  top_k_recall_target: float = 0.85,
  early_exit: bool = True,
  use_top_k_for_logprobs: bool = False,
  controlled_decoding: Any = None,
  return_entropy_score: bool = False,
  optimize_eos: bool = False,
  sample_constraint: Any = None,
  enforce_sample_constraints: JTensor | None = None,
  num_per_token_logprobs: JTensor | None = None,
  min_decode_steps: int = 0,
) -> NestedMap:
  """The decode loop after the prefill (see the module docstring).

  Args (Pax's): prefix_ids / prefix_paddings [B, P] (right-aligned with fprop_for_prefix);
  seq_len the output length; temperature a number or [B] / [B, N]; gumbel_prng_key [B] or
  [B, 2] per-row noise keys (all DUMMY_PRNG_KEY: ignored); per_example_top_p / top_k /
  max_decode_steps [B]; max_decode_steps an int or a list (the cache is padded at each);
  prefix_lengths [B]; eos_id an id, ids, or stop sequences [B, L] left-padded with 0;
  return_entropy_score adds `entropy` [.., S]; result_callback streams the tokens of every
  `interval_steps` steps (and the last ones) to its callback_fn; num_per_token_logprobs [B] adds
  top_candidate_ids / top_candidate_logprobs [B, N, S, MAX_NUM_PER_TOKEN_LOGPROBS] (indexed by
  decode step); optimize_eos ends each row where adding an EOS scores best.

  Returns:
    NestedMap of [B, N, ...]: output_ids, logprobs (1.0 = padding), decode_lengths,
    prefix_lengths, original_lengths, prefix_ids (and the optional fields above).
  """
  _refuse_unsupported(
    controlled_decoding=controlled_decoding,
    sample_constraint=sample_constraint,
  )
  prefix_ids = jnp.asarray(prefix_ids)
  prefix_paddings = jnp.asarray(prefix_paddings)
  original_batch = prefix_ids.shape[0]
  steps = _first_steps(max_decode_steps, seq_len)
  if isinstance(eos_id, int):
    eos_id = [eos_id]
  guided = cf_guidance_scale is not None
  # The rows the sampler sees: with guidance, one per (conditioned, unconditioned) pair.
  sampler_rows = original_batch // 2 if guided else original_batch
  if guided:
    cf_guidance_scale = _guidance_scale(
      cf_guidance_scale, original_batch, num_samples, eos_id, num_per_token_logprobs,
      result_callback, optimize_eos, use_top_k_for_logprobs, min_decode_steps,
    )  # fmt: skip
    if per_example_max_decode_steps is not None:
      # Both rows of a pair stop together: [E] -> [2E] (row pairs are consecutive).
      per_example_max_decode_steps = jnp.repeat(per_example_max_decode_steps, 2, axis=0)

  def per_row(x, name, rows=original_batch):
    """A per-row input [B, ...] repeated for the samples: [B * N, ...]."""
    if x.shape[0] != rows:
      raise ValueError(f"{name} must have {rows} rows (the batch), got {x.shape}.")
    return jnp.repeat(x, num_samples, axis=0)

  if num_samples > 1:
    # Row b's samples are rows b*N .. b*N + N - 1.
    prefix_ids = jnp.repeat(prefix_ids, num_samples, axis=0)
    prefix_paddings = jnp.repeat(prefix_paddings, num_samples, axis=0)
    if prefix_lengths is not None:
      prefix_lengths = jnp.repeat(prefix_lengths, num_samples, axis=0)
    if isinstance(temperature, jax.Array):
      if temperature.ndim == 2:
        if temperature.shape != (sampler_rows, num_samples):
          raise ValueError(
            f"A [B, N] temperature must be {(sampler_rows, num_samples)}, got {temperature.shape}."
          )
        temperature = temperature.reshape(-1)
      else:
        temperature = per_row(temperature, "temperature", sampler_rows)
    if per_example_max_decode_steps is not None:
      per_example_max_decode_steps = per_row(
        per_example_max_decode_steps.astype(jnp.int32), "per_example_max_decode_steps"
      )
    if per_example_top_p is not None:
      per_example_top_p = per_row(per_example_top_p, "per_example_top_p", sampler_rows)
    if per_example_top_k is not None:
      per_example_top_k = per_row(per_example_top_k, "per_example_top_k", sampler_rows)
    if num_per_token_logprobs is not None:
      num_per_token_logprobs = per_row(num_per_token_logprobs, "num_per_token_logprobs")
    if isinstance(eos_id, jax.Array):
      if eos_id.ndim != 2:
        raise ValueError(f"Per-row stop sequences eos_id must be [B, L], got {eos_id.shape}.")
      eos_id = per_row(eos_id, "eos_id").astype(jnp.int32)
    if lazy_broadcast_prefix_fn is not None:
      if not fprop_for_prefix:
        raise ValueError("lazy_prefix_broadcast needs fprop_for_prefix=True.")
      # The last prompt token is where decoding starts: it moves from the shared prefix to the
      # per-sample suffix, which has room for it and the first max_decode_steps new tokens.
      transform_state_fn(model, decoder_utils.slice_state_fn(0, -1))
      lazy_broadcast_prefix_fn(model, num_samples, min(steps) + 1)
    elif transform_state_fn is not None:
      transform_state_fn(model, decoder_utils.batch_broadcast_state_fn(num_samples))

  if isinstance(temperature, jax.Array):
    temperature = temperature.reshape(-1)[:, None]  # [B, 1] against logits [B, V]
  if isinstance(per_example_top_p, jax.Array):
    per_example_top_p = per_example_top_p[:, None]
  if gumbel_prng_key is not None:
    gumbel_prng_key = jnp.asarray(gumbel_prng_key).astype(jnp.uint32)
    if gumbel_prng_key.ndim == 1:
      # One number per row becomes a raw key of the default implementation's width.
      width = jax.random.key_data(jax.random.key(0)).shape[0]
      gumbel_prng_key = jnp.stack([gumbel_prng_key] * width, axis=-1)  # [B, 2]
  if seq_len <= 0:
    raise ValueError(f"The decode length seq_len must be > 0, got {seq_len}.")
  last_steps = max(steps)
  limit = last_steps if per_example_max_decode_steps is None else per_example_max_decode_steps
  limit = jnp.minimum(limit, last_steps)
  batch = prefix_ids.shape[0]
  if prefix_lengths is None:
    prefix_lengths = jnp.zeros([batch], jnp.int32)
  prefix_lengths = jnp.asarray(prefix_lengths, jnp.int32)

  output_ids = jnp.zeros((batch, seq_len), jnp.int32)
  val = NestedMap()
  if fprop_for_prefix:
    if max_prefix_len is None:
      raise ValueError("sample_decode(fprop_for_prefix=True) needs max_prefix_len.")
    output_ids = jax.lax.dynamic_update_slice(output_ids, prefix_ids.astype(jnp.int32), [0, 0])
    start_step = max_prefix_len - 1
    val.segment_pos = prefix_lengths - 1
  else:
    output_ids = output_ids.at[:, 0].set(prefix_ids[:, 0])
    start_step = 0
    val.segment_pos = jnp.zeros([batch], jnp.int32)
  val.start_step = jnp.asarray(start_step, jnp.int32)
  val.step = jnp.asarray(start_step, jnp.int32)
  val.output_ids = output_ids
  val.done = jnp.zeros([batch], jnp.bool_)
  val.has_eos = jnp.zeros([batch], jnp.bool_)
  val.decode_lengths = jnp.full([batch], seq_len, jnp.int32)
  val.logprobs = jnp.ones((batch, seq_len), jnp.float32)  # 1.0 marks "no token here"
  if num_per_token_logprobs is not None:
    num_per_token_logprobs = jnp.minimum(num_per_token_logprobs, MAX_NUM_PER_TOKEN_LOGPROBS)
    val.top_candidate_ids = jnp.zeros((batch, seq_len, MAX_NUM_PER_TOKEN_LOGPROBS), jnp.int32)
    val.top_candidate_logprobs = jnp.ones(val.top_candidate_ids.shape, jnp.float32)
  if optimize_eos:
    if isinstance(eos_id, jax.Array) or not eos_id or use_top_k_for_logprobs:
      raise ValueError(
        "optimize_eos needs eos ids as a list (not stop sequences) and "
        "use_top_k_for_logprobs=False."
      )
    val.eos_logprobs = jnp.ones((batch, seq_len), jnp.float32)
    val.eos_ids = jnp.zeros((batch, seq_len), jnp.float32)
  if return_entropy_score:
    val.entropy = jnp.zeros((batch, seq_len), jnp.float32)
  val = next_token_sampler.init_decode_loop_state(val, model, batch, eos_id)
  extend = decoder_utils.coerce_to_expanded_extend_step_fn(extend_step_fn)
  if result_callback is not None and result_callback.init_fn is not None:
    result_callback.init_fn((original_batch, num_samples))
  new_token_offset = max_prefix_len if fprop_for_prefix else prefix_lengths  # [B] or int

  def body(model, val):
    step = val.step
    logits = extend(model, val.output_ids[:, step], val.segment_pos, val)  # [B, V]
    if guided:
      pairs = split_batch_dim(logits, 0, 2 * num_samples)  # [E, 2N, V]: N cond, N uncond
      cond, uncond = pairs[:, :num_samples], pairs[:, num_samples:]
      mixed = uncond + cf_guidance_scale * (cond - uncond)  # [E, N, V]
      logits = mixed.reshape((-1,) + mixed.shape[2:])  # [E * N, V]: what the sampler sees
    step_keys = None
    if gumbel_prng_key is not None:
      # Each sample of row b gets its own key, fresh at every step.
      keys = jax.vmap(lambda k: jax.random.split(k, num_samples))(gumbel_prng_key)
      keys = keys.reshape((-1,) + gumbel_prng_key.shape[1:])  # [B * N, 2]
      keys = jax.vmap(lambda k: jax.random.fold_in(k, step))(keys)
      step_keys = jax.lax.cond(
        jnp.all(gumbel_prng_key == DUMMY_PRNG_KEY),
        lambda: jnp.full_like(keys, DUMMY_PRNG_KEY),
        lambda: keys,
      )
    choose_from = logits
    large_negative = py_utils.get_large_negative_number(logits.dtype)
    if optimize_eos:
      choose_from = choose_from.at[:, jnp.asarray(eos_id)].set(large_negative)
    if min_decode_steps > 0 and eos_id is not None and not isinstance(eos_id, jax.Array):
      generated = step + 1 - new_token_offset  # [B] or scalar: new tokens before this one
      early = jnp.broadcast_to(generated < min_decode_steps, (batch,))[:, None]
      is_eos = decoder_utils.has_any_eos(jnp.arange(logits.shape[-1]), eos_id)[None, :]
      choose_from = jnp.where(early & is_eos, large_negative, choose_from)
    sampled = next_token_sampler(
      model,
      choose_from,
      temperature,
      val,
      per_example_top_p=per_example_top_p,
      per_example_top_k=per_example_top_k,
      gumbel_prng_key=step_keys,
    )
    for key in sampled.keys() & val.keys():
      val[key] = sampled[key]
    new_ids = sampled.new_ids.astype(jnp.int32)  # [B]
    model.add_summary("new_ids", new_ids)
    model.add_summary("sample_logits", sampled.logits)
    if guided:
      # The unconditioned row of a pair follows the conditioned one's tokens: [E * N] -> [B * N].
      new_ids = split_batch_dim(new_ids, 0, num_samples)
      new_ids = jnp.concatenate([new_ids, new_ids], axis=1).reshape(-1)
      both = jnp.concatenate([mixed, mixed], axis=1)  # [E, 2N, V]
      logits = both.reshape((-1,) + both.shape[2:])  # [B * N, V]
    if not fprop_for_prefix:
      # Inside its prompt a row copies the prompt's next token.
      new_ids = jnp.where(step < prefix_lengths - 1, prefix_ids[:, step + 1], new_ids)
    prev_done = val.done
    new_ids = jnp.where(prev_done, 0, new_ids)
    val.output_ids = val.output_ids.at[:, step + 1].set(new_ids)
    if eos_id is not None:
      if isinstance(eos_id, jax.Array):
        has_eos = decoder_utils.end_with_sequences(eos_id, val.output_ids, step + 1)
      else:
        has_eos = decoder_utils.has_any_eos(new_ids, eos_id)
      val.done = prev_done | has_eos
      val.has_eos = val.has_eos | has_eos
    if fprop_for_prefix:
      lengths_now = prefix_lengths + (step - max_prefix_len + 2)
    else:
      val.done = jnp.where(step < prefix_lengths - 1, prev_done, val.done)  # prompt EOS: no stop
      lengths_now = jnp.full_like(val.decode_lengths, step + 2)
    val.segment_pos = val.segment_pos + 1
    val.done = val.done | ((step + 2 - new_token_offset) >= limit)
    ended_now = ~prev_done & val.done
    val.decode_lengths = jnp.where(ended_now, lengths_now, val.decode_lengths)

    logprobs = jax.nn.log_softmax(logits.astype(jnp.float32))  # [B, V]
    if use_top_k_for_logprobs and "logprobs_at_new_ids" in sampled:
      new_logprobs = sampled.logprobs_at_new_ids
    else:
      # Clipped, as Pax's gather: a copied prompt id may lie outside a test model's vocabulary.
      new_logprobs = jnp.take_along_axis(logprobs, new_ids[:, None], axis=-1, mode="clip")[:, 0]
    val.logprobs = val.logprobs.at[:, step + 1].set(jnp.where(prev_done, 1.0, new_logprobs))
    if num_per_token_logprobs is not None:
      top_logprobs, top_ids = jax.lax.cond(
        jnp.any(num_per_token_logprobs > 0),
        lambda: _top_candidates(num_per_token_logprobs, logprobs),
        lambda: (
          jnp.ones_like(val.top_candidate_logprobs[:, 0]),
          jnp.zeros_like(val.top_candidate_ids[:, 0]),
        ),
      )
      index = step - val.start_step  # by decode step, not by position
      val.top_candidate_logprobs = val.top_candidate_logprobs.at[:, index].set(top_logprobs)
      val.top_candidate_ids = val.top_candidate_ids.at[:, index].set(top_ids)
    if optimize_eos:
      best_eos = jnp.argmax(logits.at[:, jnp.asarray(eos_id)].add(1e6), axis=-1)  # [B]
      val.eos_ids = val.eos_ids.at[:, step + 1].set(best_eos)
      val.eos_logprobs = val.eos_logprobs.at[:, step + 1].set(
        jnp.take_along_axis(logprobs, best_eos[:, None], axis=-1)[:, 0]
      )
    if "entropy" in val:
      val.entropy = val.entropy.at[:, step + 1].set(-jnp.sum(logprobs * jnp.exp(logprobs), -1))
    if result_callback is not None:
      _stream(result_callback, val, step, start_step, num_samples, num_per_token_logprobs)
    val.step = step + 1
    return val

  def cond_for(stop_after: int):
    def cond(model, val):
      del model
      in_range = val.step < min(seq_len - 1, start_step + stop_after)
      return in_range & ~jnp.all(val.done)

    return cond

  if not early_exit:
    result = _fixed_length_loop(model, body, val, seq_len - (max_prefix_len or 0))
  else:
    result = _early_exit_loop(model, body, cond_for, transform_state_fn, steps, val)
  if result_callback is not None and result_callback.done_fn is not None:
    result_callback.done_fn()
  if optimize_eos:
    result = decoder_utils.collect_results_to_optimize_eos(
      result, decode_length_shift=max_prefix_len or 0
    )
  if return_result_for_suffix_score:
    return result
  del result.segment_pos
  result.prefix_lengths = prefix_lengths
  result.original_lengths = jnp.sum(1.0 - prefix_paddings, axis=1).astype(jnp.int32)
  if fprop_for_prefix:
    prefix_ids = decoder_utils.left_align_tensor(prefix_ids, prefix_lengths, max_prefix_len)
  # Zeros past each prompt: some tokenizers do not respect lengths.
  in_prompt = jnp.arange(prefix_ids.shape[1])[None, :] < prefix_lengths[:, None]
  result.prefix_ids = jnp.where(in_prompt, prefix_ids, 0)
  if fprop_for_prefix:
    for name in ("output_ids", "logprobs", "entropy"):
      if name in result:
        result[name] = decoder_utils.left_align_tensor(result[name], prefix_lengths, max_prefix_len)
  del result.start_step, result.step, result.done, result.has_eos
  result = next_token_sampler.post_process_decode_loop_state(result)
  if guided:
    # Only the conditioned rows are returned: [B * N, ...] -> [E, N, ...].
    result = jax.tree.map(lambda x: split_batch_dim(x, 0, 2 * num_samples)[:, :num_samples], result)
  else:
    result = jax.tree.map(lambda x: split_batch_dim(x, 0, num_samples), result)
  if num_samples > 1 and sort_samples:
    return sort_samples_by_scores(result, top_k_recall_target)
  return result


def greedy_decode(
  model: Any,
  extend_step_fn: decoder_utils.ExtendStepFn | decoder_utils.ExpandedExtendStepFn,
  prefix_ids: JTensor,
  prefix_paddings: JTensor,
  seq_len: int,
  fprop_for_prefix: bool = False,
  fprop_fn: decoder_utils.FPropFn | None = None,
  transform_state_fn: decoder_utils.TransformStateFn | None = None,
  max_prefix_len: int | None = None,
  max_decode_steps: int | Sequence[int] | None = None,
  prefix_lengths: JTensor | None = None,
  decode_loop_mesh_axes_transpose: dict[str, str] | None = None,
  model_var_pspecs: Any = None,
  eos_id: int | Sequence[int] | None = None,
  process_result_fn: decoder_utils.ProcessResultFn | None = None,
  min_decode_steps: int = 0,
) -> NestedMap:
  """sample_decode with the argmax sampler (top_k=1), one sample: outputs [B, 1, ...]."""
  return sample_decode(
    model,
    extend_step_fn,
    transform_state_fn,
    None,
    token_samplers.DefaultNextTokenSampler(top_k=1),
    prefix_ids,
    prefix_paddings,
    seq_len,
    num_samples=1,
    fprop_fn=fprop_fn,
    fprop_for_prefix=fprop_for_prefix,
    temperature=0.0,
    max_prefix_len=max_prefix_len,
    max_decode_steps=max_decode_steps,
    prefix_lengths=prefix_lengths,
    eos_id=eos_id,
    decode_loop_mesh_axes_transpose=decode_loop_mesh_axes_transpose,
    model_var_pspecs=model_var_pspecs,
    process_result_fn=process_result_fn,
    min_decode_steps=min_decode_steps,
  )


def vanilla_sample_decode(
  model: Any,
  fprop_fn: decoder_utils.FPropFn,
  extend_step_fn: decoder_utils.ExtendStepFn | decoder_utils.ExpandedExtendStepFn,
  transform_state_fn: decoder_utils.TransformStateFn,
  next_token_sampler: Any,
  prefix_ids: JTensor,
  prefix_paddings: JTensor,
  temperature: float | JTensor = 1.0,
  gumbel_prng_key: JTensor | None = None,
  max_decode_steps: int = 0,
  eos_id: int | Sequence[int] | JTensor | None = None,
  decode_loop_mesh_axes_transpose: dict[str, str] | None = None,
  model_var_pspecs: Any = None,
) -> NestedMap:
  """Pax's simple loop: one sample, prompts already right-aligned in prefix_ids [B, P];
  outputs [B, P + max_decode_steps] (no samples dim), left-aligned.

  It is sample_decode with fprop_for_prefix and the prefix lengths read from the paddings;
  what it returns differs only in shape, and prefix_ids stays P long.
  """
  if max_decode_steps <= 0:
    raise ValueError(f"vanilla_sample_decode needs max_decode_steps > 0, got {max_decode_steps}.")
  prefix_lengths = jnp.sum(1 - prefix_paddings.astype(jnp.int32), axis=-1)
  max_prefix_len = prefix_ids.shape[1]
  result = sample_decode(
    model,
    extend_step_fn,
    transform_state_fn,
    None,
    next_token_sampler,
    prefix_ids,
    prefix_paddings,
    max_prefix_len + max_decode_steps,
    num_samples=1,
    fprop_fn=fprop_fn,
    fprop_for_prefix=True,
    temperature=temperature,
    gumbel_prng_key=gumbel_prng_key,
    max_prefix_len=max_prefix_len,
    max_decode_steps=max_decode_steps,
    prefix_lengths=prefix_lengths,
    eos_id=eos_id,
    decode_loop_mesh_axes_transpose=decode_loop_mesh_axes_transpose,
    model_var_pspecs=model_var_pspecs,
  )
  del result.original_lengths
  return jax.tree.map(lambda x: x[:, 0], result)


def reorder_with_indices(x: jax.Array, indices: jax.Array) -> jax.Array:
  """x [B, N, ...] with dim 1 reordered per row by indices [B, N]."""
  if indices.ndim != 2 or x.ndim < 2:
    raise ValueError(
      f"reorder_with_indices takes x [B, N, ...] and indices [B, N], got {x.shape} and "
      f"{indices.shape}."
    )
  return jnp.take_along_axis(x, indices.reshape(indices.shape + (1,) * (x.ndim - 2)), axis=1)


def sort_samples_by_scores(result: NestedMap, top_k_recall_target: float = 0.85) -> NestedMap:
  """Every field of `result` ([B, N, ...]) reordered by the samples' scores, best first.

  A sample's score is the sum of its `logprobs` [B, N, S], where values >= 1.0 mark padding
  (Pax's convention) and count as 0. With top_k_recall_target < 1 the order comes from
  `jax.lax.approx_max_k` (TPU-friendly, possibly inexact), as in Pax.
  """
  logprobs = jnp.where(result.logprobs >= 1.0, 0.0, result.logprobs)
  scores = jnp.sum(logprobs, axis=-1)  # [B, N]
  num_samples = scores.shape[-1]
  if top_k_recall_target < 1.0:
    if top_k_recall_target <= 0.0:
      raise ValueError(f"top_k_recall_target must be in (0, 1], got {top_k_recall_target}.")
    _, order = jax.lax.approx_max_k(scores, num_samples, recall_target=top_k_recall_target)
  else:
    _, order = jax.lax.top_k(scores, num_samples)
  return jax.tree.map(functools.partial(reorder_with_indices, indices=order), result)


def split_batch_dim(x: jax.Array, batch_dim: int, num_samples: int) -> jax.Array:
  """[..., B * N, ...] -> [..., B, N, ...] at `batch_dim` (samples of a row are adjacent)."""
  if x.shape[batch_dim] % num_samples:
    raise ValueError(
      f"split_batch_dim: dim {batch_dim} of {x.shape} is not a multiple of {num_samples}."
    )
  shape = list(x.shape)
  shape[batch_dim : batch_dim + 1] = [shape[batch_dim] // num_samples, num_samples]
  return jnp.reshape(x, shape)


def right_align_segment_position(lengths: jax.Array, max_length: int) -> jax.Array:
  """Positions [B, max_length] of right-aligned rows of `lengths` [B]: 0 over the left
  padding, then 0, 1, ..., length - 1."""
  pos = jnp.arange(max_length, dtype=jnp.int32)[None, :] - (max_length - lengths[:, None])
  return jnp.maximum(pos, 0)


def right_align_prefix_ids(
  prefix_ids: jax.Array, prefix_lengths: jax.Array, paddings_dtype: jnp.dtype
) -> tuple[jax.Array, jax.Array]:
  """Left-aligned prefixes [B, P] of `prefix_lengths` [B] -> (right-aligned ids [B, P],
  paddings [B, P] in `paddings_dtype`, 1 over the left padding)."""
  max_len = prefix_ids.shape[-1]
  ids = decoder_utils.right_align_tensors(prefix_ids, prefix_lengths)
  padded = jnp.arange(max_len)[None, :] < (max_len - prefix_lengths[:, None])  # [B, P]
  return ids, padded.astype(paddings_dtype)
