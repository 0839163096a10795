"""Pax's CTC helpers on top of optax's CTC loss: alignments, validity, forced alignment.

Shapes: B batch, T frames, K classes, N labels. `logits` [B, T, K] (log-probabilities),
`logitpaddings` [B, T] (any position), `labels` [B, N] right-padded by `labelpaddings` [B, N].

ctc_loss_with_alignments runs optax's forward (alpha) recursion, and the same recursion on the
time- and label-reversed problem for the backward (beta) one; a frame's state log-probability is
alpha + beta per label state (0: before the first label, n: at label n). The best alignment walks
the frames keeping the label state monotone (it stays or advances by one), within the states a
frame can reach given how many frames are left.
"""

from __future__ import annotations

import dataclasses
from typing import Union

import jax
import jax.numpy as jnp
import numpy as np
import optax

JTensor = jax.Array
ArrayLike = Union[np.ndarray, JTensor]


def _shift(values: JTensor, shift_amounts: JTensor, pad_value) -> JTensor:
  """Shifts each row of `values` right along the last axis by its own amount (negative: left),
  filling vacated places with pad_value (no wrap-around)."""
  cols = values.shape[-1]
  source = jnp.arange(cols) - shift_amounts.astype(jnp.int32)[..., None]  # [..., cols]
  source = jnp.broadcast_to(source, values.shape)
  outside = jnp.logical_or(source < 0, source >= cols)
  taken = jnp.take_along_axis(values, jnp.where(outside, 0, source), axis=-1)
  return jnp.where(outside, jnp.asarray(pad_value, values.dtype), taken)


@dataclasses.dataclass
class CtcAlignments:
  """What ctc_loss_with_alignments computes besides the loss.

  alignment: [B, T] the label state of each frame on the best path (0: before the first label,
    n >= 1: label n, 1-based).
  logalpha_phi: [T, B, N+1] forward log-probability of being in a state (not emitting) at t.
  logalpha_emit: [T, B, N] forward log-probability of emitting label n at t.
  logbeta_phi: [T, B, N+1] the same, backward from the end.
  logbeta_emit: [T, B, N] the same, backward from the end.
  state_logprobs: [T, B, N+1] log-probability of each label state at each frame.
  """

  alignment: np.ndarray
  logalpha_phi: np.ndarray
  logalpha_emit: np.ndarray
  logbeta_phi: np.ndarray
  logbeta_emit: np.ndarray
  state_logprobs: np.ndarray


def ctc_loss_with_alignments(
  logits: ArrayLike,
  logitpaddings: ArrayLike,
  labels: ArrayLike,
  labelpaddings: ArrayLike,
  blank_id: int = 0,
  logepsilon: float = -1e5,
) -> tuple[JTensor, CtcAlignments]:
  """(per-sequence loss [B], CtcAlignments); logepsilon stands for log(0)."""
  logits, logitpaddings = jnp.asarray(logits), jnp.asarray(logitpaddings)
  labels, labelpaddings = jnp.asarray(labels), jnp.asarray(labelpaddings)
  per_seq_loss, logalpha_phi, logalpha_emit = optax.ctc_loss_with_forward_probs(
    logits, logitpaddings, labels, labelpaddings, blank_id=blank_id, log_epsilon=logepsilon
  )
  # Backward pass = forward pass of the reversed problem. Reversed labels are right-padded
  # again by shifting each row left by its number of paddings.
  num_label_pads = jnp.sum(labelpaddings, axis=1)  # [B]
  reversed_labels = _shift(jnp.flip(labels, axis=1), -num_label_pads, 0)
  _, rev_phi, rev_emit = optax.ctc_loss_with_forward_probs(
    jnp.flip(logits, axis=1),
    jnp.flip(logitpaddings, axis=1),
    reversed_labels,
    labelpaddings,
    blank_id=blank_id,
    log_epsilon=logepsilon,
  )
  # Back to forward time and label order: flip time (axis 0) and states (axis 2), then undo the
  # label shift.
  logbeta_phi = _shift(jnp.flip(rev_phi, axis=(0, 2)), -num_label_pads, logepsilon)
  logbeta_emit = _shift(jnp.flip(rev_emit, axis=(0, 2)), -num_label_pads, logepsilon)

  def state_logprob(emit, phi):  # emitting label n or staying in state n, per state [T, B, N+1]
    emit = jnp.pad(emit, [(0, 0), (0, 0), (1, 0)], constant_values=logepsilon)
    return jnp.logaddexp(emit, phi)

  state_logprobs = state_logprob(logalpha_emit, logalpha_phi) + state_logprob(
    logbeta_emit, logbeta_phi
  )  # [T, B, N+1]

  batch_size, num_frames, _ = logits.shape
  num_labels = labels.shape[1]
  frame_len = (num_frames - jnp.sum(logitpaddings, axis=-1))[:, None]  # [B, 1]
  label_len = (num_labels - jnp.sum(labelpaddings, axis=-1))[:, None]  # [B, 1]
  # The lowest state frame t can be in and still reach the last label by the end.
  min_state = jnp.arange(num_frames)[None, :] - (frame_len - label_len)  # [B, T]
  min_state = jnp.clip(min_state, 0, None)
  min_state = jnp.where(min_state > label_len, label_len, min_state).astype(jnp.int32)
  states = jnp.arange(num_labels + 1)[None, :]  # [1, N+1]

  def pick(prev_state, xs):
    frame_logprobs, frame_min = xs  # [B, N+1], [B]
    low = jnp.maximum(prev_state, frame_min)[:, None]
    allowed = jnp.logical_and(states >= low, states <= prev_state[:, None] + 1)
    best = jnp.argmax(jnp.where(allowed, frame_logprobs, logepsilon), axis=-1)
    return best, best

  _, alignment = jax.lax.scan(
    pick, jnp.zeros((batch_size,), jnp.int32), (state_logprobs, jnp.transpose(min_state))
  )
  return per_seq_loss, CtcAlignments(
    alignment=jnp.transpose(alignment),
    logalpha_phi=logalpha_phi,
    logalpha_emit=logalpha_emit,
    logbeta_phi=logbeta_phi,
    logbeta_emit=logbeta_emit,
    state_logprobs=state_logprobs,
  )


def is_valid_ctc_seq(logitpaddings: JTensor, labels: JTensor, labelpaddings: JTensor) -> JTensor:
  """[B] 1.0 where CTC can align the labels: frames >= labels + consecutive repeats, else 0.0.

  (An impossible sequence gets a huge loss, -logepsilon, that should be ignored.)
  """
  label_lengths = jnp.sum(1.0 - labelpaddings, axis=-1)
  input_lengths = jnp.sum(1.0 - logitpaddings, axis=-1)
  repeats = (1.0 - labelpaddings[:, 1:]) * (labels[:, :-1] == labels[:, 1:])
  return (label_lengths + jnp.sum(repeats, axis=-1) <= input_lengths).astype(jnp.float32)


def frame_alignment_to_label_alignment(
  frame_alignment: ArrayLike, frame_paddings: ArrayLike
) -> tuple[JTensor, JTensor]:
  """frame_alignment [B, T] (label state per frame) -> (label_alignment [B, T]: the first frame
  of each label, 0 after the last label; label_lengths [B])."""
  frame_alignment = jnp.asarray(frame_alignment)
  valid = 1 - jnp.asarray(frame_paddings).astype(jnp.int32)  # [B, T]
  batch_size, num_frames = frame_alignment.shape
  previous = jnp.concatenate(
    [jnp.full([batch_size, 1], -1, frame_alignment.dtype), frame_alignment[:, :-1]], axis=-1
  )
  # A label starts where the state changes to a label state (not 0) on an unpadded frame.
  starts = (previous != frame_alignment).astype(jnp.int32) * valid
  starts = starts * (frame_alignment != 0).astype(jnp.int32)
  label_lengths = jnp.sum(starts, axis=-1)
  never = num_frames + 1
  frames = jnp.broadcast_to(jnp.arange(num_frames, dtype=jnp.int32), (batch_size, num_frames))
  label_alignment = jnp.sort(jnp.where(starts > 0, frames, never), axis=-1)
  label_alignment = jnp.where(label_alignment == never, 0, label_alignment)
  return label_alignment, label_lengths


def forced_alignment(
  logits: ArrayLike,
  logitpaddings: ArrayLike,
  labels: ArrayLike,
  labelpaddings: ArrayLike,
  blank_id: int = 0,
) -> JTensor:
  """[B, N]: the first frame of each label on the best CTC path; -1 for a whole row that CTC
  cannot align (too few frames)."""
  logitpaddings, labels = jnp.asarray(logitpaddings), jnp.asarray(labels)
  labelpaddings = jnp.asarray(labelpaddings)
  _, aux = ctc_loss_with_alignments(logits, logitpaddings, labels, labelpaddings, blank_id)
  label_alignment, _ = frame_alignment_to_label_alignment(aux.alignment, logitpaddings)
  valid = is_valid_ctc_seq(logitpaddings, labels, labelpaddings)  # [B]
  label_alignment = jnp.where(valid[:, None] > 0, label_alignment, -1)
  return label_alignment[:, : labels.shape[-1]]
