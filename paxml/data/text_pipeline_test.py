"""Tests of TextInput on small generated files in all three formats."""

import json
import os
import random

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from praxis import base_input
from paxml.data import text_pipeline
from paxml.data import tokenizer as tokenizer_lib

_WORDS = (
  "in the beginning was light and water and the land brought forth grass after its kind "
  "so the evening and the morning were one day"
).split()


def _docs(n, seed=0):
  rng = random.Random(seed)
  return [
    f"doc{i} " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 30))) for i in range(n)
  ]


def _write(path, fmt, docs):
  if fmt == "tfrecord":
    with tf.io.TFRecordWriter(path) as w:
      for d in docs:
        feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[d.encode()]))
        w.write(
          tf.train.Example(
            features=tf.train.Features(feature={"text": feature})
          ).SerializeToString()
        )
  elif fmt == "jsonl":
    with open(path, "w") as f:
      f.writelines(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs))
  else:
    with open(path, "w") as f:
      f.writelines(d + "\n\n" for d in docs)  # blank lines between documents are skipped


class TextInputTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = absltest.get_default_test_tmpdir()
    cls.docs = _docs(120)
    cls.tok_path = os.path.join(cls.dir, "spm.model")
    cls.tok = tokenizer_lib.train(cls.docs, cls.tok_path, vocab_size=300)
    cls.patterns = {}
    for fmt, ext in (("tfrecord", "tfrecord"), ("jsonl", "jsonl"), ("text", "txt")):
      for shard in range(6):
        _write(os.path.join(cls.dir, f"{fmt}-{shard}.{ext}"), fmt, cls.docs[shard::6])
      cls.patterns[fmt] = os.path.join(cls.dir, f"{fmt}-*.{ext}")

  def _input(self, fmt="tfrecord", **kwargs):
    args = dict(
      file_pattern=self.patterns[fmt],
      file_format=fmt,
      tokenizer_path=self.tok_path,
      batch_size=4,
      seq_len=64,
      input_random_seed=1,
    )
    args.update(kwargs)
    return text_pipeline.TextInput.HParams(**args).Instantiate()

  def _doc_rows(self, batches):
    """Tuple of each real row's ids (pad mode: one document per row)."""
    return [tuple(r[w > 0]) for b in batches for r, w in zip(b.ids, b.weights) if w.sum()]

  def _want_rows(self, docs):
    return [tuple([2] + list(ids)) for ids in self.tok.encode(docs)]  # [BOS] + doc, no EOS

  def test_every_format_reads_the_same_documents(self):
    for fmt in ("tfrecord", "jsonl", "text"):
      with self.subTest(fmt):
        inp = self._input(
          fmt, packing="pad", seq_len=200, repeat=False, shuffle=False, batch_size=1
        )
        self.assertEqual(sorted(self._doc_rows(inp)), sorted(self._want_rows(self.docs)))

  def test_lm_fields_and_concat_order(self):
    inp = self._input(
      "jsonl",
      file_pattern=os.path.join(self.dir, "jsonl-0.jsonl"),
      packing="concat",
      shuffle=False,
      repeat=False,
      seq_len=16,
    )
    batches = list(inp)
    b = batches[0]
    self.assertEqual(set(b), {"ids", "labels", "weights", "paddings", "segment_ids", "segment_pos"})
    for key in b:
      self.assertEqual(b[key].shape, (4, 16))
    stream = np.concatenate([x.ids.reshape(-1) for x in batches])
    labels = np.concatenate([x.labels.reshape(-1) for x in batches])
    encoded = self.tok.encode(self.docs[0::6])
    # ids hold [BOS] + doc, labels doc + [EOS], documents end to end.
    want_ids = np.concatenate([np.concatenate([[2], ids]) for ids in encoded])
    want_labels = np.concatenate([np.concatenate([ids, [3]]) for ids in encoded])
    n = len(stream)  # one pass drops the rows that fill no whole batch
    np.testing.assert_array_equal(stream, want_ids[:n])
    np.testing.assert_array_equal(labels, want_labels[:n])
    np.testing.assert_array_equal(b.segment_ids, 1)

  def test_pack_mode_segments(self):
    b = self._input(packing="pack", seq_len=160).get_next()  # every document fits a row
    for ids, seg, pos in zip(b.ids, b.segment_ids, b.segment_pos):
      for s in range(1, seg.max() + 1):
        mask = seg == s
        np.testing.assert_array_equal(pos[mask], np.arange(mask.sum()))
        self.assertEqual(ids[mask][0], 2)  # every segment is one whole document
    self.assertGreater(b.segment_ids.max(), 2)  # several documents share a row
    np.testing.assert_array_equal(b.weights, (b.segment_ids > 0).astype(np.float32))

  def test_hosts_read_disjoint_documents(self):
    for fmt, pattern in (("tfrecord", None), ("jsonl", os.path.join(self.dir, "jsonl-[01].jsonl"))):
      with self.subTest(fmt):  # 6 files: sharded by file; 2 files: by document
        kwargs = dict(packing="pad", seq_len=200, repeat=False, batch_size=1, num_infeed_hosts=4)
        if pattern:
          kwargs["file_pattern"] = pattern
        per_host = [
          self._doc_rows(self._input(fmt, infeed_host_index=h, **kwargs)) for h in range(4)
        ]
        union = [row for rows in per_host for row in rows]
        self.assertLen(set(union), len(union))
        docs = self.docs if not pattern else [d for i, d in enumerate(self.docs) if i % 6 < 2]
        self.assertEqual(sorted(union), sorted(self._want_rows(docs)))

  def test_eval_pass_equal_batch_counts_with_padding(self):
    kwargs = dict(
      packing="pad",
      seq_len=200,
      is_training=False,
      reset_for_eval=True,
      batch_size=8,
      num_infeed_hosts=4,
    )
    hosts = [self._input(infeed_host_index=h, **kwargs) for h in range(4)]
    passes = [list(h) for h in hosts]
    # 120 documents -> 120 rows; 30 per host -> ceil(30 / 8) = 4 batches each.
    self.assertEqual([len(p) for p in passes], [4, 4, 4, 4])
    union = [row for p in passes for row in self._doc_rows(p)]
    self.assertEqual(sorted(union), sorted(self._want_rows(self.docs)))
    pad = passes[0][-1]
    np.testing.assert_array_equal(pad.weights[6:], 0)
    np.testing.assert_array_equal(pad.paddings[6:], 1)
    hosts[0].reset()
    np.testing.assert_array_equal(hosts[0].get_next().ids, passes[0][0].ids)

  def test_seeded_shuffle(self):
    # A training input shuffles (shuffle=None follows is_training, Pax's default False).
    first = lambda seed: self._input(input_random_seed=seed, is_training=True).get_next().ids
    np.testing.assert_array_equal(first(3), first(3))
    self.assertFalse(np.array_equal(first(3), first(4)))
    unshuffled = self._input(shuffle=False, packing="pad", batch_size=60, seq_len=200)
    _, b = unshuffled.get_next(), unshuffled.get_next()  # 120 docs = epochs of 2 batches
    unshuffled.get_next()
    np.testing.assert_array_equal(unshuffled.get_next().ids, b.ids)  # epoch 2 repeats epoch 1
    shuffled = self._input(packing="pad", batch_size=60, seq_len=200, is_training=True)
    e0 = self._doc_rows([shuffled.get_next(), shuffled.get_next()])
    e1 = self._doc_rows([shuffled.get_next(), shuffled.get_next()])
    self.assertEqual(sorted(e0), sorted(e1))
    self.assertNotEqual(e0, e1)  # each epoch has its own order

  def test_restore_continues_with_next_unseen_batch(self):
    cfg = text_pipeline.TextInput.HParams(
      file_pattern=self.patterns["tfrecord"], tokenizer_path=self.tok_path, batch_size=4, seq_len=32
    )  # no seed: a fresh one, recorded in the state
    original = cfg.Instantiate()
    for _ in range(5):
      original.get_next()
    saved = json.loads(json.dumps(original.get_state()))
    expected = [original.get_next().ids for _ in range(3)]
    resumed = cfg.Instantiate()
    resumed.set_state(saved)
    for want in expected:
      np.testing.assert_array_equal(resumed.get_next().ids, want)
    self.assertEqual(resumed.get_state()["num_batches"], 8)

  def test_resumed_batches_equal_the_uninterrupted_stream_in_every_mode(self):
    for mode in ("concat", "pack", "pad"):
      with self.subTest(mode):
        make = lambda: self._input(packing=mode, seq_len=32, batch_size=8, input_random_seed=5)
        straight = make()
        stream = [straight.get_next() for _ in range(40)]  # Several epochs of 120 documents.
        for n in (0, 7, 23, 39):
          reader = make()
          for _ in range(n):
            reader.get_next()
          saved = json.loads(json.dumps(reader.get_state()))
          bare = {"seed": saved["seed"], "num_batches": n}  # A position set directly.
          for state in (saved, bare):
            resumed = make()
            resumed.set_state(state)
            for want in stream[n : n + 1]:
              got = resumed.get_next()
              for key in want:
                np.testing.assert_array_equal(got[key], want[key], err_msg=f"{mode} {n} {key}")

  def test_ids_to_strings(self):
    inp = self._input(
      "jsonl",
      file_pattern=os.path.join(self.dir, "jsonl-0.jsonl"),
      packing="pad",
      shuffle=False,
      seq_len=200,
      batch_size=2,
      add_bos=False,
    )
    b = inp.get_next()
    lengths = b.weights.sum(axis=1).astype(int)
    # Without BOS, ids are the document itself (labels are it shifted, ending in EOS).
    self.assertEqual(inp.ids_to_strings(b.ids, lengths), self.docs[0:12:6])


class ErrorsTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = absltest.get_default_test_tmpdir()
    cls.tok_path = os.path.join(cls.dir, "err_spm.model")
    tokenizer_lib.train(_docs(80), cls.tok_path, vocab_size=300)

  def _read_all(self, pattern, fmt="tfrecord", tokenizer_path=None):
    inp = text_pipeline.TextInput(
      file_pattern=pattern,
      file_format=fmt,
      tokenizer_path=tokenizer_path or self.tok_path,
      seq_len=16,
      batch_size=2,
      repeat=False,
    )
    return list(inp)

  def test_truncated_tfrecord_names_the_file(self):
    good = os.path.join(self.dir, "ok.tfrecord")
    _write(good, "tfrecord", _docs(30))
    bad = os.path.join(self.dir, "cut.tfrecord")
    with open(good, "rb") as f:
      data = f.read()
    with open(bad, "wb") as f:
      f.write(data[:-10])
    with self.assertRaisesRegex(
      text_pipeline.InputDataError, r"cut\.tfrecord: truncated TFRecord: record 29"
    ):
      self._read_all(os.path.join(self.dir, "*.tfrecord"))
    self.assertIsNone(text_pipeline.check_tfrecord(good))

  def test_empty_file_list_names_the_pattern(self):
    pattern = os.path.join(self.dir, "nothing-*.tfrecord")
    with self.assertRaisesRegex(text_pipeline.InputDataError, r"no files match .*nothing-\*"):
      self._read_all(pattern)
    with self.assertRaisesRegex(text_pipeline.InputDataError, "file_pattern is empty"):
      self._read_all("")

  def test_missing_tokenizer_names_the_file(self):
    path = os.path.join(self.dir, "ok2.tfrecord")
    _write(path, "tfrecord", _docs(3))
    with self.assertRaisesRegex(FileNotFoundError, r"missing\.model"):
      self._read_all(path, tokenizer_path=os.path.join(self.dir, "missing.model"))

  def test_wrong_typed_text_field_names_the_file(self):
    path = os.path.join(self.dir, "ints.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
      feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2]))
      w.write(
        tf.train.Example(features=tf.train.Features(feature={"text": feature})).SerializeToString()
      )
    with self.assertRaisesRegex(
      text_pipeline.InputDataError,
      r"ints\.tfrecord, record 0: feature 'text' should hold one "
      r"UTF-8 string .*got int64_list",
    ):
      self._read_all(path)
    path = os.path.join(self.dir, "num.jsonl")
    with open(path, "w") as f:
      f.write('{"text": "fine"}\n{"text": 42}\n')
    with self.assertRaisesRegex(
      text_pipeline.InputDataError,
      r"num\.jsonl, record 1 \(line 2\): field 'text' should be a "
      r"string, got int",
    ):
      self._read_all(path, fmt="jsonl")

  def test_text_that_is_not_utf8_names_file_line_and_byte(self):
    path = os.path.join(self.dir, "latin1.txt")
    with open(path, "wb") as f:
      f.write("fine line\ncaf\u00e9 ok\n".encode("utf-8") + "na\u00efve\n".encode("latin-1"))
    with self.assertRaisesRegex(
      text_pipeline.InputDataError,
      r"latin1\.txt, record 2 \(line 3\): not valid UTF-8 at byte 2 "
      r".*replace_invalid_utf8=True",
    ):
      self._read_all(path, fmt="text")
    inp = text_pipeline.TextInput(
      file_pattern=path,
      file_format="text",
      seq_len=16,
      batch_size=2,
      tokenizer_path=self.tok_path,
      repeat=False,
      replace_invalid_utf8=True,
    )
    self.assertEqual(inp._parse(path.encode(), 2, b"na\xefve"), "na\ufffdve")

  def test_bad_config_values(self):
    with self.assertRaisesRegex(base_input.InputConfigError, "file_format must be one of"):
      text_pipeline.TextInput(
        file_pattern="x", file_format="csv", tokenizer_path=self.tok_path, batch_size=2
      )


if __name__ == "__main__":
  absltest.main()
