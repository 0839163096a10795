"""A synthetic language-model input that a small model can learn.

Pax's own synthetic input feeds rows of ones: fine for timing, but the loss
says nothing about whether training works. Here each row is an arithmetic
progression modulo the vocabulary, `x[t] = (start + stride * t) % vocab_size`,
with a random start and stride per row. The first token is unpredictable, the
second needs the stride, and from then on the next token is a function of the
previous two (`x[t+1] = 2 * x[t] - x[t-1] mod vocab_size`), so a model that
learns drives the loss well below `ln(vocab_size)`.

Batch `i` is generated from the seed sequence `(seed, infeed_host_index, i)`
alone, so the input's whole state is `(seed, i)`: saving it with a checkpoint
and restoring it makes a resumed run continue the stream instead of replaying
it, and hosts with different indices never produce the same batches.
"""

from typing import Any

import numpy as np


class SyntheticLmInput:
  """Batches of modular arithmetic progressions, shaped like Pax LM inputs.

  `get_next()` returns a dict of numpy arrays, each [batch_size, seq_len]:
    ids: int32 input tokens.
    labels: int32 next tokens (ids shifted left by one).
    weights: float32 ones (every position counts in the loss).
    paddings: float32 zeros (no padding).
    segment_ids: int32 ones (one sequence per row, no packing).
    segment_pos: int32 position of each token, 0..seq_len-1.
  """

  def __init__(
    self,
    *,
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    max_stride: int | None = None,
    seed: int | None = None,
    infeed_host_index: int = 0,
    is_training: bool = True,
    name: str | None = None,
  ):
    """Creates the input; no batches are generated yet.

    Args:
      batch_size: rows per batch on this host.
      seq_len: tokens per row.
      vocab_size: tokens lie in [0, vocab_size).
      max_stride: strides are drawn from [1, max_stride]; defaults to
        vocab_size - 1 (every non-zero stride). Smaller values make the task
        easier.
      seed: base of the random stream. None draws a fresh one, as training
        data should; `get_state` records it so a restore continues the same
        stream.
      infeed_host_index: this host's index; hosts get disjoint streams.
      is_training: marks the dataset the trainer trains on.
      name: names the dataset's summaries and outputs (eval_test_<name>, decoder_out/<name>).
    """
    if batch_size < 1 or seq_len < 1:
      raise ValueError(f"batch_size and seq_len must be positive, got {batch_size} and {seq_len}")
    if vocab_size < 2:
      raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
    max_stride = vocab_size - 1 if max_stride is None else max_stride
    if not 1 <= max_stride < vocab_size:
      raise ValueError(
        f"max_stride must lie in [1, vocab_size - 1] = [1, {vocab_size - 1}], got {max_stride}"
      )
    self.batch_size = batch_size
    self.seq_len = seq_len
    self.vocab_size = vocab_size
    self.max_stride = max_stride
    self.infeed_host_index = infeed_host_index
    self.is_training = is_training
    self.name = name
    self._seed = np.random.SeedSequence().entropy if seed is None else seed
    self._num_batches = 0  # Batches returned so far; the next batch's index.

  def get_next(self) -> dict[str, np.ndarray]:
    """Returns the next batch; the stream never ends."""
    rng = np.random.default_rng([self._seed, self.infeed_host_index, self._num_batches])
    self._num_batches += 1
    shape = (self.batch_size, 1)
    start = rng.integers(0, self.vocab_size, size=shape)
    stride = rng.integers(1, self.max_stride + 1, size=shape)
    # One extra token so that labels are ids shifted by one.
    tokens = (start + stride * np.arange(self.seq_len + 1)) % self.vocab_size
    tokens = tokens.astype(np.int32)  # [batch_size, seq_len + 1]
    positions = np.broadcast_to(
      np.arange(self.seq_len, dtype=np.int32), (self.batch_size, self.seq_len)
    )
    return {
      "ids": tokens[:, :-1],
      "labels": tokens[:, 1:],
      "weights": np.ones((self.batch_size, self.seq_len), np.float32),
      "paddings": np.zeros((self.batch_size, self.seq_len), np.float32),
      "segment_ids": np.ones((self.batch_size, self.seq_len), np.int32),
      "segment_pos": positions.copy(),
    }

  def get_state(self) -> dict[str, Any]:
    """Returns the position in the stream as a JSON-serializable dict."""
    return {"seed": int(self._seed), "num_batches": self._num_batches}

  def set_state(self, state: dict[str, Any]) -> None:
    """Moves to a position returned by `get_state` (on any instance)."""
    self._seed = int(state["seed"])
    self._num_batches = int(state["num_batches"])
