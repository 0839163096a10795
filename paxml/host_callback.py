"""Strings handed to a model through integer ids (Pax's `paxml.host_callback`).

Accelerator code cannot carry strings. Input processing `add`s a string to a `Repository` and
feeds the model its id; a host callback inside the model `get`s the string by id; post-processing
`pop`s it. `repository(namespace)` is one shared repository per namespace (process-wide), so the
three places need not pass the object around. A repository holds at most `max_size` strings:
beyond that the oldest added are dropped, so ids never popped cannot grow memory without bound.
"""

import collections
import threading


class Repository:
  """A thread-safe {id: string} map with ids counting up from 0 and oldest-first eviction."""

  MAX_SIZE = 10000

  def __init__(self, max_size: int = MAX_SIZE):
    self._max_size = max_size
    self._lock = threading.Lock()
    self._by_id: collections.OrderedDict[int, str] = collections.OrderedDict()  # Add order.
    self._next_id = 0

  def add(self, value: str) -> int:
    """Stores `value`; returns its id (unique within this repository)."""
    with self._lock:
      value_id = self._next_id
      self._next_id += 1
      self._by_id[value_id] = value
      while len(self._by_id) > self._max_size:
        self._by_id.popitem(last=False)
      return value_id

  def pop(self, value_id: int) -> bool:
    """Removes the string of `value_id`; False if it is not there (popped or evicted)."""
    with self._lock:
      return self._by_id.pop(value_id, None) is not None

  def get(self, value_id: int) -> str:
    """The string of `value_id`.

    Raises:
      KeyError: the id was never added, or its string was popped or evicted (more than
        `max_size` strings were added after it).
    """
    with self._lock:
      try:
        return self._by_id[value_id]
      except KeyError:
        raise KeyError(
          f"no string with id {value_id} in this repository (never added, popped, or evicted "
          f"after {self._max_size} newer ones)"
        ) from None

  @property
  def size(self) -> int:
    """How many strings are held."""
    with self._lock:
      return len(self._by_id)


_repositories_lock = threading.Lock()
_repositories: dict[str, Repository] = {}


def repository(namespace: str) -> Repository:
  """The process-wide repository of `namespace` (created on first use)."""
  with _repositories_lock:
    if namespace not in _repositories:
      _repositories[namespace] = Repository()
    return _repositories[namespace]
