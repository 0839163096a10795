"""Pax's SpectrumAugmenter: SpecAugment (arXiv:1904.08779) time and frequency masking.

Inputs [B, T, F] features, paddings [B, T]. In training (or with augment_at_eval) it zeroes up to
`time_mask_count` random spans of frames within each utterance, then `freq_mask_count` random
bands of frequency bins. Randomness: the 'random' rng stream (`next_prng_key`), four draws in a
fixed order (time lengths, time starts, frequency lengths, frequency starts), as Pax, so the same
key gives Pax's masks.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import py_utils

JTensor = jax.Array


class SpectrumAugmenter(base_layer.BaseLayer):
  """SpecAugment's masking.

  Attributes:
    freq_mask_max_bins: longest frequency mask (0: no frequency masking).
    freq_mask_count: number of frequency masks.
    use_dynamic_time_mask_max_frames: the longest time mask is time_mask_max_ratio * the
      utterance's length (time_mask_max_frames is ignored).
    time_mask_max_frames: longest time mask otherwise.
    time_mask_count: number of time masks (an upper bound with time_masks_per_frame).
    time_mask_max_ratio: largest fraction of an utterance one time mask covers.
    time_masks_per_frame: if > 0, use min(time_masks_per_frame * length, time_mask_count) masks.
    augment_at_eval: mask in eval too.
  """

  freq_mask_max_bins: int = 27
  freq_mask_count: int = 2
  use_dynamic_time_mask_max_frames: bool = True
  time_mask_max_frames: int = 40
  time_mask_count: int = 10
  time_mask_max_ratio: float = 0.05
  time_masks_per_frame: float = 0.0
  augment_at_eval: bool = False

  def _get_mask(
    self,
    batch_size: int,
    choose_range: JTensor,
    mask_size: int,
    max_length: int | None = None,
    masks_per_frame: float = 0.0,
    multiplicity: int = 1,
    max_ratio: float = 1.0,
  ) -> JTensor:
    """[B, mask_size] of 1.0 (kept) / 0.0 (masked): `multiplicity` spans per row, each inside
    [0, choose_range[b]), at most max_length (or choose_range * max_ratio) long."""
    if max_length and max_length > 0:
      longest = jnp.full((batch_size,), max_length)
    else:
      longest = choose_range * max_ratio  # [B]
    portion = jax.random.uniform(self.next_prng_key(), (batch_size, multiplicity))
    lengths = (longest[:, None] * portion).astype(jnp.int32)  # [B, M]
    ranges = jnp.broadcast_to(choose_range[:, None], (batch_size, multiplicity))
    bound = jnp.maximum((max_ratio * ranges).astype(jnp.int32), 1)
    lengths = jnp.minimum(lengths, bound)
    start_u = jax.random.uniform(self.next_prng_key(), (batch_size, multiplicity))
    starts = (start_u * (ranges - lengths + 1)).astype(jnp.int32)  # [B, M]
    ends = starts + lengths - 1  # inclusive
    positions = jnp.arange(mask_size)[None, None, :]  # [1, 1, S]
    # A tolerance of 0.1 makes the integer bounds inclusive.
    in_span = jnp.logical_and(
      positions > (starts - 0.1)[..., None], positions < (ends + 0.1)[..., None]
    ).astype(jnp.int32)  # [B, M, S]
    if masks_per_frame > 0:
      used = (jnp.arange(multiplicity)[None, :] < masks_per_frame * ranges).astype(jnp.int32)
      covered = jnp.einsum("bms,bm->bs", in_span, used)
    else:
      covered = jnp.sum(in_span, axis=1)  # [B, S]
    return 1.0 - (covered > 0).astype(jnp.int32)

  def _time_mask(self, inputs: JTensor, length: JTensor) -> JTensor:
    """inputs [B, T, F], length [B] frames -> inputs with time masks applied."""
    max_frames = self.time_mask_max_frames
    if (max_frames == 0 and not self.use_dynamic_time_mask_max_frames) or (
      self.time_mask_max_ratio <= 0.0
    ):
      return inputs
    if self.time_mask_count == 0:
      return inputs
    batch_size, time_length, _ = inputs.shape
    mask = self._get_mask(
      batch_size,
      choose_range=length,
      mask_size=time_length,
      max_length=None if self.use_dynamic_time_mask_max_frames else max_frames,
      masks_per_frame=self.time_masks_per_frame,
      multiplicity=self.time_mask_count,
      max_ratio=self.time_mask_max_ratio,
    )  # [B, T]
    return jnp.einsum("bxy,bx->bxy", inputs, mask)

  def _frequency_mask(self, inputs: JTensor) -> JTensor:
    """inputs [B, T, F] -> inputs with frequency masks applied."""
    if self.freq_mask_max_bins == 0 or self.freq_mask_count == 0:
      return inputs
    batch_size, _, num_freq = inputs.shape
    mask = self._get_mask(
      batch_size,
      choose_range=jnp.full((batch_size,), num_freq),
      mask_size=num_freq,
      max_length=self.freq_mask_max_bins,
      masks_per_frame=0.0,
      multiplicity=self.freq_mask_count,
      max_ratio=1.0,
    )  # [B, F]
    return jnp.einsum("bxy,by->bxy", inputs, mask)

  def __call__(self, inputs: JTensor, paddings: JTensor) -> tuple[JTensor, JTensor]:
    """inputs [B, T, F], paddings [B, T] -> (masked inputs, paddings unchanged)."""
    if not self.do_eval or self.augment_at_eval:
      lengths = jnp.sum(1 - paddings, axis=1).astype(jnp.int32)  # [B]
      inputs = self._time_mask(inputs, lengths)
      inputs = self._frequency_mask(inputs)
    return inputs, paddings


# Pax's module-level names for the types and variable collections this module's API uses.
NestedMap = py_utils.NestedMap
