"""Tests of SeqIOInput on the KJV SeqIO tasks over a small corpus in the `bible` format."""

import json
import os
from unittest import mock

from absl.testing import absltest
import jax
import numpy as np

from paxml import seqio_input
from paxml.data import seqio_cache
from praxis import base_input
from paxml.data import tokenizer
from paxml.tasks.lm import kjv_seqio_tasks
from paxml.tasks.lm import model_params
from paxml.testing import kjv_file

_NUM_CHAPTERS = 100  # One in twenty is held out: 5 validation chapters, 95 train.
_LM_FIELDS = {
  "ids": np.int32,
  "labels": np.int32,
  "paddings": np.float32,
  "weights": np.float32,
  "segment_ids": np.int32,
  "segment_pos": np.int32,
}


def _lm_input(split, **fields):
  fields.setdefault("is_training", split == "train")
  return seqio_input.SeqIOInput(
    mixture_name=kjv_seqio_tasks.LM_TASK,
    split_name=split,
    task_feature_lengths={"targets": 16},
    feature_converter=seqio_input.LanguageModelFeatures(bos_id=tokenizer.BOS_ID),
    **fields,
  )


class SeqIOInputTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    tmp = absltest.get_default_test_tmpdir()
    corpus = os.path.join(tmp, "kjv.txt")
    kjv_file.write_kjv(corpus, _NUM_CHAPTERS)
    cls.data_dir = os.path.join(tmp, "kjv_prepared")
    # The training inputs' row cache (paxml/data/seqio_cache.py) under the test's tmp dir.
    cls._cache_env = mock.patch.dict(os.environ, {seqio_cache.ENV_DIR: os.path.join(tmp, "rows")})
    cls._cache_env.start()
    cls.addClassCleanup(cls._cache_env.stop)
    cls.task = kjv_seqio_tasks.task(
      kjv_seqio_tasks.LM_TASK, data_dir=cls.data_dir, corpus_path=corpus, vocab_size=300
    )

  def test_four_hosts_never_share_an_example_and_cover_the_split(self):
    seen = []
    for host in range(4):
      inp = _lm_input(
        "train",
        repeat=False,
        batch_size=1,
        num_infeed_hosts=4,
        infeed_host_index=host,
        input_random_seed=1,
      )
      rows = [tuple(b.labels[0]) for b in inp]
      self.assertNotEmpty(rows)
      seen.append(set(rows))
    for a in range(4):
      for b in range(a + 1, 4):
        self.assertEmpty(seen[a] & seen[b], f"hosts {a} and {b} share an example")
    self.assertLen(set().union(*seen), _NUM_CHAPTERS - _NUM_CHAPTERS // 20)

  def test_finite_eval_gives_every_host_the_same_number_of_batches(self):
    counts, real = [], []
    for host in range(4):  # 5 validation chapters: shards of 2, 1, 1, 1.
      inp = _lm_input(
        "validation", reset_for_eval=True, batch_size=1, num_infeed_hosts=4, infeed_host_index=host
      )
      for _ in range(2):  # A second eval after reset() reads the same epoch again.
        inp.reset()
        batches = list(inp)
        counts.append(len(batches))
      for b in batches:
        if b.eval_sample_weights[0] > 0:
          real.append((int(b.enum_shard_index[0]), int(b.enum_index_within_shard[0])))
        else:  # A pad row: it must not count in any metric.
          self.assertEqual(int(b.enum_shard_index[0]), -1)
          self.assertEqual(float(b.weights.sum()), 0.0)
    self.assertEqual(counts, [2] * 8)
    self.assertCountEqual(real, [(0, 0), (0, 1), (1, 0), (2, 0), (3, 0)])

  def test_restored_input_continues_with_the_next_batch(self):
    # The tf.data path (mixtures, splits over the row cache's limit): paxml/data/seqio_cache_test.py
    # tests the row cache, which a training input over a Task reads by default.
    with mock.patch.dict(os.environ, {seqio_cache.ENV_MODE: "off"}):
      self._check_tf_data_restore()

  def _check_tf_data_restore(self):
    first = _lm_input("train", batch_size=2, input_random_seed=7)
    for _ in range(3):
      first.get_next()
    state = json.loads(json.dumps(first.get_state()))
    self.assertEqual(state["num_batches"], 3)
    self.assertEqual(state["seed"], 7)
    self.assertIn("iterator", state)  # tf.data's own checkpoint: no batch is replayed.
    expected = [first.get_next() for _ in range(3)]
    resumed = _lm_input("train", batch_size=2, input_random_seed=7)
    resumed.set_state(state)
    for want in expected:
      np.testing.assert_array_equal(resumed.get_next().ids, want.ids)
    # A state without the iterator (an older checkpoint's) skips the consumed batches instead.
    skipped = _lm_input("train", batch_size=2, input_random_seed=7)
    skipped.set_state({"num_batches": 3, "seed": 7})
    np.testing.assert_array_equal(skipped.get_next().ids, expected[0].ids)
    # The state saved after such a skip holds an iterator a fresh input restores (no second skip).
    after_skip = json.loads(json.dumps(skipped.get_state()))
    self.assertEqual(after_skip["num_batches"], 4)
    again = _lm_input("train", batch_size=2, input_random_seed=7)
    with self.assertNoLogs("absl", level="WARNING"):
      again.set_state(after_skip)
    np.testing.assert_array_equal(again.get_next().ids, expected[1].ids)
    other_seed = _lm_input("train", batch_size=2, input_random_seed=8)
    with self.assertRaisesRegex(base_input.InputConfigError, "input_random_seed=7"):
      other_seed.set_state(state)

  def test_lm_feature_converter_gives_the_fields_the_language_model_reads(self):
    batch = _lm_input("train", batch_size=4, input_random_seed=3).get_next()
    for name, dtype in _LM_FIELDS.items():
      self.assertEqual(batch[name].shape, (4, 16), name)
      self.assertEqual(batch[name].dtype, dtype, name)
    np.testing.assert_array_equal(batch.ids[:, 0], tokenizer.BOS_ID)
    np.testing.assert_array_equal(batch.ids[:, 1:], batch.labels[:, :-1])  # Shifted by one.
    np.testing.assert_array_equal(batch.weights, 1.0 - batch.paddings)
    # praxis' LanguageModel takes the batch as it is and scores each real token once.
    model = model_params.small_language_model(
      vocab_size=300, model_dims=16, num_layers=1, num_heads=2, hidden_dims=32, decode_seqlen=16
    )
    variables = model.init(jax.random.PRNGKey(0), batch)
    metrics, per_example = model.apply(variables, batch)
    self.assertEqual(float(metrics["num_predictions"][0]), float(batch.weights.sum()))
    self.assertEqual(per_example.per_sequence_xent.shape, (4,))
    self.assertTrue(np.isfinite(float(metrics["avg_xent"][0])))

  def test_ids_to_strings_uses_the_task_vocabulary(self):
    inp = _lm_input("validation", reset_for_eval=True, batch_size=1)
    batch = inp.get_next()
    text = inp.ids_to_strings(batch.labels, [int(batch.weights[0].sum())])[0]
    first = inp.shard_examples()[0][0]["targets_pretokenized"].decode()
    self.assertNotEmpty(text)
    self.assertTrue(first.startswith(text), (first, text))

  def test_metrics_from_outputs(self):
    inp = _lm_input("validation", reset_for_eval=True, batch_size=2)
    keys = [(0, i) for i in range(5)]
    scores = [(k, {"scores": -float(i)}) for i, k in enumerate(keys)]
    [result] = inp.compute_metrics(scores, score_metrics=True)
    self.assertAlmostEqual(result["document_log_likelihood"], -2.0)
    with self.assertRaisesRegex(ValueError, "reset_for_eval=True"):
      inp.compute_metrics(scores[:4], score_metrics=True)

  def test_config_errors_say_what_to_do(self):
    with self.assertRaisesRegex(base_input.InputConfigError, "exactly one of mixture_name"):
      seqio_input.SeqIOInput(
        mixture_name="kjv_lm",
        mixture_or_task=self.task,
        split_name="train",
        feature_converter=seqio_input.LanguageModelFeatures(),
        batch_size=2,
      )
    with self.assertRaisesRegex(base_input.InputConfigError, "feature_converter is required"):
      seqio_input.SeqIOInput(mixture_name="kjv_lm", split_name="train", batch_size=2)
    with self.assertRaisesRegex(ValueError, "Must specify self.batch_size"):
      seqio_input.SeqIOInput(
        mixture_name="kjv_lm",
        split_name="train",
        feature_converter=seqio_input.LanguageModelFeatures(),
      )


if __name__ == "__main__":
  absltest.main()
