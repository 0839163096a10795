"""`IndexedInput`: a BaseInput over examples that can be read by index.

Subclasses say how many examples there are (`_num_examples`, None for an endless source) and build
a batch of them from global example indices (`_examples`). This class does the rest of the
BaseInput contract, with the stream position as its whole state:

* Host sharding: epoch `e` visits the examples in an order `order_e` (a seeded permutation when
  `shuffle`, else 0..N-1); host `h` of `H` takes positions h, h+H, h+2H, ... of it. Hosts never
  share an example within an epoch, and for an endless source host `h` takes indices h, h+H, ...
* Repeating streams give every host floor(N / H) examples per epoch (the tail of each shuffled
  epoch is skipped, a different tail each epoch) so that hosts stay in step; batches run across
  epoch boundaries, so no example inside an epoch is dropped for batching.
* `reset_for_eval` (one finite pass): host `h` reads positions h, h+H, ... < N, then pads with
  zero rows up to ceil(ceil(N / H) / batch_size) batches, so every host yields the same number of
  batches and the padding carries zero weight. Batch `i` of the pass is the same whatever came
  before, so eval results don't depend on what ran earlier.
* State: {"seed", "num_batches"}. Batch `i` is a pure function of (seed, i), so `set_state` is
  O(1) and a restored input continues with exactly the next unseen batch.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from praxis import base_input

NestedMap = base_input.NestedMap


class IndexedInput(base_input.BaseInput):
  """BaseInput over index-addressable examples; see the module docstring.

  Attributes:
    shuffle: visit each epoch in a seeded random order (training); eval passes ignore it.
  """

  shuffle: bool = True

  def __post_init__(self):
    super().__post_init__()
    self._num_batches = 0
    n = self._num_examples()
    if n is not None and n < self.num_infeed_hosts and self.repeat:
      raise base_input.InputConfigError(
        f"{self.name}: {n} examples cannot be split over {self.num_infeed_hosts} infeed hosts "
        "without repeating one; use fewer hosts or more data."
      )
    if n is None and not self.repeat:
      raise base_input.InputConfigError(
        f"{self.name}: the source is endless, so a one-pass input (repeat=False or "
        "reset_for_eval=True) would never end; give it a finite number of examples."
      )

  # --- What subclasses implement.

  @abc.abstractmethod
  def _num_examples(self) -> int | None:
    """Examples in one epoch, or None for an endless source."""

  @abc.abstractmethod
  def _examples(self, indices: np.ndarray) -> dict[str, np.ndarray]:
    """The examples with these global indices, stacked: each value has leading dim len(indices)."""

  # --- The BaseInput contract.

  def get_next(self) -> NestedMap:
    indices, valid = self._batch_indices(self._num_batches)  # [B], [B]
    self._num_batches += 1
    batch = self._examples(np.where(valid, indices, 0))
    if not valid.all():
      # Padding rows: zeros everywhere (so weights are 0), and paddings 1 where the field exists.
      for key, value in batch.items():
        value = np.array(value)  # [B, ...]; a copy, never a view of the source data
        value[~valid] = 1 if key == "paddings" else 0
        batch[key] = value
    return NestedMap(batch)

  def get_state(self) -> dict[str, Any]:
    return {"seed": int(self.input_random_seed), "num_batches": int(self._num_batches)}

  def set_state(self, state: dict[str, Any]) -> None:
    self.input_random_seed = int(state["seed"])
    self._num_batches = int(state["num_batches"])

  def num_batches_per_epoch(self) -> int | None:
    """Batches this host yields per epoch (per eval pass when `reset_for_eval`)."""
    n = self._num_examples()
    if n is None:
      return None
    per_host = self._per_host_examples(n)
    if self.repeat:
      return per_host // self.batch_size
    if self.reset_for_eval:
      return -(-per_host // self.batch_size)
    return per_host // self.batch_size

  # --- Index arithmetic.

  def _per_host_examples(self, n: int) -> int:
    if self.reset_for_eval:
      return -(-n // self.num_infeed_hosts)  # ceil: the short hosts are padded
    return n // self.num_infeed_hosts

  def _batch_indices(self, batch_number: int) -> tuple[np.ndarray, np.ndarray]:
    """Global example indices of this host's batch `batch_number`, and which rows are real."""
    h, num_hosts, b = self.infeed_host_index, self.num_infeed_hosts, self.batch_size
    host_positions = batch_number * b + np.arange(b)  # [B] positions in this host's stream
    n = self._num_examples()
    if n is None:
      return host_positions * num_hosts + h, np.ones(b, bool)
    per_host = self._per_host_examples(n)
    if not self.repeat:
      if batch_number >= self.num_batches_per_epoch():
        raise StopIteration
      epoch_positions = host_positions * num_hosts + h  # [B]
      valid = (host_positions < per_host) & (epoch_positions < n)
      return np.where(valid, self._order(0, n)[np.minimum(epoch_positions, n - 1)], 0), valid
    epochs, within = np.divmod(host_positions, per_host)  # [B], [B]
    indices = np.empty(b, np.int64)
    for epoch in np.unique(epochs):
      rows = epochs == epoch
      indices[rows] = self._order(int(epoch), n)[within[rows] * num_hosts + h]
    return indices, np.ones(b, bool)

  def _order(self, epoch: int, n: int) -> np.ndarray:
    """The visiting order of epoch `epoch`: the same on every host, so their slices are disjoint."""
    if not self.shuffle or self.reset_for_eval:
      return np.arange(n)
    key = (self.input_random_seed, epoch, n)
    if getattr(self, "_order_cache", (None,))[0] != key:
      self._order_cache = (
        key,
        np.random.default_rng([self.input_random_seed, epoch]).permutation(n),
      )
    return self._order_cache[1]
