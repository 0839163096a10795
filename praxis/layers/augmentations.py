"""Data augmentation layers: BERT-style token masking and random temporal shifts of audio.

Both draw from the "random" rng stream (`rngs={"random": key}`).
"""

from __future__ import annotations

import jax
from jax import lax
import jax.numpy as jnp

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes


class MaskedLmDataAugmenter(base_layer.BaseLayer):
  """BERT's masked-LM corruption (arXiv:1810.04805): mask, randomise or keep chosen tokens.

  Each valid token is chosen with probability mask_prob + random_prob + same_prob; a chosen
  token becomes mask_token_id (mask_prob), a uniformly random id (random_prob) or stays itself
  (same_prob). The draws follow Pax's order: chosen positions, then mask among them, then
  random among the rest, then the random ids.

  Attributes:
    vocab_size: number of token ids (random ids are drawn from [0, vocab_size)).
    mask_prob: probability that a token becomes mask_token_id.
    random_prob: probability that a token becomes a random id.
    same_prob: probability that a token is chosen but kept.
    mask_token_id: the <MASK> id.
  """

  vocab_size: int = 0
  mask_prob: float = 0.12
  random_prob: float = 0.015
  same_prob: float = 0.015
  mask_token_id: int = -1

  def _check(self) -> None:
    total = self.mask_prob + self.random_prob + self.same_prob
    if self.vocab_size <= 0 or self.mask_token_id < 0:
      raise ValueError(
        f"MaskedLmDataAugmenter needs vocab_size > 0 and mask_token_id >= 0, got "
        f"{self.vocab_size} and {self.mask_token_id}."
      )
    if not 0.0 < total < 1.0 or total - self.mask_prob <= 0.0:
      raise ValueError(
        "MaskedLmDataAugmenter needs 0 < mask_prob + random_prob + same_prob < 1 and "
        f"random_prob + same_prob > 0; got {self.mask_prob}, {self.random_prob}, {self.same_prob}."
      )

  def __call__(self, inputs: jax.Array, paddings: jax.Array) -> tuple[jax.Array, jax.Array]:
    """inputs int [B, T], paddings [B, T] (1 = padded) -> (new ids [B, T], chosen 0/1 [B, T])."""
    self._check()
    dtype = self.fprop_dtype

    def bernoulli(p: float) -> jax.Array:  # [B, T] 0/1 in fprop_dtype
      return (jax.random.uniform(self.next_prng_key(), inputs.shape) < p).astype(dtype)

    total = self.mask_prob + self.random_prob + self.same_prob
    chosen = (1.0 - paddings.astype(dtype)) * bernoulli(total)
    # Conditional probabilities: P(mask | chosen), then P(random | chosen, not masked).
    mask_pos = chosen * bernoulli(self.mask_prob / total)
    rest = chosen - mask_pos
    random_pos = rest * bernoulli(self.random_prob / (total - self.mask_prob))
    same_pos = rest - random_pos
    random_ids = jax.random.randint(
      self.next_prng_key(), inputs.shape, 0, self.vocab_size, inputs.dtype
    )
    as_int = lambda m: m.astype(inputs.dtype)
    augmented = (
      inputs * as_int(1.0 - chosen)
      + self.mask_token_id * as_int(mask_pos)
      + random_ids * as_int(random_pos)
      + inputs * as_int(same_pos)
    )
    return augmented, chosen


class TemporalShifting(base_layer.BaseLayer):
  """Shifts each example along time by a random whole number of samples while training.

  The shift is uniform in [-R, R] samples, R = round(sample_rate * shift_range_ms / 1000);
  vacated samples are zero (paddings: 1). Eval returns the input unchanged.

  Attributes:
    shift_range_ms: the largest shift, in milliseconds; must be shorter than the signal.
    sample_rate: samples per second.
    axis: the time axis (> 0: axis 0 is the batch).
  """

  shift_range_ms: float = 0.0
  sample_rate: float = 16000.0
  axis: int = 1

  def setup(self) -> None:
    if self.shift_range_ms < 0.0 or self.axis <= 0:
      raise ValueError(
        f"TemporalShifting needs shift_range_ms >= 0 and axis > 0 (0 is the batch), got "
        f"{self.shift_range_ms} and {self.axis}."
      )

  @staticmethod
  def _shift_one(x: jax.Array, axis: int, max_shift: int, shift: jax.Array, fill: float):
    """x shifted by `shift` (|shift| <= max_shift) along axis; `fill` comes in at the edge."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (max_shift, max_shift)
    padded = jnp.pad(x, widths, constant_values=fill)
    return lax.dynamic_slice_in_dim(padded, max_shift + shift, x.shape[axis], axis=axis)

  def __call__(
    self, features: jax.Array, paddings: jax.Array | None = None
  ) -> tuple[jax.Array, jax.Array | None]:
    """features [B, T, ...], paddings [B, T] or None -> both shifted, per example."""
    if self.do_eval or self.shift_range_ms == 0.0:
      return features, paddings
    max_shift = int(round(self.sample_rate * self.shift_range_ms / 1000.0))
    if max_shift >= features.shape[self.axis]:
      length_ms = features.shape[self.axis] / self.sample_rate * 1000.0
      raise ValueError(
        f"TemporalShifting shift_range_ms={self.shift_range_ms} could blank out the whole "
        f"{length_ms}ms signal; make it smaller."
      )
    shifts = jax.random.randint(
      self.next_prng_key(), [features.shape[0]], -max_shift, max_shift + 1
    )  # [B]
    axis = self.axis - 1  # inside vmap the batch dim is gone

    def shift_example(x, pad, shift):
      x = self._shift_one(x, axis, max_shift, shift, 0.0)
      if pad is not None:
        pad = self._shift_one(pad, axis, max_shift, shift, 1.0)
      return x, pad

    return jax.vmap(shift_example)(features, paddings, shifts)


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap
