"""Tests for SpectrumAugmenter: masks are whole spans, inside the utterance, and only in training."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import spectrum_augmenter


def _spans(row):
  """The (start, length) of each run of zeros in a 0/1 row."""
  out, start = [], None
  for i, v in enumerate(list(row) + [1]):
    if v == 0 and start is None:
      start = i
    if v != 0 and start is not None:
      out.append((start, i - start))
      start = None
  return out


class SpectrumAugmenterTest(absltest.TestCase):
  def _run(self, do_eval=False, **fields):
    layer = pax_fiddle.Config(
      spectrum_augmenter.SpectrumAugmenter, name="specaug", **fields
    ).Instantiate()
    inputs = jnp.ones((4, 30, 12))
    paddings = jnp.zeros((4, 30)).at[:, 20:].set(1.0)  # 20 frames per utterance
    with base_layer.JaxContext.new_context(hparams=base_layer.JaxContext.HParams(do_eval=do_eval)):
      out, out_paddings = layer.apply({}, inputs, paddings, rngs={"random": jax.random.key(3)})
    np.testing.assert_array_equal(out_paddings, paddings)
    return np.asarray(out)

  def test_time_masks(self):
    out = self._run(
      freq_mask_max_bins=0,
      time_mask_count=1,
      time_mask_max_frames=6,
      use_dynamic_time_mask_max_frames=False,
      time_mask_max_ratio=1.0,
    )
    for b in range(4):
      frames = out[b, :, 0]
      self.assertTrue(np.all(out[b] == frames[:, None]))  # whole frames are masked
      for start, length in _spans(frames):
        self.assertLessEqual(start + length, 20)
        self.assertLess(length, 6)

  def test_frequency_masks(self):
    out = self._run(
      freq_mask_max_bins=4,
      freq_mask_count=2,
      time_mask_max_frames=0,
      use_dynamic_time_mask_max_frames=False,
    )
    for b in range(4):
      bins = out[b, 0]
      self.assertTrue(np.all(out[b] == bins[None, :]))  # the same bins at every frame
      self.assertGreaterEqual(bins.sum(), 12 - 2 * 3)

  def test_eval_is_identity_unless_asked(self):
    np.testing.assert_array_equal(self._run(do_eval=True, freq_mask_max_bins=6), 1.0)
    self.assertLess(self._run(do_eval=True, freq_mask_max_bins=6, augment_at_eval=True).min(), 1)


if __name__ == "__main__":
  absltest.main()
