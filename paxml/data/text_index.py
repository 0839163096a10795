"""Random access into `TextInput`'s stream of rows: any batch from its number, in time that does
not grow with the number.

The documents of a host are tokenized once into a `DocTable` (one int32 array of every token and
the offsets of each document). Epoch `e` visits them in a fixed order (a permutation seeded by
(seed, e) when shuffling, else table order), and each document is one LM example of
`length = len(doc) + [BOS] + [EOS] - 1` tokens (paxml/data/packing.py). Then, per packing mode:

* concat: the examples of epoch 0, 1, 2, ... run end to end as one token stream; every epoch has
  the same number of tokens E, so row r is the tokens [r T, (r + 1) T) of the stream: epoch
  r T // E, and inside it a binary search over the epoch's cumulative lengths.
* pad: one row per document, so row r is document r mod D of epoch r // D.
* pack: first fit over each epoch's examples (packing.Packer's rule, on lengths only), the open
  rows flushed at the epoch's end, so an epoch's rows depend on that epoch alone. Their number
  varies from epoch to epoch, so finding the epoch of row r needs the row counts of the epochs
  before it: the input's state records the epoch of its position and the epoch's first row, which
  makes a restore plan one epoch only (a state without them plans epochs from the first).

Packing is deterministic: rows are a pure function of (documents, seed, config).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from paxml.data import packing


@dataclasses.dataclass(frozen=True)
class DocTable:
  """Tokenized documents: document i is `tokens[offsets[i]:offsets[i + 1]]`."""

  tokens: np.ndarray  # [N] int32
  offsets: np.ndarray  # [D + 1] int64

  @classmethod
  def from_docs(cls, docs: Sequence[np.ndarray]) -> "DocTable":
    lengths = np.array([len(d) for d in docs], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.concatenate(docs).astype(np.int32) if docs else np.zeros(0, np.int32)
    return cls(tokens, offsets)

  def __len__(self) -> int:
    return len(self.offsets) - 1

  def doc(self, i: int) -> np.ndarray:
    return self.tokens[self.offsets[i] : self.offsets[i + 1]]


class RowIndex:
  """Row r of a host's stream from its number (module docstring)."""

  def __init__(
    self,
    table: DocTable,
    seq_len: int,
    mode: str,
    *,
    bos_id: int | None,
    eos_id: int | None,
    seed: int,
    shuffle: bool,
    max_open_rows: int = 8,
  ):
    self.table, self.seq_len, self.mode = table, seq_len, mode
    self.bos_id, self.eos_id = bos_id, eos_id
    self.seed, self.shuffle, self.max_open_rows = seed, shuffle, max_open_rows
    extra = int(bos_id is not None) + int(eos_id is not None) - 1
    self.example_lengths = np.diff(table.offsets) + extra  # [D] tokens of each LM example
    # Examples of no tokens (an empty document without BOS and EOS) make no rows.
    self.example_lengths = np.maximum(self.example_lengths, 0)
    self.tokens_per_epoch = int(self.example_lengths.sum())
    self._layout: tuple[int, np.ndarray, np.ndarray] | None = None  # (epoch, order, ends)
    self._plans: dict[int, list] = {}
    self._pack_hint = (0, 0)  # Pack: (an epoch, its first row), the last one found.

  # --- Epochs.

  def order(self, epoch: int) -> np.ndarray:
    """The documents of `epoch` in visiting order."""
    n = len(self.table)
    if not self.shuffle:
      return np.arange(n)
    return np.random.default_rng([self.seed, epoch]).permutation(n)

  def _epoch_layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, cumulative example ends in that order) of `epoch`, cached for the last epoch."""
    if self._layout is None or self._layout[0] != epoch:
      order = self.order(epoch)
      self._layout = (epoch, order, np.cumsum(self.example_lengths[order]))
    return self._layout[1], self._layout[2]

  def example(self, doc: int) -> tuple[np.ndarray, np.ndarray]:
    return packing.lm_example(self.table.doc(doc), self.bos_id, self.eos_id)

  # --- Rows per mode.

  def rows_per_epoch(self, epoch: int = 0) -> int:
    """Rows epoch `epoch` alone yields (concat: whole rows of its tokens)."""
    if self.mode == "concat":
      return self.tokens_per_epoch // self.seq_len
    if self.mode == "pad":
      return len(self.table)
    return len(self._plan(epoch))

  def rows(self, first: int, count: int) -> list[dict[str, np.ndarray]]:
    """Rows first .. first + count - 1 of the endless (repeating) stream."""
    if self.mode == "concat":
      return self._concat_rows(first, count)
    if self.mode == "pad":
      return [self._pad_row(r) for r in range(first, first + count)]
    return [self._pack_row(r) for r in range(first, first + count)]

  def _concat_rows(self, first: int, count: int) -> list[dict[str, np.ndarray]]:
    if self.tokens_per_epoch == 0:
      raise ValueError("the documents hold no tokens: there are no rows to read")
    t = self.seq_len
    ids, labels = self._concat_span(first * t, count * t)  # [count * T] each
    weights = np.ones(t, np.float32)
    return [
      {
        "ids": ids[i * t : (i + 1) * t],
        "labels": labels[i * t : (i + 1) * t],
        "weights": weights,
        "paddings": np.zeros(t, np.float32),
        "segment_ids": np.ones(t, np.int32),
        "segment_pos": np.arange(t, dtype=np.int32),
      }
      for i in range(count)
    ]

  def _concat_span(self, start: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """ids and labels of the stream's tokens [start, start + length)."""
    ids, labels = [], []
    while length > 0:
      epoch, within = divmod(start, self.tokens_per_epoch)
      order, ends = self._epoch_layout(epoch)
      j = int(np.searchsorted(ends, within, side="right"))  # the example holding `within`
      doc = int(order[j])
      offset = within - (int(ends[j]) - int(self.example_lengths[doc]))
      doc_ids, doc_labels = self.example(doc)
      n = min(len(doc_ids) - offset, length)
      ids.append(doc_ids[offset : offset + n])
      labels.append(doc_labels[offset : offset + n])
      start, length = start + n, length - n
    return np.concatenate(ids), np.concatenate(labels)

  def _pad_row(self, r: int) -> dict[str, np.ndarray]:
    epoch, i = divmod(r, len(self.table))
    doc = int(self._epoch_layout(epoch)[0][i])
    ids, labels = self.example(doc)
    n = min(len(ids), self.seq_len)  # One example per row, truncated and padded.
    return packing.row_of_segments(self.seq_len, [(ids[:n], labels[:n])])

  # --- Pack: first fit on lengths, per epoch.

  def _plan(self, epoch: int) -> list[list[tuple[int, int, int]]]:
    """Epoch `epoch`'s rows, each a list of pieces (document, start, length); the last planned
    epoch is kept."""
    if epoch not in self._plans:
      order = self._epoch_layout(epoch)[0]
      plan = plan_pack(order, self.example_lengths, self.seq_len, self.max_open_rows)
      self._plans = {epoch: plan}
    return self._plans[epoch]

  def pack_position(self) -> tuple[int, int]:
    """(epoch, the stream's row number of its first row) of the last row read."""
    return self._pack_hint

  def set_pack_position(self, epoch: int, first_row: int) -> None:
    """Says that epoch `epoch` starts at row `first_row` (from a saved state), so finding a row
    from there on plans no earlier epoch."""
    self._pack_hint = (int(epoch), int(first_row))

  def _pack_epoch_of_row(self, r: int) -> tuple[int, int]:
    """(epoch, its first row) of the epoch holding row r, walking from the last one known."""
    epoch, first = self._pack_hint
    if r < first:
      epoch, first = 0, 0
    while r >= first + len(self._plan(epoch)):
      first += len(self._plan(epoch))
      epoch += 1
    self._pack_hint = (epoch, first)
    return epoch, first

  def _pack_row(self, r: int) -> dict[str, np.ndarray]:
    epoch, first = self._pack_epoch_of_row(r)
    segments = []
    for doc, start, n in self._plan(epoch)[r - first]:
      ids, labels = self.example(doc)
      segments.append((ids[start : start + n], labels[start : start + n]))
    return packing.row_of_segments(self.seq_len, segments)


def plan_pack(
  order: np.ndarray, lengths: np.ndarray, seq_len: int, max_open_rows: int
) -> list[list[tuple[int, int, int]]]:
  """packing.Packer's "pack" rule on example lengths: the rows, in the order the packer emits them
  (full rows at once, the oldest open row beyond `max_open_rows`, the rest flushed at the end)."""
  done: list[list[tuple[int, int, int]]] = []
  open_rows: list[list] = []  # [room, pieces]
  for doc in order.tolist():
    length = int(lengths[doc])
    for start in range(0, length, seq_len):
      n = min(seq_len, length - start)
      for row in open_rows:
        if row[0] >= n:
          row[0] -= n
          row[1].append((doc, start, n))
          break
      else:
        open_rows.append([seq_len - n, [(doc, start, n)]])
      full = [row for row in open_rows if row[0] == 0]
      for row in full:
        open_rows.remove(row)
        done.append(row[1])
      while len(open_rows) > max_open_rows:
        done.append(open_rows.pop(0)[1])
  done.extend(row[1] for row in open_rows)
  return done
