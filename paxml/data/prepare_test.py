"""Tests of the corpus reader and the prepare tool on a small generated KJV-format file."""

import json
import os

from absl.testing import absltest
import numpy as np

from paxml.data import corpus
from paxml.data import prepare
from paxml.data import text_pipeline
from paxml.testing import kjv_file


def _write_kjv(path, chapters):
  return kjv_file.write_kjv(path, chapters, words_per_verse=(4, 15), verses_per_chapter=(2, 6))


class CorpusTest(absltest.TestCase):
  def test_kjv_chapters(self):
    path = os.path.join(absltest.get_default_test_tmpdir(), "kjv.txt")
    want = _write_kjv(path, 3)
    self.assertEqual(corpus.read_documents(path, "kjv"), want)

  def test_kjv_by_hand_and_bad_line(self):
    path = os.path.join(absltest.get_default_test_tmpdir(), "small.txt")
    with open(path, "w") as f:
      f.write("\nSong of Solomon 2\n\n  1 I am the rose of Sharon.\n  2 As the lily.\n")
    self.assertEqual(
      corpus.read_documents(path, "kjv"),
      [("Song of Solomon 2", "I am the rose of Sharon. As the lily.")],
    )
    with open(path, "a") as f:
      f.write("stray text\n")
    with self.assertRaisesRegex(ValueError, r"small\.txt:6: expected a chapter heading"):
      corpus.read_documents(path, "kjv")

  def test_paragraphs_and_lines(self):
    path = os.path.join(absltest.get_default_test_tmpdir(), "p.txt")
    with open(path, "w") as f:
      f.write("a b\nc\n\n\nd e\n")
    self.assertEqual([t for _, t in corpus.read_documents(path, "paragraphs")], ["a b c", "d e"])
    self.assertEqual([t for _, t in corpus.read_documents(path, "lines")], ["a b", "c", "d e"])

  def test_text_that_is_not_utf8_is_an_error_naming_the_byte(self):
    path = os.path.join(absltest.get_default_test_tmpdir(), "latin1.txt")
    with open(path, "wb") as f:
      f.write(b"a b\n\nna\xefve\n")
    with self.assertRaisesRegex(
      ValueError,
      r"latin1\.txt: not valid UTF-8 at byte offset 7 "
      r"\(line 3: .*--replace_invalid_utf8",
    ):
      corpus.read_documents(path, "paragraphs")
    self.assertEqual(
      [t for _, t in corpus.read_documents(path, "paragraphs", True)], ["a b", "na\ufffdve"]
    )

  def test_split_spreads_eval_over_the_corpus(self):
    train, evals = corpus.split_train_eval(list(range(40)), 10)
    self.assertEqual(evals, [5, 15, 25, 35])
    self.assertEqual(sorted(train + evals), list(range(40)))


class PrepareTest(absltest.TestCase):
  def test_writes_shards_model_and_summary(self):
    tmp = absltest.get_default_test_tmpdir()
    path = os.path.join(tmp, "exodus.txt")
    docs = _write_kjv(path, 40)
    out = os.path.join(tmp, "out")
    summary = prepare.run(
      path, "kjv", out, num_shards=3, vocab_size=300, eval_every=10, progress=False
    )
    self.assertEqual(summary["documents"], {"train": 36, "eval": 4})
    self.assertLen(summary["files"]["train"], 3)
    with open(os.path.join(out, "summary.json")) as f:
      self.assertEqual(json.load(f), json.loads(json.dumps(summary)))
    # The shards hold exactly the train documents; TextInput reads them with the new model.
    inp = text_pipeline.TextInput(
      file_pattern=summary["train_pattern"],
      tokenizer_path=summary["tokenizer"]["path"],
      packing="pad",
      seq_len=400,
      batch_size=1,
      repeat=False,
      shuffle=False,
      add_bos=False,
    )
    texts = []
    for batch in inp:
      texts += inp.ids_to_strings(batch.ids, batch.weights.sum(axis=1).astype(int))
    self.assertEqual(sorted(texts), sorted(t for i, (_, t) in enumerate(docs) if i % 10 != 5))
    self.assertEqual(
      summary["tokens"]["train"],
      sum(
        len(ids)
        for ids in inp.tokenizer.encode([t for i, (_, t) in enumerate(docs) if i % 10 != 5])
      ),
    )
    # Entropy: between 0 and ln(vocab), and equal to a direct numpy computation.
    counts = np.bincount(
      np.concatenate(inp.tokenizer.encode([t for i, (_, t) in enumerate(docs) if i % 10 != 5]))
    )
    p = counts[counts > 0] / counts.sum()
    self.assertAlmostEqual(summary["unigram_entropy_nats"], float(-(p * np.log(p)).sum()), 6)
    self.assertIn("Unigram entropy", prepare.format_summary(summary))

  def test_too_few_documents(self):
    tmp = absltest.get_default_test_tmpdir()
    path = os.path.join(tmp, "tiny.txt")
    _write_kjv(path, 3)
    with self.assertRaisesRegex(ValueError, r"tiny\.txt: 3 documents"):
      prepare.run(path, "kjv", os.path.join(tmp, "o2"), progress=False)


if __name__ == "__main__":
  absltest.main()
