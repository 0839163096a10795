"""`PeekableInput`: a train input whose next batch can be looked at without replaying the stream.

The trainer looks at the next training batch twice outside the loop: once to build the model (its
shapes) and at every `eval_train` (Pax evaluates on `train_input.peek_padded()`, the batch the next
step will train on). Peeking by `get_state` / `get_next` / `set_state` costs a `set_state`, which
for a stream that can only be replayed grows with the position. Here the peeked batch is read once
and kept: the next `get_next` returns it, and `get_state` returns the position from before it, so
a checkpoint taken while a batch is kept still resumes with that batch.
"""

from typing import Any

from praxis import pytypes


class PeekableInput:
  """Wraps a BaseInput; `peek()` is O(1) after the first call and consumes nothing.

  Every other attribute (`batch_size`, `ids_to_strings`, `infeed_host_index`, ...) is the wrapped
  input's.
  """

  def __init__(self, data: Any):
    self._data = data
    self._kept: pytypes.NestedMap | None = None
    self._state_before_kept: dict[str, Any] | None = None

  def peek(self) -> pytypes.NestedMap:
    """The batch the next `get_next` returns."""
    if self._kept is None:
      self._state_before_kept = self._data.get_state()
      self._kept = pytypes.NestedMap(self._data.get_next())
    return self._kept

  def get_next(self) -> pytypes.NestedMap:
    if self._kept is not None:
      batch, self._kept, self._state_before_kept = self._kept, None, None
      return batch
    return pytypes.NestedMap(self._data.get_next())

  def get_state(self) -> dict[str, Any]:
    if self._kept is not None:
      return self._state_before_kept
    return self._data.get_state()

  def set_state(self, state: dict[str, Any]) -> None:
    self._kept = self._state_before_kept = None
    self._data.set_state(state)

  def reset(self) -> None:
    self._kept = self._state_before_kept = None
    self._data.reset()

  @property
  def wrapped(self) -> Any:
    return self._data

  def __getattr__(self, name: str) -> Any:
    if name.startswith("__") or name == "_data":  # Not set yet (copy, pickle): no recursion.
      raise AttributeError(name)
    return getattr(self._data, name)
