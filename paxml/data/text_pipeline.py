"""`TextInput`: LM batches from text files through tf.data and a SentencePiece tokenizer.

Stages:

  file list (globs, sorted) --tf.data, file after file--> this host's records
    --Python: parse (TFRecord tf.train.Example / JSONL / text lines), checking the text field's
    type and naming the file of a bad record--> SentencePiece encode (C++, whole batches)
    --> a table of this host's tokenized documents (read once, on first use)
  then, per batch: its rows by number (paxml/data/text_index.py: epoch e visits the documents in a
  permutation seeded by (seed, e); concat / pack / pad with BOS/EOS as paxml/data/packing.py;
  pack plans its rows once and reorders them per epoch).

Hosts. With at least as many files as hosts, host h reads files h, h+H, ...; otherwise every host
reads all files and keeps documents h, h+H, ... . Either way no document reaches two hosts.
For `reset_for_eval` every host packs the whole (unshuffled) set and keeps rows h, h+H, ...,
then pads with zero-weight rows to ceil(ceil(R / H) / batch_size) batches, R the total row count,
so all hosts yield the same number of batches.

Checkpointing. The stream is a pure function of (files, seed, config) and batch i is computed
from i, so the state is {"seed", "num_batches"} and `set_state` costs the same at batch 10 as at
batch 10^6: no batch is replayed.
Reading the table costs time proportional to the data (once per process: ~2 s for DemoLm's 1.3 M
tokens here), not to the position. `deterministic` is kept for configs that set it: the table is
always read in a fixed order.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Iterator


from praxis import base_input
from hostenv import quiet_tensorflow
from paxml.data import packing
from paxml.data import text_index
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
    deterministic: accepted for compatibility; the order is always reproducible (the documents
      are read once, in file order).
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
    self._doc_table: text_index.DocTable | None = None  # read on first use
    self._row_index: text_index.RowIndex | None = None
    self._eval_cache: list[NestedMap] | None = None

  # --- BaseInput.

  def get_next(self) -> NestedMap:
    if self.reset_for_eval:
      batches = self._eval_batches()
      if self._num_batches >= len(batches):
        raise StopIteration
      batch = batches[self._num_batches]
    else:
      index = self._index()
      if not self.repeat and self._num_batches >= index.rows_per_epoch(0) // self.batch_size:
        raise StopIteration  # one pass: the rows left over fill no whole batch and are dropped
      rows = index.rows(self._num_batches * self.batch_size, self.batch_size)
      batch = NestedMap(packing.stack_rows(rows))
    self._num_batches += 1
    return batch

  def get_state(self) -> dict[str, Any]:
    # The position alone: any row is found from its number (text_index.py), in every mode.
    return {"seed": int(self.input_random_seed), "num_batches": int(self._num_batches)}

  def set_state(self, state: dict[str, Any]) -> None:
    self.input_random_seed = int(state["seed"])
    # Older states may also hold "pack_epoch" / "pack_epoch_first_row": no longer needed.
    self._num_batches = int(state["num_batches"])

  def ids_to_strings(self, ids, lengths) -> list[str]:
    return self.tokenizer.ids_to_strings(ids, lengths)

  # --- The stream: rows by number (paxml/data/text_index.py).

  def _index(self) -> text_index.RowIndex:
    """The row index of this host's documents for the current seed."""
    if self._row_index is None or self._row_index.seed != self.input_random_seed:
      self._row_index = text_index.RowIndex(
        self._table(),
        self.seq_len,
        self.packing,
        bos_id=self.tokenizer.bos_id if self.add_bos else None,
        eos_id=self.tokenizer.eos_id if self.add_eos else None,
        seed=int(self.input_random_seed),
        shuffle=bool(self.shuffle),
      )
    return self._row_index

  def _table(self) -> text_index.DocTable:
    """This host's documents, read and tokenized once (all of them for an eval pass)."""
    if self._doc_table is None:
      shard = {"file_shard": None, "doc_shard": None}
      if not self.reset_for_eval:
        shard = self._host_shard()
      docs = []
      for texts in self._documents(**shard):
        docs.extend(self.tokenizer.encode(texts))
      self._doc_table = text_index.DocTable.from_docs(docs)
      if len(self._doc_table) == 0:
        raise InputDataError(f"{self.files}: no documents (every record is empty).")
    return self._doc_table

  def _eval_batches(self) -> list[NestedMap]:
    """The whole eval pass, packed once: every host packs every document in file order and
    keeps rows h, h+H, ...; short hosts are padded to ceil(ceil(R / H) / batch_size) batches."""
    if self._eval_cache is None:
      table, h, num_hosts = self._table(), self.infeed_host_index, self.num_infeed_hosts
      rows = list(
        packing.pack_all(
          (table.doc(i) for i in range(len(table))),
          self.seq_len,
          self.packing,
          bos_id=self.tokenizer.bos_id if self.add_bos else None,
          eos_id=self.tokenizer.eos_id if self.add_eos else None,
        )
      )
      mine = rows[h::num_hosts]
      want = -(-(-(-len(rows) // num_hosts)) // self.batch_size)
      mine += [packing.padding_row(self.seq_len)] * (want * self.batch_size - len(mine))
      self._eval_cache = [
        NestedMap(packing.stack_rows(mine[i * self.batch_size : (i + 1) * self.batch_size]))
        for i in range(want)
      ]
    return self._eval_cache

  def _host_shard(self) -> dict[str, int | None]:
    if self.num_infeed_hosts == 1:
      return {"file_shard": None, "doc_shard": None}
    if len(self.files) >= self.num_infeed_hosts:
      return {"file_shard": self.infeed_host_index, "doc_shard": None}
    return {"file_shard": None, "doc_shard": self.infeed_host_index}

  def _documents(self, file_shard: int | None, doc_shard: int | None) -> Iterator[list[str]]:
    """Lists of document texts, `read_batch_size` at a time, of this host's files in a fixed
    order (sorted files, records in file order)."""
    # Host h's files are positions h, h+H, ... of the sorted list.
    files = self.files if file_shard is None else self.files[file_shard :: self.num_infeed_hosts]
    ds = tf.data.Dataset.from_tensor_slices(files)
    ds = ds.interleave(
      self._reader(),
      cycle_length=1,  # File after file: the table's order must not depend on timing.
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=True,
    )
    if doc_shard is not None:
      ds = ds.shard(self.num_infeed_hosts, doc_shard)
    ds = ds.batch(self.read_batch_size).prefetch(2)
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
