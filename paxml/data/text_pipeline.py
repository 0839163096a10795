"""`TextInput`: LM batches from text files through tf.data and a SentencePiece tokenizer.

Stages (one epoch; a repeating input runs epoch 0, 1, 2, ... with a seed per epoch):

  file list (globs, sorted) --shuffle files (seeded)--> tf.data interleave of readers
    --shard over hosts--> shuffle documents (seeded buffer) --batch of raw records-->
  Python: parse records (TFRecord tf.train.Example / JSONL / text lines), checking the text
    field's type and naming the file of a bad record --> SentencePiece encode (C++, whole batch)
    --> packing.Packer (concat / pack / pad, BOS/EOS) --> batches of `batch_size` rows.

Hosts. With at least as many files as hosts, host h reads files h, h+H, ...; otherwise every host
reads all files and keeps documents h, h+H, ... . Either way no document reaches two hosts.
For `reset_for_eval` every host packs the whole (unshuffled) set and keeps rows h, h+H, ...,
then pads with zero-weight rows to ceil(ceil(R / H) / batch_size) batches, R the total row count,
so all hosts yield the same number of batches.

Determinism and checkpointing. With `deterministic=True` (the default) the stream is a pure
function of (files, seed, config), so the state is {"seed", "num_batches"} and `set_state`
rebuilds the stream and skips `num_batches` batches (reading and tokenizing what it skips: about
a second per 10^6 tokens here). `deterministic=False` lets tf.data interleave files in whatever
order they arrive: faster with many files, but a restore then continues from a different order.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Iterator

import numpy as np

from praxis import base_input
from paxml import quiet_tensorflow
from paxml.data import packing
from paxml.data.input_error import InputDataError
from paxml.data import tokenizer as tokenizer_lib

tf = quiet_tensorflow.import_tensorflow()

NestedMap = base_input.NestedMap
FORMATS = ("tfrecord", "jsonl", "text")


class TextInput(base_input.BaseInput):
  """LM batches (ids, labels, paddings, weights, segment_ids, segment_pos) from text files.

  Attributes:
    file_pattern: a glob, a comma-separated list of globs, or a list of them.
    file_format: "tfrecord" (tf.train.Example with a bytes feature `text_key`), "jsonl" (one JSON
      object per line with a string `text_key`) or "text" (each non-empty line a document).
    text_key: the field holding the document text.
    tokenizer_path: the SentencePiece .model file.
    seq_len: tokens per row.
    packing: "concat", "pack" or "pad" (see paxml.data.packing).
    add_bos: start each document with BOS.
    add_eos: end each document with EOS.
    shuffle: shuffle files and documents (seeded); None means `is_training`.
    shuffle_buffer_size: documents in tf.data's shuffle buffer.
    deterministic: keep a reproducible order (needed for exact input checkpointing).
    read_batch_size: raw records handed from tf.data to Python (and to SentencePiece) at once.
    replace_invalid_utf8: text that is not valid UTF-8 is an InputDataError naming the file,
      the record and the byte offset; True replaces the bad bytes with U+FFFD instead.
  """

  file_pattern: str | list[str] = ""
  file_format: str = "tfrecord"
  text_key: str = "text"
  tokenizer_path: str = ""
  seq_len: int = 512
  packing: str = "pack"
  add_bos: bool = True
  add_eos: bool = True
  shuffle: bool | None = None
  shuffle_buffer_size: int = 10_000
  deterministic: bool = True
  read_batch_size: int = 256
  replace_invalid_utf8: bool = False

  def __post_init__(self):
    super().__post_init__()
    if self.file_format not in FORMATS:
      raise base_input.InputConfigError(
        f"{self.name}: file_format must be one of {FORMATS}, got {self.file_format!r}."
      )
    if self.packing not in packing.MODES:
      raise base_input.InputConfigError(
        f"{self.name}: packing must be one of {packing.MODES}, got {self.packing!r}."
      )
    if self.shuffle is None:
      self.shuffle = self.is_training
    self.files = resolve_files(self.file_pattern)
    self.tokenizer = tokenizer_lib.Tokenizer(self.tokenizer_path)
    self._num_batches = 0
    self._iterator: Iterator[NestedMap] | None = None

  # --- BaseInput.

  def get_next(self) -> NestedMap:
    if self._iterator is None:
      self._iterator = self._batches()
    batch = next(self._iterator)  # StopIteration ends a one-pass input
    self._num_batches += 1
    return batch

  def get_state(self) -> dict[str, Any]:
    return {"seed": int(self.input_random_seed), "num_batches": int(self._num_batches)}

  def set_state(self, state: dict[str, Any]) -> None:
    self.input_random_seed = int(state["seed"])
    self._num_batches = 0
    self._iterator = self._batches()
    for _ in range(int(state["num_batches"])):
      next(self._iterator)
      self._num_batches += 1

  def ids_to_strings(self, ids, lengths) -> list[str]:
    return self.tokenizer.ids_to_strings(ids, lengths)

  # --- The stream.

  def _batches(self) -> Iterator[NestedMap]:
    if self.reset_for_eval:
      yield from self._eval_pass()
      return
    packer = self._packer()
    rows: list[dict[str, np.ndarray]] = []
    epoch = 0
    while True:
      shard = self._host_shard(epoch)
      for docs in self._documents(epoch, **shard):
        for doc in self.tokenizer.encode(docs):
          rows.extend(packer.add(doc))
        while len(rows) >= self.batch_size:
          yield NestedMap(packing.stack_rows(rows[: self.batch_size]))
          del rows[: self.batch_size]
      if not self.repeat:
        return  # one pass: the rows left over fill no whole batch and are dropped
      epoch += 1

  def _eval_pass(self) -> Iterator[NestedMap]:
    h, num_hosts = self.infeed_host_index, self.num_infeed_hosts
    mine: list[dict[str, np.ndarray]] = []
    total_rows = 0
    num_yielded = 0

    def take(new_rows):
      nonlocal total_rows
      for row in new_rows:
        if total_rows % num_hosts == h:
          mine.append(row)
        total_rows += 1

    packer = self._packer()
    for docs in self._documents(0, file_shard=None, doc_shard=None):
      for doc in self.tokenizer.encode(docs):
        take(packer.add(doc))
      while len(mine) >= self.batch_size:
        yield NestedMap(packing.stack_rows(mine[: self.batch_size]))
        del mine[: self.batch_size]
        num_yielded += 1
    take(packer.flush())
    # Equal counts on every host: ceil(ceil(R / H) / B) batches, short ones padded.
    want = -(-(-(-total_rows // num_hosts)) // self.batch_size)
    while num_yielded < want:
      rows = mine[: self.batch_size]
      del mine[: self.batch_size]
      rows += [packing.padding_row(self.seq_len)] * (self.batch_size - len(rows))
      yield NestedMap(packing.stack_rows(rows))
      num_yielded += 1

  def _packer(self) -> packing.Packer:
    return packing.Packer(
      self.seq_len,
      self.packing,
      bos_id=self.tokenizer.bos_id if self.add_bos else None,
      eos_id=self.tokenizer.eos_id if self.add_eos else None,
    )

  def _host_shard(self, epoch: int) -> dict[str, int | None]:
    del epoch  # the split is the same every epoch; only the order changes
    if self.num_infeed_hosts == 1:
      return {"file_shard": None, "doc_shard": None}
    if len(self.files) >= self.num_infeed_hosts:
      return {"file_shard": self.infeed_host_index, "doc_shard": None}
    return {"file_shard": None, "doc_shard": self.infeed_host_index}

  def _documents(
    self, epoch: int, file_shard: int | None, doc_shard: int | None
  ) -> Iterator[list[str]]:
    """Lists of document texts, `read_batch_size` at a time, for this host and epoch."""
    # Host h's files are fixed (positions h, h+H, ... of the sorted list); only their order and
    # the order of their documents change from epoch to epoch.
    files = self.files if file_shard is None else self.files[file_shard :: self.num_infeed_hosts]
    seed = None
    if self.shuffle:
      seed = int(np.random.default_rng([self.input_random_seed, epoch]).integers(2**31))
      files = [files[i] for i in np.random.default_rng(seed).permutation(len(files))]
    ds = tf.data.Dataset.from_tensor_slices(files)
    reader = self._reader()
    ds = ds.interleave(
      reader,
      cycle_length=min(4, len(files)),
      block_length=16,
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=self.deterministic,
    )
    if doc_shard is not None:
      ds = ds.shard(self.num_infeed_hosts, doc_shard)
    if self.shuffle:
      ds = ds.shuffle(self.shuffle_buffer_size, seed=seed, reshuffle_each_iteration=False)
    ds = ds.batch(self.read_batch_size).prefetch(2)
    options = tf.data.Options()
    options.deterministic = self.deterministic
    ds = ds.with_options(options)
    iterator = ds.as_numpy_iterator()
    while True:
      try:
        names, lines, records = next(iterator)
      except StopIteration:
        return
      except tf.errors.DataLossError as e:
        raise self._explain_data_loss(files, e) from None
      texts = (self._parse(n, i, r) for n, i, r in zip(names, lines, records))
      yield [t for t in texts if t.strip()]  # blank lines and empty texts are not documents

  def _reader(self):
    """filename -> dataset of (filename, record number, raw record)."""
    if self.file_format == "tfrecord":
      open_file = tf.data.TFRecordDataset
    else:
      open_file = tf.data.TextLineDataset

    def read(filename):
      records = open_file(filename).enumerate()
      return records.map(lambda i, record: (filename, i, record))

    return read

  def _parse(self, filename: bytes, number: int, record: bytes) -> str:
    """The text of one raw record; errors name the file and the record."""
    where = f"{filename.decode()}, record {number}"
    if self.file_format == "text":
      return self._decode(record, f"{where} (line {number + 1})")
    if self.file_format == "jsonl":
      try:
        obj = json.loads(record)
      except json.JSONDecodeError as e:
        raise InputDataError(f"{where} (line {number + 1}): not valid JSON ({e}).") from None
      value = obj.get(self.text_key) if isinstance(obj, dict) else None
      if not isinstance(value, str):
        raise InputDataError(
          f"{where} (line {number + 1}): field {self.text_key!r} should be a string, got "
          f"{type(value).__name__}: {str(value)[:50]!r}. Set text_key to the field holding "
          "the text."
        )
      return value
    example = tf.train.Example.FromString(record)
    features = example.features.feature
    if self.text_key not in features:
      raise InputDataError(
        f"{where}: tf.train.Example has no feature {self.text_key!r}; it has "
        f"{sorted(features)}. Set text_key to the feature holding the text."
      )
    feature = features[self.text_key]
    kind = feature.WhichOneof("kind")
    if kind != "bytes_list" or len(feature.bytes_list.value) != 1:
      got = kind if kind != "bytes_list" else f"{len(feature.bytes_list.value)} byte strings"
      raise InputDataError(
        f"{where}: feature {self.text_key!r} should hold one UTF-8 string (bytes_list of "
        f"length 1), got {got}."
      )
    return self._decode(feature.bytes_list.value[0], f"{where}, feature {self.text_key!r}")

  def _decode(self, data: bytes, where: str) -> str:
    if self.replace_invalid_utf8:
      return data.decode("utf-8", errors="replace")
    try:
      return data.decode("utf-8")
    except UnicodeDecodeError as e:
      raise InputDataError(
        f"{where}: not valid UTF-8 at byte {e.start} of the text ({data[e.start : e.start + 4]!r}"
        "). Convert the file to UTF-8, or set replace_invalid_utf8=True to replace bad bytes."
      ) from None

  def _explain_data_loss(self, files: list[str], error: Exception) -> InputDataError:
    for f in files:
      problem = check_tfrecord(f) if self.file_format == "tfrecord" else None
      if problem:
        return InputDataError(f"{f}: {problem}; re-create the file (e.g. with the prepare tool).")
    return InputDataError(f"reading {files}: {error}")


def resolve_files(file_pattern: str | list[str]) -> list[str]:
  """Sorted files matching the globs; an error naming the patterns when there are none."""
  patterns = file_pattern.split(",") if isinstance(file_pattern, str) else list(file_pattern)
  patterns = [p.strip() for p in patterns if p.strip()]
  if not patterns:
    raise InputDataError(
      "file_pattern is empty: set it to the data files, for example "
      "'/data/kjv/train-*.tfrecord' as written by the prepare tool."
    )
  files = sorted({f for p in patterns for f in tf.io.gfile.glob(p)})
  if not files:
    raise InputDataError(
      f"no files match {patterns} (cwd {os.getcwd()}). Check the path, or create the data "
      "with `bazel run //paxml/data:prepare -- --output_dir=DIR`."
    )
  return files


def check_tfrecord(path: str) -> str | None:
  """Why a TFRecord file is damaged (walking its record headers), or None if its framing is fine."""
  size = os.path.getsize(path)
  offset = 0
  number = 0
  with open(path, "rb") as f:
    while offset < size:
      header = f.read(12)  # uint64 length, uint32 masked crc of the length
      if len(header) < 12:
        return f"truncated TFRecord: record {number} header cut at byte {offset} of {size}"
      (length,) = struct.unpack("<Q", header[:8])
      end = offset + 12 + length + 4  # data and its crc
      if end > size:
        return (
          f"truncated TFRecord: record {number} at byte {offset} needs {length} bytes of "
          f"data, but the file ends at byte {size}"
        )
      f.seek(end)
      offset = end
      number += 1
  return None
