"""MaskedLmDataAugmenter's rates and padding; TemporalShifting against numpy shifts."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import augmentations


class MaskedLmTest(absltest.TestCase):
  def test_rates_and_padding(self):
    cfg = pax_fiddle.Config(
      augmentations.MaskedLmDataAugmenter,
      name="mlm",
      vocab_size=1000,
      mask_token_id=0,
      mask_prob=0.3,
      random_prob=0.1,
      same_prob=0.1,
    )
    layer = base_layer.instantiate(cfg)
    ids = jnp.arange(1, 20001, dtype=jnp.int32).reshape(4, 5000) % 997 + 1
    paddings = jnp.zeros((4, 5000)).at[:, 4000:].set(1.0)
    out, chosen = layer.apply({}, ids, paddings, rngs={"random": jax.random.PRNGKey(0)})
    out, chosen, ids = np.asarray(out), np.asarray(chosen), np.asarray(ids)
    self.assertEqual(chosen[:, 4000:].sum(), 0)  # padded tokens are never chosen
    np.testing.assert_array_equal(out[chosen == 0], ids[chosen == 0])
    n = 16000
    self.assertAlmostEqual(chosen[:, :4000].sum() / n, 0.5, delta=0.02)
    self.assertAlmostEqual((out == 0).sum() / n, 0.3, delta=0.02)
    changed = (out != ids) & (out != 0)
    self.assertAlmostEqual(changed.sum() / n, 0.1, delta=0.02)


class TemporalShiftingTest(absltest.TestCase):
  def test_each_example_is_shifted_with_zero_fill(self):
    cfg = pax_fiddle.Config(
      augmentations.TemporalShifting, name="s", shift_range_ms=3.0, sample_rate=1000.0
    )
    layer = base_layer.instantiate(cfg)
    x = np.arange(1, 41, dtype=np.float32).reshape(4, 10)
    pad = np.zeros((4, 10), np.float32)
    out, out_pad = layer.apply({}, x, pad, rngs={"random": jax.random.PRNGKey(3)})
    out, out_pad = np.asarray(out), np.asarray(out_pad)
    for b in range(4):
      # Find the shift from the first row value's new place, then rebuild it with numpy.
      shifts = [s for s in range(-3, 4) if np.array_equal(out[b], _np_shift(x[b], s, 0.0))]
      self.assertLen(shifts, 1)
      np.testing.assert_array_equal(out_pad[b], _np_shift(pad[b], shifts[0], 1.0))
    with base_layer.JaxContext.new_context(hparams=base_layer.JaxContext.HParams(do_eval=True)):
      np.testing.assert_array_equal(layer.apply({}, x, pad)[0], x)


def _np_shift(row, shift, fill):
  """row moved right by -shift (shift < 0) or left by shift: out[i] = row[i + shift]."""
  out = np.full_like(row, fill)
  for i in range(len(row)):
    if 0 <= i + shift < len(row):
      out[i] = row[i + shift]
  return out


if __name__ == "__main__":
  absltest.main()
