"""Synthetic LM inputs: Pax's constant `SyntheticLmData` and a random-token variant.

`SyntheticLmData` reproduces Pax's batches exactly: every row is `ids = labels = segment_ids = 1`,
`paddings = 0`, `weights = 1`, `segment_pos = 0..seq_len-1`. It is for timing a model, not for
learning anything. `SyntheticRandomLmData` draws uniform random tokens (labels are the ids shifted
by one), so the model's work per step is realistic (no constant embeddings lookups to cache) while
the loss stays at ln(vocab_size); use it for throughput benchmarks.

Both are endless by default; give `num_examples` to make a finite set (for eval with
`reset_for_eval`, or tests of the sharding rules).
"""

from __future__ import annotations


import numpy as np

from paxml.data import indexed_input


class SyntheticLmData(indexed_input.IndexedInput):
  """Pax's SyntheticLmData: constant rows of ones, shaped like packed LM inputs.

  Attributes:
    seq_len: tokens per row.
    num_examples: examples per epoch; None for an endless stream.
  """

  seq_len: int = 512
  num_examples: int | None = None

  def __post_init__(self):
    if self.seq_len < 1:
      raise ValueError(f"{self.name}: seq_len must be >= 1, got {self.seq_len}.")
    super().__post_init__()

  def _num_examples(self) -> int | None:
    return self.num_examples

  def _examples(self, indices: np.ndarray) -> dict[str, np.ndarray]:
    shape = (len(indices), self.seq_len)
    ones = np.ones(shape, np.int32)
    return {
      "ids": ones,
      "labels": ones.copy(),
      "paddings": np.zeros(shape, np.float32),
      "weights": np.ones(shape, np.float32),
      "segment_ids": ones.copy(),
      "segment_pos": np.tile(np.arange(self.seq_len, dtype=np.int32), (len(indices), 1)),
    }

  def ids_to_strings(self, ids, lengths) -> list[str]:
    """Space-separated ids: synthetic data has no vocabulary to decode with."""
    return [" ".join(str(t) for t in row[:n]) for row, n in zip(np.asarray(ids), lengths)]


class SyntheticRandomLmData(SyntheticLmData):
  """Uniform random tokens in [0, vocab_size); example `i` depends only on (seed, i).

  Attributes:
    vocab_size: tokens lie in [0, vocab_size).
  """

  vocab_size: int = 32000

  def __post_init__(self):
    if self.vocab_size < 2:
      raise ValueError(f"{self.name}: vocab_size must be >= 2, got {self.vocab_size}.")
    super().__post_init__()

  def _examples(self, indices: np.ndarray) -> dict[str, np.ndarray]:
    batch = super()._examples(indices)
    # One generator per example, keyed by its global index: the same example comes out whichever
    # host or batch asks for it, which is what makes the sharding and restore tests meaningful.
    tokens = np.stack(
      [
        np.random.default_rng([self.input_random_seed, int(i)]).integers(
          0, self.vocab_size, self.seq_len + 1, dtype=np.int32
        )
        for i in indices
      ]
    )  # [B, T + 1]
    batch["ids"] = tokens[:, :-1]
    batch["labels"] = tokens[:, 1:]
    return batch
