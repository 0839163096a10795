"""Tests of the synthetic LM input: contents, seeding, and resumable state."""

import json

from absl.testing import absltest
import numpy as np

from paxml import synthetic_input


def _input(**overrides):
  kwargs = dict(batch_size=4, seq_len=6, vocab_size=17, seed=3)
  kwargs.update(overrides)
  return synthetic_input.SyntheticLmInput(**kwargs)


class SyntheticLmInputTest(absltest.TestCase):
  def test_keys_shapes_and_dtypes(self):
    batch = _input().get_next()
    want = {
      "ids": np.int32,
      "labels": np.int32,
      "weights": np.float32,
      "paddings": np.float32,
      "segment_ids": np.int32,
      "segment_pos": np.int32,
    }
    self.assertEqual(set(batch), set(want))
    for key, dtype in want.items():
      with self.subTest(key=key):
        self.assertEqual(batch[key].shape, (4, 6))
        self.assertEqual(batch[key].dtype, dtype)
    np.testing.assert_array_equal(batch["weights"], 1.0)
    np.testing.assert_array_equal(batch["paddings"], 0.0)
    np.testing.assert_array_equal(batch["segment_ids"], 1)
    np.testing.assert_array_equal(batch["segment_pos"], np.tile(np.arange(6), (4, 1)))

  def test_labels_are_ids_shifted_by_one(self):
    batch = _input().get_next()
    np.testing.assert_array_equal(batch["labels"][:, :-1], batch["ids"][:, 1:])

  def test_rows_are_learnable_progressions(self):
    vocab = 17
    batch = _input(batch_size=64, vocab_size=vocab, max_stride=5).get_next()
    ids, labels = batch["ids"], batch["labels"]
    self.assertTrue(((ids >= 0) & (ids < vocab)).all())
    # The next token follows from the previous two.
    np.testing.assert_array_equal(labels[:, 1:], (2 * ids[:, 1:] - ids[:, :-1]) % vocab)
    strides = (ids[:, 1] - ids[:, 0]) % vocab
    self.assertTrue(((strides >= 1) & (strides <= 5)).all())
    # Rows differ: starts and strides are random per row.
    self.assertGreater(len(set(ids[:, 0].tolist())), 5)
    self.assertGreater(len(set(strides.tolist())), 2)

  def test_same_seed_same_stream_and_batches_change(self):
    a, b = _input(seed=7), _input(seed=7)
    first_a, first_b = a.get_next(), b.get_next()
    np.testing.assert_array_equal(first_a["ids"], first_b["ids"])
    self.assertFalse(np.array_equal(a.get_next()["ids"], first_a["ids"]))
    self.assertFalse(np.array_equal(_input(seed=8).get_next()["ids"], first_a["ids"]))

  def test_hosts_get_different_streams(self):
    host0 = _input(infeed_host_index=0).get_next()
    host1 = _input(infeed_host_index=1).get_next()
    self.assertFalse(np.array_equal(host0["ids"], host1["ids"]))

  def test_restored_state_continues_without_replaying(self):
    original = _input(seed=None)  # A fresh random seed, as in training.
    for _ in range(3):
      original.get_next()
    saved = json.loads(json.dumps(original.get_state()))  # As a checkpoint stores it.
    self.assertEqual(saved["num_batches"], 3)
    expected = [original.get_next()["ids"] for _ in range(2)]

    resumed = _input(seed=None)
    self.assertFalse(np.array_equal(resumed.get_next()["ids"], expected[0]))
    resumed.set_state(saved)
    for want in expected:
      np.testing.assert_array_equal(resumed.get_next()["ids"], want)

  def test_unseeded_inputs_differ(self):
    self.assertFalse(
      np.array_equal(_input(seed=None).get_next()["ids"], _input(seed=None).get_next()["ids"])
    )

  def test_bad_arguments_explain_the_range(self):
    with self.assertRaisesRegex(ValueError, r"max_stride must lie in .* = \[1, 16\], got 17"):
      _input(max_stride=17)
    with self.assertRaisesRegex(ValueError, "vocab_size must be at least 2"):
      _input(vocab_size=1)
    with self.assertRaisesRegex(ValueError, "must be positive"):
      _input(seq_len=0)


if __name__ == "__main__":
  absltest.main()
