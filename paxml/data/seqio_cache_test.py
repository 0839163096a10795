"""Tests of SeqIOInput's row cache: batch i from i, the same stream as an uninterrupted read."""

import collections
import json
import os
import tempfile
import time
from unittest import mock

from absl.testing import absltest
import numpy as np

from paxml import seqio_input
from paxml.data import seqio_cache
from paxml.tasks.lm import kjv_seqio_tasks
from paxml.testing import kjv_file

_NUM_CHAPTERS = 60  # 57 train chapters: 57 rows (each chapter's first 16 tokens), unpacked.
_NUM_ROWS = _NUM_CHAPTERS - _NUM_CHAPTERS // 20
_BATCH = 4


class SeqIOCacheTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    tmp = tempfile.mkdtemp(dir=absltest.get_default_test_tmpdir())
    corpus = os.path.join(tmp, "kjv.txt")
    kjv_file.write_kjv(corpus, _NUM_CHAPTERS)
    cls.task = kjv_seqio_tasks.task(
      kjv_seqio_tasks.LM_TASK,
      data_dir=os.path.join(tmp, "kjv_prepared"),
      corpus_path=corpus,
      vocab_size=300,
    )

  def setUp(self):
    super().setUp()
    self.cache_dir = tempfile.mkdtemp(dir=absltest.get_default_test_tmpdir())
    env = mock.patch.dict(os.environ, {seqio_cache.ENV_DIR: self.cache_dir})
    env.start()
    self.addCleanup(env.stop)

  def _input(self, **fields):
    fields.setdefault("input_random_seed", 11)
    fields.setdefault("task_feature_lengths", {"targets": 16})
    return seqio_input.SeqIOInput(
      mixture_or_task=self.task,
      split_name="train",
      is_training=True,
      batch_size=_BATCH,
      feature_converter=seqio_input.LanguageModelFeatures(bos_id=2),
      **fields,
    )

  def _split_rows(self) -> list[bytes]:
    """The split's rows read straight from SeqIO (the independent reference): labels bytes."""
    ds = self.task.get_dataset({"targets": 16}, split="train", shuffle=False, num_epochs=1)
    converted = seqio_input.LanguageModelFeatures(bos_id=2)(ds, {"targets": 16})
    return [ex["labels"].tobytes() for ex in converted.as_numpy_iterator()]

  def test_resumed_batches_equal_the_uninterrupted_stream(self):
    straight = self._input()
    self.assertIsNotNone(straight._rows, "a training input over a Task reads the row cache")
    want = [straight.get_next() for _ in range(40)]  # Nearly 3 epochs of 57 rows.
    for position in (0, 13, 14, 29, 37):
      resumed = self._input()
      state = json.loads(json.dumps(straight.get_state()))
      self.assertEqual(set(state), {"num_batches", "seed"})  # No iterator: a position.
      resumed.set_state({**state, "num_batches": position})
      for i in range(position, 40):
        got = resumed.get_next()
        self.assertEqual(set(got), set(want[i]))
        for key in got:
          np.testing.assert_array_equal(got[key], want[i][key], f"batch {i} {key}")
    # reset() rewinds to batch 0.
    straight.reset()
    np.testing.assert_array_equal(straight.get_next().ids, want[0].ids)

  def test_every_epoch_is_a_new_permutation_of_the_split(self):
    split = self._split_rows()
    self.assertLen(split, _NUM_ROWS)
    inp = self._input()
    stream = [r.tobytes() for _ in range(len(split)) for r in inp.get_next().labels]  # 4 epochs.
    epochs = [stream[e * len(split) : (e + 1) * len(split)] for e in range(4)]
    for epoch in epochs:
      self.assertEqual(collections.Counter(epoch), collections.Counter(split))
    self.assertNotEqual(epochs[0], epochs[1])
    self.assertNotEqual(epochs[0], split)  # Shuffled...
    unshuffled = self._input(shuffle=False)
    in_order = [r.tobytes() for _ in range(14) for r in unshuffled.get_next().labels]
    self.assertEqual(in_order, split[: 14 * _BATCH])  # ... unless shuffle=False.
    big_seed = self._input(input_random_seed=8216168636236079519)  # 64-bit, as the trainer's.
    self.assertEqual(big_seed.get_next().labels.shape, (_BATCH, 16))
    other_seed = self._input(input_random_seed=12)
    self.assertFalse(np.array_equal(other_seed.get_next().labels, self._input().get_next().labels))

  def test_hosts_read_disjoint_rows_of_one_stream(self):
    one_host = self._input()
    stream = [one_host.get_next() for _ in range(6)]
    hosts = [self._input(num_infeed_hosts=2, infeed_host_index=h) for h in range(2)]
    for i in range(3):
      for h in range(2):  # Global batch 2i + h is host h's batch i.
        np.testing.assert_array_equal(hosts[h].get_next().labels, stream[2 * i + h].labels)

  def test_position_costs_the_same_at_any_step(self):
    inp = self._input()
    inp.get_next()
    seconds = {}
    for n in (10, 10_000, 1_000_000):
      start = time.perf_counter()
      inp.set_state({"num_batches": n, "seed": 11})
      inp.get_next()
      seconds[n] = time.perf_counter() - start
    self.assertLess(max(seconds.values()), 1.0, seconds)

  def test_cache_is_built_once_and_reused(self):
    with mock.patch.object(seqio_cache, "_write", wraps=seqio_cache._write) as write:
      first = self._input()
      self._input(input_random_seed=3)  # Another seed reads the same rows.
    self.assertEqual(write.call_count, 1)
    summary = first._rows.summary
    self.assertEqual(summary["num_rows"], _NUM_ROWS)
    self.assertTrue(os.path.exists(os.path.join(summary["directory"], "summary.json")))
    self.assertEqual(os.path.dirname(summary["directory"]), self.cache_dir)
    # Other feature lengths are other rows: another directory.
    longer = self._input(task_feature_lengths={"targets": 24})
    self.assertNotEqual(longer._rows.summary["directory"], summary["directory"])

  def test_an_unwritable_cache_root_caches_for_the_process(self):
    # A read-only home (Bazel's sandbox): the root cannot be made, so this process gets its own.
    blocker = os.path.join(self.cache_dir, "a_file")
    open(blocker, "w").close()
    with mock.patch.dict(os.environ, {seqio_cache.ENV_DIR: os.path.join(blocker, "seqio")}):
      inp = self._input()
    directory = inp._rows.summary["directory"]
    self.assertFalse(directory.startswith(blocker))
    self.assertEqual(inp._rows.summary["num_rows"], _NUM_ROWS)
    first = inp.get_next()
    inp.set_state(inp.get_state())  # still index-addressed
    self.assertIsNotNone(first)

  def test_too_large_or_off_keeps_tf_data(self):
    with mock.patch.dict(os.environ, {seqio_cache.ENV_MAX_BYTES: "1000"}):
      with self.assertLogs("absl", level="WARNING") as logs:
        large = self._input()
    self.assertIsNone(large._rows)
    self.assertIn("not cached", "\n".join(logs.output))
    self.assertIn("iterator", large.get_state())  # tf.data's saved-iterator restore stays.
    with mock.patch.dict(os.environ, {seqio_cache.ENV_MODE: "off"}):
      self.assertIsNone(self._input()._rows)
    self.assertIsNone(self._input(repeat=False)._rows)  # A finite input: one epoch of tf.data.

  def test_a_split_known_too_large_stops_at_its_first_row(self):
    read = []

    def rows():
      for i in range(100):
        read.append(i)
        yield {"ids": np.zeros([16], np.int32)}  # 64 bytes a row.

    directory = tempfile.mkdtemp(dir=self.cache_dir)
    with self.assertRaisesRegex(seqio_cache._TooLarge, "1,000,000 examples of 64 bytes"):
      seqio_cache._write(rows(), directory, max_bytes=10_000, expected_rows=1_000_000)
    self.assertEqual(read, [0])
    summary = seqio_cache._write(rows(), directory, max_bytes=10_000, expected_rows=100)
    self.assertEqual((summary["num_rows"], summary["num_bytes"]), (100, 6400))


if __name__ == "__main__":
  absltest.main()
