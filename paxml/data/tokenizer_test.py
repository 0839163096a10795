"""Tests of the SentencePiece wrapper on a model trained here on generated text."""

import os
import random

from absl.testing import absltest
import numpy as np

from paxml.data import tokenizer as tokenizer_lib

_WORDS = (
  "the quick brown fox jumps over lazy dog and then runs away into forest where "
  "light falls upon water while birds sing"
).split()


def make_texts(n: int, seed: int = 0) -> list[str]:
  rng = random.Random(seed)
  return [
    " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 20))).capitalize() + "."
    for _ in range(n)
  ]


class TokenizerTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = absltest.get_default_test_tmpdir()
    cls.path = os.path.join(cls.dir, "tok.model")
    cls.tok = tokenizer_lib.train(make_texts(500), cls.path, vocab_size=320)

  def test_special_ids_and_size(self):
    self.assertEqual(self.tok.vocab_size, 320)
    self.assertEqual((self.tok.pad_id, self.tok.bos_id, self.tok.eos_id), (0, 2, 3))
    self.assertEqual(self.tok.id_to_piece(3), "</s>")

  def test_round_trip_exact(self):
    texts = make_texts(20, seed=1) + [
      "  Two  spaces, CAPITALS and\ttabs.",
      "Ünïcödé ∑ not in the training text: 日本",
    ]
    for text, ids in zip(texts, self.tok.encode(texts)):
      self.assertEqual(ids.dtype, np.int32)
      self.assertTrue(((ids > 3) & (ids < 320)).all(), text)  # no unk, no specials
      self.assertEqual(self.tok.decode(ids), text)

  def test_common_words_are_single_pieces(self):
    # A trained model compresses its training text: well under one id per character.
    text = " ".join(make_texts(50, seed=2))
    self.assertLess(len(self.tok.encode([text])[0]), 0.5 * len(text))

  def test_ids_to_strings_uses_lengths_and_drops_specials(self):
    a, b = self.tok.encode(["the fox", "lazy dog runs"])
    ids = np.zeros((2, 12), np.int32)
    ids[0, : len(a) + 1] = np.concatenate([[2], a])
    ids[1, : len(b)] = b
    ids[1, len(b)] = 3
    got = self.tok.ids_to_strings(ids, [len(a) + 1, len(b) + 1])
    self.assertEqual(got, ["the fox", "lazy dog runs"])
    self.assertEqual(self.tok.ids_to_strings(ids, [1, len(b) - 1])[0], "")

  def test_missing_model_names_the_file_and_the_fix(self):
    missing = os.path.join(self.dir, "nope.model")
    with self.assertRaisesRegex(FileNotFoundError, r"nope\.model.*paxml/data:prepare"):
      tokenizer_lib.Tokenizer(missing)

  def test_not_a_model(self):
    bad = os.path.join(self.dir, "bad.model")
    with open(bad, "w") as f:
      f.write("not a model")
    with self.assertRaisesRegex(ValueError, r"bad\.model.*not a SentencePiece model"):
      tokenizer_lib.Tokenizer(bad)


if __name__ == "__main__":
  absltest.main()
