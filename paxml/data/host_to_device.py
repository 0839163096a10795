"""Host batches to global `jax.Array`s with the batch sharding, prefetched in a background thread.

`to_global` is the one host-to-device path of batches: the Pax trainer's
`Partitioner.global_batch` is it with the partitioner's batch sharding. (The pmap faces put
per-device stacks with praxis.sharding.put_stacked instead: pmap's layout, not a global batch.)

Each host's input returns numpy arrays of its own `batch_size` rows; `to_global` assembles them
into arrays of the global batch (`batch_size * num_infeed_hosts` rows) laid out by the given
sharding (usually `NamedSharding(mesh, P(("replica", "data")))`: rows split over the data axes),
with `jax.make_array_from_process_local_data`, so the same code runs on one or many processes.

`Prefetcher` does that ahead of the train loop: a thread reads the next `buffer_size` batches and
starts their transfers while the device runs the current step. The input's checkpoint state must
describe what the *trainer* consumed, not what the thread read ahead, so the thread records
`get_state()` after each batch and `Prefetcher.get_state()` returns the one that belongs to the
last batch handed out.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import jax
import numpy as np

from praxis import base_input

NestedMap = base_input.NestedMap
_END = object()


def to_global(batch: Any, sharding: jax.sharding.Sharding) -> Any:
  """One host's batch [b, ...] per leaf -> global jax.Arrays [b * num_hosts, ...] per leaf."""
  return jax.tree.map(
    lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), batch
  )


class Prefetcher:
  """Iterates over global batches of `inp`, keeping up to `buffer_size` converted ahead.

  Errors raised by the input in the thread (a bad file, say) are raised again by `next()` in the
  caller's thread; the end of a finite input ends the iteration.
  """

  def __init__(
    self, inp: base_input.BaseInput, sharding: jax.sharding.Sharding, buffer_size: int = 2
  ):
    if buffer_size < 1:
      raise ValueError(f"buffer_size must be >= 1, got {buffer_size}.")
    self._input = inp
    self._sharding = sharding
    self._queue: queue.Queue = queue.Queue(maxsize=buffer_size)
    self._state = inp.get_state()  # state after the last batch handed out
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, name="input-prefetch", daemon=True)
    self._thread.start()

  def _run(self) -> None:
    try:
      while not self._stop.is_set():
        try:
          host_batch = self._input.get_next()
        except StopIteration:
          self._put((_END, None))
          return
        state = self._input.get_state()
        self._put((to_global(host_batch, self._sharding), state))
    except BaseException as e:  # pylint: disable=broad-except  (handed to the consumer)
      self._put((e, None))

  def _put(self, item) -> None:
    while not self._stop.is_set():
      try:
        self._queue.put(item, timeout=0.1)
        return
      except queue.Full:
        continue

  def __iter__(self):
    return self

  def __next__(self) -> NestedMap:
    if self._thread is None:
      raise StopIteration
    item, state = self._queue.get()
    if item is _END:
      self._thread = None
      raise StopIteration
    if isinstance(item, BaseException):
      self._thread = None
      raise item
    self._state = state
    return item

  def get_state(self) -> dict[str, Any]:
    """The input's state after the last batch returned by `next()` (for input checkpointing)."""
    return self._state

  def close(self) -> None:
    """Stops the thread; batches read ahead are dropped (the state above does not count them)."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join(timeout=10)
      self._thread = None
