"""Tests for asrio: word pieces, framing, the mel matrix, edit distances."""

import tempfile

from absl.testing import absltest
import jax
import numpy as np
import tensorflow as tf

from paxml.toolkit.example_lib import asrio

_PIECES = ["<unk>", "▁", "a", "b", "ab", "▁ab", "ba"]


def _vocab(**kwargs) -> asrio.WpmVocab:
  with tempfile.NamedTemporaryFile("w", suffix=".vocab", delete=False) as f:
    # A second column (a sentencepiece score) must be ignored.
    f.write("\n".join(f"{p}\t-{i}.5" for i, p in enumerate(_PIECES)) + "\n")
  return asrio.WpmVocab.load(f.name, **kwargs)


class WpmTest(absltest.TestCase):
  def test_load_numbers_pieces_by_line(self):
    vocab = _vocab()
    self.assertEqual(vocab.str2id["▁ab"], 5)
    self.assertEqual(vocab.id2str[6], "ba")
    self.assertLen(vocab, 7)
    self.assertEqual(vocab.no_token, 7)
    self.assertLen(_vocab(size_limit=3), 3)

  def test_encode_merges_the_lowest_id_pair_first(self):
    vocab = _vocab()
    # ▁ a b a b -> "ab" (id 4) twice beats "ba" (6), leftmost first; then "▁ab".
    self.assertEqual(asrio.wpm_encode(vocab, "abab"), [5, 4])
    # Unknown characters become <unk> and never merge.
    self.assertEqual(asrio.wpm_encode(vocab, "abc"), [5, 0])

  def test_sentence_round_trip(self):
    vocab = _vocab()
    ids = asrio.wpm_encode_sentence(vocab, b"ABAB ab")
    self.assertEqual(ids, [5, 4, 5])
    self.assertEqual(asrio.wpm_decode_sentence(vocab, ids), "abab ab")
    self.assertEqual(asrio.wpm_decode_sentence(vocab, [5, 99]), "ab█")


class SignalTest(absltest.TestCase):
  def test_frame(self):
    x = np.arange(20, dtype=np.int16).reshape(2, 10)
    frames = asrio.frame(x, 4, 3)
    self.assertEqual(frames.dtype, np.int16)
    np.testing.assert_array_equal(frames[1], [[10, 11, 12, 13], [13, 14, 15, 16], [16, 17, 18, 19]])
    padded = jax.jit(lambda v: asrio.frame(v, 4, 3, pad_end=True, pad_value=-1))(x)
    self.assertEqual(padded.shape, (2, 4, 4))  # ceil(10 / 3) frames.
    np.testing.assert_array_equal(padded[0, -1], [9, -1, -1, -1])

  def test_mel_matrix_matches_tensorflow(self):
    for args in [(8, 23), (80, 257, 16000.0, 125.0, 7600.0), (20, 129, 8000, 0.0, 4000.0)]:
      expected = tf.signal.linear_to_mel_weight_matrix(*args).numpy()
      np.testing.assert_allclose(asrio.linear_to_mel_weight_matrix(*args), expected, atol=2e-5)

  def test_mel_matrix_rejects_edges_above_nyquist(self):
    with self.assertRaisesRegex(ValueError, "Nyquist"):
      asrio.linear_to_mel_weight_matrix(8, 23, sample_rate=8000, upper_edge_hertz=4001.0)

  def test_next_pow_of_two(self):
    self.assertEqual([asrio.next_pow_of_two(x) for x in (1, 3, 400, 512)], [1, 4, 512, 512])


class EditDistanceTest(absltest.TestCase):
  def test_counts(self):
    self.assertEqual(asrio.compute_edit_distance("abc", "abc"), (0, 0, 0))
    self.assertEqual(asrio.compute_edit_distance("", "abc"), (0, 3, 0))
    self.assertEqual(asrio.compute_edit_distance("abc", ""), (0, 0, 3))
    # hyp "kitten" vs ref "sitting": k->s, e->i, and the reference's g is missing.
    self.assertEqual(asrio.compute_edit_distance("kitten", "sitting"), (2, 1, 0))
    self.assertEqual(asrio.compute_edit_distance("ab", "cd"), (2, 0, 0))

  def test_sequence_error_accumulates(self):
    err = asrio.SequenceError().accumulate("a b c".split(), "a x c d".split())
    err = err.accumulate(["e"], ["e"])
    self.assertEqual((err.refs, err.subs, err.dels, err.inss), (5, 1, 1, 0))
    self.assertAlmostEqual(err.error_rate, 2 / 5)
    self.assertEqual(err.hyps, 4)


class PaddedBatchTest(absltest.TestCase):
  def test_normalizer(self):
    norm = asrio.MeanVarNormalizer(mean=np.array([1.0, 2.0]), stddev=np.array([2.0, 4.0]), n=None)
    np.testing.assert_allclose(norm.apply(np.array([[[3.0, 10.0]]])), [[[1.0, 2.0]]])

  def test_ctc_collapse(self):
    ids = np.array([[1, 1, 0, 1, 2, 2, 0, 0], [3, 0, 3, 3, 4, 4, 4, 9]])
    paddings = np.zeros(ids.shape)
    paddings[1, -1] = 1.0  # The 9 is padding.
    self.assertEqual(asrio.remove_ctc_blanks_and_repeats(ids, paddings), [[1, 1, 2], [3, 3, 4]])
    self.assertEqual(
      asrio.remove_ctc_blanks_and_repeats(ids, paddings, use_jnp=True), [[1, 1, 2], [3, 3, 4]]
    )


if __name__ == "__main__":
  absltest.main()
