"""Pax's decoder helpers: beam-search arithmetic, decode-state transforms, stop sequences.

Decode-state transforms have the signature `fn(x, batch_dim, time_dim) -> x` (Pax's
`DecodeStateTransformFn`); a layer's `transform_decode_state(fn)` applies one to every cached
array (a negative dim means the array has no such dim).

Alignment vocabulary (as in Pax): a *left-aligned* row is `[P, P, X, X, 0, 0]` (tokens first), a
*right-aligned* one `[0, 0, P, P, X, X]`, and a *middle-aligned* one puts the prefix so that it
ends at max_prefix_len: `[0, 0, P, P, X, X, 0]`.

Not provided: Pax's mesh-transpose helpers (maybe_reshard_mdl_for_decode,
maybe_decode_mesh_transpose); see docs/praxis.md.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from praxis import py_utils
from praxis import pytypes

JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor
NestedMap = py_utils.NestedMap
DecodeStateTransformFn = Callable[[JTensor, int, int], JTensor]
ExtendStepFn = Callable[[Any, JTensor, JTensor], JTensor]
ExpandedExtendStepFn = Callable[[Any, JTensor, JTensor, NestedMap], JTensor]
FPropFn = Callable[[Any, JTensor, JTensor], None]
TransformStateFn = Callable[[Any, DecodeStateTransformFn], None]
LazyBroadcastPrefixFn = Callable[[Any, int, int], None]
ProcessResultFn = Callable[[Any, NestedMap], NestedMap]

# Pax's fixed seed for decoders that need a key but no randomness.
DUMMY_PRNG_KEY = 15753


@dataclasses.dataclass(frozen=True)
class StreamingResultCallback:
  """Called with the decode results every `interval_steps` steps.

  Attributes:
    callback_fn: receives the results so far.
    interval_steps: steps between calls.
    init_fn: called once at the start with the batch size (or [batch, num_samples]).
    done_fn: called once at the end.
  """

  callback_fn: Callable[[NestedJTensor], None]
  interval_steps: int = 1
  init_fn: Callable[[int | Sequence[int]], None] | None = None
  done_fn: Callable[[], None] | None = None


@dataclasses.dataclass
class ControlledDecodingHParams:
  """Blockwise controlled decoding: every `interval` steps rerank `block_num_samples` samples
  (interval 0 disables it)."""

  interval: int = 0
  block_num_samples: int = 0


def length_norm(t, length_norm_alpha) -> jnp.ndarray:
  """GNMT's length normalisation ((t + 5) / 5) ** alpha for beam search."""
  return jax.lax.pow((t.astype(jnp.float32) + 5.0) / 5.0, length_norm_alpha)


def gather_output_id(long_output_ids: jnp.ndarray, topk_indices: jnp.ndarray) -> jnp.ndarray:
  """long_output_ids [B, K*K] at topk_indices [B, K] -> [B, K] int32 (a one-hot einsum)."""
  one_hot = jax.nn.one_hot(topk_indices, long_output_ids.shape[-1], dtype=jnp.int32)
  return jnp.einsum("bt,bkt->bk", long_output_ids.astype(jnp.int32), one_hot).astype(jnp.int32)


def gather_logprobs(logprobs: jnp.ndarray, hyp_ids: jnp.ndarray, ids: jnp.ndarray) -> jnp.ndarray:
  """logprobs [B, K, V] of hypothesis hyp_ids [B, K] at token ids [B, K] -> [B, K]."""
  per_hyp = jax.vmap(lambda scores, hyps: scores[hyps])(logprobs, hyp_ids)  # [B, K, V]
  one_hot = jax.nn.one_hot(ids, logprobs.shape[-1], dtype=logprobs.dtype)
  return jnp.einsum("bkv,bkv->bk", per_hyp, one_hot)


def two_stage_topk(
  logits: jax.Array,
  hyp_scores: jax.Array,
  terminal_ids: list[int],
  tokens_per_beam: int | None = None,
):
  """Top tokens per beam, then the top `beam_size` of those over all beams.

  Args:
    logits: [B, K, V] step scores.
    hyp_scores: [B, K] scores of the hypotheses so far (added to their tokens).
    terminal_ids: tokens that end a hypothesis; they are pushed down by 1e9.
    tokens_per_beam: candidates per beam (default K).

  Returns:
    (topk_value, topk_indices) [B, K * tokens_per_beam] and (final_topk_value,
    final_topk_indices) [B, K] into them.
  """
  b, k = hyp_scores.shape
  per_beam = k if tokens_per_beam is None else tokens_per_beam
  values, indices = jax.lax.top_k(logits.reshape(b * k, logits.shape[-1]), per_beam)
  values = values.reshape(b, k, per_beam) + hyp_scores[:, :, None]
  indices = indices.reshape(b, k, per_beam)
  for terminal_id in terminal_ids:
    values = values - 1e9 * (indices == terminal_id).astype(values.dtype)
  values = values.reshape(b, k * per_beam)
  indices = indices.reshape(b, k * per_beam)
  final_values, final_indices = jax.lax.top_k(values, k)
  return values, indices, final_values, final_indices


def pad_state_fn(state_padding_size: int) -> DecodeStateTransformFn:
  """Pads decode states with zeros at the end of the time dim."""

  def fn(x, batch_dim, time_dim):
    del batch_dim
    if time_dim < 0:
      return x
    pad = [(0, state_padding_size if i == time_dim else 0) for i in range(x.ndim)]
    return jnp.pad(x, pad)

  return fn


def slice_state_fn(slice_start: int, slice_limit: int) -> DecodeStateTransformFn:
  """Slices decode states to [slice_start, slice_limit) on the time dim (negatives count back)."""

  def fn(x, batch_dim, time_dim):
    del batch_dim
    if time_dim < 0:
      return x
    size = x.shape[time_dim]
    start = slice_start + size if slice_start < 0 else slice_start
    limit = slice_limit + size if slice_limit < 0 else slice_limit
    return jax.lax.slice_in_dim(x, start, limit, axis=time_dim)

  return fn


def batch_broadcast_state_fn(multiplier: int) -> DecodeStateTransformFn:
  """Repeats every batch row `multiplier` times (consecutively): samples of one prefix."""

  def fn(x, batch_dim, time_dim):
    del time_dim
    if batch_dim < 0:
      return x
    return jnp.repeat(x, multiplier, axis=batch_dim)

  return fn


def right_align_tensors(x: JTensor, lengths: JTensor, align_dim: int = 1) -> JTensor:
  """Moves each row's first lengths[b] entries (along align_dim) to its end, zeros before."""
  if align_dim >= x.ndim:
    raise ValueError(f"align_dim {align_dim} must be smaller than x's rank {x.ndim}.")
  size = x.shape[align_dim]

  def one(row, length):  # row: x[b], its align axis is align_dim - 1
    axis = align_dim - 1
    pad = [(0, 0)] * row.ndim
    pad[axis] = (size, 0)
    return jax.lax.dynamic_slice_in_dim(jnp.pad(row, pad), length, size, axis=axis)

  return jax.vmap(one)(x, lengths)


def right_align_state_fn(seq_lengths: JTensor) -> DecodeStateTransformFn:
  """Right-aligns decode states on their time dim (row b holds seq_lengths[b] entries)."""

  def fn(x, batch_dim, time_dim):
    del batch_dim
    if time_dim < 0:
      return x
    return right_align_tensors(x, seq_lengths, time_dim)

  return fn


def left_align_tensor(
  x: JTensor, prefix_lengths: JTensor, max_prefix_len: int, pad_value: float = 0.0
) -> JTensor:
  """Middle- to left-aligned rows of x [B, T]: drop max_prefix_len - prefix_length leading slots."""
  if x.ndim != 2:
    raise ValueError(f"left_align_tensor takes x [batch, seq_len], got shape {x.shape}.")
  seq_len = x.shape[1]

  def one(row, prefix_length):
    padded = jnp.pad(row, [(0, max_prefix_len)], constant_values=x.dtype.type(pad_value))
    return jax.lax.dynamic_slice(padded, [max_prefix_len - prefix_length], [seq_len])

  return jax.vmap(one)(x, prefix_lengths)


def left_align_kv_cache(
  x: JTensor,
  prefix_lengths: JTensor,
  max_prefix_len: int,
  pad_value: float = 0.0,
  batch_size: int = 1,
) -> JTensor:
  """left_align_tensor for caches [B, T, N, H] or [B, T, H] (rows 0..batch_size-1)."""
  if x.ndim not in (3, 4):
    raise ValueError(f"left_align_kv_cache takes x of rank 3 or 4, got shape {x.shape}.")
  pad = [(0, max_prefix_len)] + [(0, 0)] * (x.ndim - 2)
  for i in range(batch_size):
    padded = jnp.pad(x[i], pad, constant_values=x.dtype.type(pad_value))
    start = [max_prefix_len - prefix_lengths[i]] + [0] * (x.ndim - 2)
    x = x.at[i].set(jax.lax.dynamic_slice(padded, start, x.shape[1:]))
  return x


def concat_suffix_and_left_align(
  decoded_tensors: JTensor,
  suffix_tensors: JTensor,
  decode_end_indices: JTensor,
  prefix_lengths: JTensor,
  max_prefix_len: int,
  num_samples: int,
  num_suffix: int,
  pad_value: float,
) -> JTensor:
  """Writes each suffix after its decoded row's end, then left-aligns.

  Args:
    decoded_tensors: [B * num_samples, T], middle-aligned.
    suffix_tensors: [B * num_samples * num_suffix, L].
    decode_end_indices: [B * num_samples], first index after the decoded tokens.
    prefix_lengths: [B * num_samples].
    max_prefix_len: the prefix slot length.
    num_samples: samples per example.
    num_suffix: suffixes per sample.
    pad_value: fill value.

  Returns:
    [B, num_suffix, num_samples, T + L].
  """
  rows, suffix_len = suffix_tensors.shape
  repeated = jnp.repeat(decoded_tensors, num_suffix, axis=0)
  padded = jnp.pad(
    repeated, [(0, 0), (0, suffix_len)], constant_values=decoded_tensors.dtype.type(pad_value)
  )
  ends = jnp.repeat(decode_end_indices, num_suffix, axis=0)
  joined = jax.vmap(lambda r, s, e: jax.lax.dynamic_update_slice(r, s, [e]))(
    padded, suffix_tensors, ends
  )
  aligned = left_align_tensor(
    joined, jnp.repeat(prefix_lengths, num_suffix, axis=0), max_prefix_len, pad_value=pad_value
  )
  aligned = aligned.reshape(rows // (num_samples * num_suffix), num_samples, num_suffix, -1)
  return jnp.transpose(aligned, (0, 2, 1, 3))


def _end_with_sequence_single(stop_sequence: JTensor, output_ids: JTensor, decode_step) -> JTensor:
  """Whether output_ids[..decode_step] ends with stop_sequence (left-padded with 0 = any)."""
  n = stop_sequence.shape[0]
  window = jax.lax.dynamic_slice(jnp.pad(output_ids, [n, 0]), [decode_step + 1], [n])
  return jnp.all((window == stop_sequence) | (stop_sequence == 0), axis=-1)


def end_with_sequences(stop_sequences: JTensor, output_ids: JTensor, decode_step) -> JTensor:
  """Per row b: does output_ids[b] end at decode_step with stop_sequences[b]? -> [B]."""
  return jax.vmap(_end_with_sequence_single, in_axes=(0, 0, None))(
    stop_sequences, output_ids, decode_step
  )


@functools.partial(jax.vmap, in_axes=(0, 0, 0))  # batch
@functools.partial(jax.vmap, in_axes=(None, None, 0))  # positions to check
@functools.partial(jax.vmap, in_axes=(0, None, None))  # stop sequences
def end_with_any_sequence_any_position(stop_sequence, output_ids, decode_step):
  """[B, P, num_stop] matches of stop sequences [B, num_stop, L] in output_ids [B, T] ending at
  decode_step [B, P]."""
  return _end_with_sequence_single(stop_sequence, output_ids, decode_step)


def find_first_new_stop_seq_match(
  first_new_decode_idx: JTensor, num_new_tokens: int, stop_sequences: JTensor, sequences: JTensor
) -> JTensor:
  """[B] offset (from first_new_decode_idx) of the first new position that ends a stop
  sequence; num_new_tokens where none does."""
  positions = first_new_decode_idx[:, None] + jnp.arange(num_new_tokens)[None, :]  # [B, P]
  hit = jnp.any(
    end_with_any_sequence_any_position(stop_sequences, sequences, positions), axis=-1
  )  # [B, P]
  # Count the leading misses: cummin of "missed" stays 1 until the first hit.
  return jnp.sum(jax.lax.cummin(1 - hit.astype(jnp.int32), axis=1), axis=-1)


def has_any_eos(arr: JTensor, eos_ids: int | Sequence[int]) -> JTensor:
  """Elementwise: is arr one of eos_ids?"""
  eos = jnp.asarray(eos_ids, jnp.int32).reshape([1] * arr.ndim + [-1])
  return jnp.any(arr[..., None] == eos, axis=-1)


def coerce_to_expanded_extend_step_fn(
  extend_step_fn: ExtendStepFn | ExpandedExtendStepFn,
) -> ExpandedExtendStepFn:
  """fn(model, ids, segment_pos) -> fn(model, ids, segment_pos, decode_loop_state)."""
  if len(inspect.signature(extend_step_fn).parameters) == 4:
    return extend_step_fn

  def expanded(model, extend_ids, segment_pos, decode_loop_state):
    del decode_loop_state
    return extend_step_fn(model, extend_ids, segment_pos)

  return expanded


def collect_results_to_optimize_eos(result: NestedMap, decode_length_shift: int = 0) -> NestedMap:
  """Ends each row where adding EOS scores best (Pax's optimize_eos).

  `result` holds output_ids, logprobs, eos_ids and eos_logprobs [B, T], start_step, done,
  has_eos; the row ends at the position maximising (sum of logprobs before it) + eos_logprob
  there, which gets the EOS id and logprob; later positions are cleared.
  """
  new = result.DeepCopy()
  big_negative = py_utils.get_large_negative_number(jnp.float32)
  steps = jnp.arange(new.logprobs.shape[1])
  before_start = steps <= result.start_step
  cumulative = jnp.where(before_start, 0.0, jnp.cumsum(new.logprobs, -1))
  eos_logprobs = jnp.where(
    steps[: new.eos_logprobs.shape[1]] <= result.start_step, big_negative, new.eos_logprobs
  )
  end_scores = jnp.pad(cumulative, [(0, 0), (1, 0)])[:, :-1] + eos_logprobs
  best = jnp.argmax(end_scores, -1)  # [B]
  rows = jnp.arange(new.output_ids.shape[0])
  after = jnp.arange(new.output_ids.shape[1])[None, :] > best[:, None]
  new.output_ids = new.output_ids.at[rows, best].set(new.eos_ids[rows, best])
  new.output_ids = jnp.where(after, 0, new.output_ids)
  new.logprobs = new.logprobs.at[rows, best].set(new.eos_logprobs[rows, best])
  new.logprobs = jnp.where(after, 1.0, new.logprobs)
  new.decode_lengths = best + 1 - decode_length_shift
  new.done = jnp.ones_like(new.done)
  new.has_eos = jnp.ones_like(new.has_eos)
  del new.eos_logprobs
  del new.eos_ids
  return new
