"""Tests of demo_data: prepare on first use into the cache, reuse afterwards, clear errors."""

import os
from unittest import mock

from absl.testing import absltest

from paxml.data import demo_data
from paxml.testing import kjv_file


class DemoDataTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.tmp = self.create_tempdir().full_path
    self.corpus = os.path.join(self.tmp, "kjv.txt")
    self.texts = [text for _, text in kjv_file.write_kjv(self.corpus, 40)]
    self.enter_context(
      mock.patch.dict(os.environ, {"XDG_CACHE_HOME": os.path.join(self.tmp, "cache")})
    )

  def test_prepares_once_into_the_cache_then_reuses(self):
    with self.assertLogs("absl", "INFO") as logs:
      data_dir, summary = demo_data.ensure_prepared(corpus_path=self.corpus, vocab_size=300)
    self.assertIn("Preparing the demo data", "\n".join(logs.output))
    # Under $XDG_CACHE_HOME, named by the corpus content and the vocabulary size.
    self.assertTrue(data_dir.startswith(os.path.join(self.tmp, "cache", "paxml-monorepo")))
    self.assertIn("-v300-", os.path.basename(data_dir))
    self.assertEqual(summary["documents"], {"train": 38, "eval": 2})
    model_mtime = os.path.getmtime(os.path.join(data_dir, "spm.model"))

    with self.assertLogs("absl", "INFO") as logs:
      again, _ = demo_data.ensure_prepared(corpus_path=self.corpus, vocab_size=300)
    self.assertEqual(again, data_dir)
    self.assertNotIn("Preparing", "\n".join(logs.output))
    self.assertEqual(os.path.getmtime(os.path.join(data_dir, "spm.model")), model_mtime)

    # Another corpus (other content) gets its own directory.
    kjv_file.write_kjv(self.corpus, 40, seed=1)
    other, _ = demo_data.ensure_prepared(corpus_path=self.corpus, vocab_size=300)
    self.assertNotEqual(other, data_dir)

  def test_text_input_reads_the_eval_split(self):
    inp = demo_data.text_input(
      "eval",
      corpus_path=self.corpus,
      vocab_size=300,
      batch_size=1,
      seq_len=500,
      packing="pad",
      is_training=False,
      reset_for_eval=True,
      add_bos=False,
    )
    texts = []
    for batch in inp:
      texts += inp.ids_to_strings(batch.ids, batch.weights.sum(axis=1).astype(int))
    # prepare holds out documents 10 and 30 (eval_every=20).
    self.assertEqual(texts, [self.texts[10], self.texts[30]])
    with self.assertRaisesRegex(ValueError, "split must be one of"):
      demo_data.text_input("test", corpus_path=self.corpus)

  def test_missing_corpus_says_how_to_get_it(self):
    with (
      mock.patch.object(demo_data, "__file__", os.path.join(self.tmp, "a", "b", "c.py")),
      mock.patch.dict(os.environ, {"RUNFILES_DIR": self.tmp}),
    ):
      with self.assertRaisesRegex(FileNotFoundError, r"@corpus//:kjv.*bazelw run //paxml:main"):
        demo_data.find_corpus()
      os.makedirs(os.path.join(self.tmp, "corpus"))
      os.rename(self.corpus, os.path.join(self.tmp, "corpus", "kjv.txt"))
      self.assertEqual(demo_data.find_corpus(), os.path.join(self.tmp, "corpus", "kjv.txt"))


if __name__ == "__main__":
  absltest.main()
