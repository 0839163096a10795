"""Turning tokenized documents into fixed-length LM rows: concatenate, pack or pad.

Every document first becomes one LM example: `tokens = [BOS] + doc + [EOS]`, `ids = tokens[:-1]`,
`labels = tokens[1:]` (each position predicts the next token of its own document). Then:

* "concat": the examples run end to end and are cut every `seq_len` tokens, GPT-style. Rows are
  one segment each (segment_ids 1, segment_pos 0..T-1): attention crosses document boundaries,
  nothing is wasted on padding.
* "pack": each example (split into `seq_len` pieces when longer) goes whole into a row that has
  room, first fit among `max_open_rows` open rows. Segment `k` of a row has segment_ids `k`
  (1-based) and segment_pos 0.. from its own start; padding has segment_ids 0, paddings 1 and
  weights 0. A model that masks attention to equal segment ids and uses segment_pos as positions
  computes on each packed document exactly what it would on that document alone.
* "pad": one example per row, truncated to `seq_len` (the rest of a long document is dropped) and
  padded. The reference that packing must agree with.

Rows are dicts of [seq_len] arrays: ids, labels (int32), weights, paddings (float32),
segment_ids, segment_pos (int32).
"""

from __future__ import annotations

import collections
from typing import Iterator

import numpy as np

MODES = ("concat", "pack", "pad")


def lm_example(
  doc: np.ndarray, bos_id: int | None, eos_id: int | None
) -> tuple[np.ndarray, np.ndarray]:
  """(ids, labels) of one document: labels are the next tokens, BOS/EOS added when given."""
  parts = (
    ([[bos_id]] if bos_id is not None else []) + [doc] + ([[eos_id]] if eos_id is not None else [])
  )
  tokens = np.concatenate(parts).astype(np.int32)  # [L + 1]
  return tokens[:-1], tokens[1:]


class _Row:
  """A row under construction: segments placed so far."""

  def __init__(self, seq_len: int):
    self.ids = np.zeros(seq_len, np.int32)
    self.labels = np.zeros(seq_len, np.int32)
    self.segment_ids = np.zeros(seq_len, np.int32)
    self.segment_pos = np.zeros(seq_len, np.int32)
    self.used = 0
    self.num_segments = 0

  def room(self) -> int:
    return len(self.ids) - self.used

  def add(self, ids: np.ndarray, labels: np.ndarray, as_new_segment: bool = True) -> None:
    n = len(ids)
    span = slice(self.used, self.used + n)
    self.ids[span], self.labels[span] = ids, labels
    if as_new_segment or self.num_segments == 0:
      self.num_segments += 1
      self.segment_pos[span] = np.arange(n)
    else:  # "concat": the row is one segment whatever it holds
      self.segment_pos[span] = np.arange(self.used, self.used + n)
    self.segment_ids[span] = self.num_segments
    self.used += n

  def finish(self) -> dict[str, np.ndarray]:
    valid = np.arange(len(self.ids)) < self.used  # [T]
    return {
      "ids": self.ids,
      "labels": self.labels,
      "weights": valid.astype(np.float32),
      "paddings": (~valid).astype(np.float32),
      "segment_ids": self.segment_ids,
      "segment_pos": self.segment_pos,
    }


class Packer:
  """Feeds documents in, takes finished rows out; deterministic for a given document order.

  Usage: `for doc in docs: rows.extend(packer.add(doc))`, then `rows.extend(packer.flush())`.
  """

  def __init__(
    self,
    seq_len: int,
    mode: str = "pack",
    bos_id: int | None = None,
    eos_id: int | None = None,
    max_open_rows: int = 8,
  ):
    if mode not in MODES:
      raise ValueError(f"packing mode must be one of {MODES}, got {mode!r}.")
    if seq_len < 1:
      raise ValueError(f"seq_len must be >= 1, got {seq_len}.")
    self.seq_len, self.mode = seq_len, mode
    self.bos_id, self.eos_id = bos_id, eos_id
    self.max_open_rows = max_open_rows if mode == "pack" else 1
    self._open: collections.deque[_Row] = collections.deque()

  def add(self, doc: np.ndarray) -> list[dict[str, np.ndarray]]:
    """Adds one tokenized document; returns the rows this completed (maybe none)."""
    ids, labels = lm_example(np.asarray(doc, np.int32), self.bos_id, self.eos_id)
    if len(ids) == 0:
      return []
    if self.mode == "pad":
      row = _Row(self.seq_len)
      row.add(ids[: self.seq_len], labels[: self.seq_len])
      return [row.finish()]
    if self.mode == "concat":
      return self._concat(ids, labels)
    done = []
    for start in range(0, len(ids), self.seq_len):
      done.extend(
        self._place(ids[start : start + self.seq_len], labels[start : start + self.seq_len])
      )
    return done

  def flush(self) -> list[dict[str, np.ndarray]]:
    """Rows still open (padded at the end); the packer is empty afterwards."""
    rows = [row.finish() for row in self._open if row.used]
    self._open.clear()
    return rows

  def _concat(self, ids: np.ndarray, labels: np.ndarray) -> list[dict[str, np.ndarray]]:
    done = []
    while len(ids):
      if not self._open:
        self._open.append(_Row(self.seq_len))
      row = self._open[0]
      n = min(row.room(), len(ids))
      row.add(ids[:n], labels[:n], as_new_segment=False)
      ids, labels = ids[n:], labels[n:]
      if row.room() == 0:
        done.append(self._open.popleft().finish())
    return done

  def _place(self, ids: np.ndarray, labels: np.ndarray) -> list[dict[str, np.ndarray]]:
    """First fit of one piece (len <= seq_len) among the open rows."""
    for row in self._open:
      if row.room() >= len(ids):
        row.add(ids, labels)
        break
    else:
      row = _Row(self.seq_len)
      row.add(ids, labels)
      self._open.append(row)
    done = []
    # Full rows leave at once; beyond max_open_rows the oldest (usually fullest) row leaves.
    for full in [r for r in self._open if r.room() == 0]:
      self._open.remove(full)
      done.append(full.finish())
    while len(self._open) > self.max_open_rows:
      done.append(self._open.popleft().finish())
    return done


def pack_all(
  docs,
  seq_len: int,
  mode: str = "pack",
  bos_id: int | None = None,
  eos_id: int | None = None,
  max_open_rows: int = 8,
) -> Iterator[dict[str, np.ndarray]]:
  """All rows of a sequence of documents, the last ones flushed."""
  packer = Packer(seq_len, mode, bos_id, eos_id, max_open_rows)
  for doc in docs:
    yield from packer.add(doc)
  yield from packer.flush()


def row_of_segments(seq_len: int, segments: list[tuple[np.ndarray, np.ndarray]]):
  """One row holding these (ids, labels) pieces, each its own segment, then padding."""
  row = _Row(seq_len)
  for ids, labels in segments:
    row.add(ids, labels)
  return row.finish()


def stack_rows(rows: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
  """A batch [B, T] per field from B rows."""
  return {key: np.stack([row[key] for row in rows]) for key in rows[0]}


def padding_row(seq_len: int) -> dict[str, np.ndarray]:
  """A row that carries no data: zero weight, all padding, segment 0."""
  return _Row(seq_len).finish()
