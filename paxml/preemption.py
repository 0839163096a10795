"""`PreemptionGuard`: SIGTERM becomes a flag the train loop polls ("save now, then stop")."""

import signal
import threading
from typing import Any

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np


class PreemptionGuard:
  """Turns SIGTERM (by default) into a flag the train loop polls.

  Usage:
    with preemption.PreemptionGuard() as guard:
      for step in ...:
        ...
        if guard.requested:   # or guard.requested_on_any_process()
          checkpointer.save(step, state, ..., force=True)
          break               # then exit cleanly; a restart resumes here

  The handler only sets a flag, so a save is never interrupted half-way by the
  signal. Handlers can only be installed from the main thread; elsewhere the
  guard still works through `request()`. Leaving the block restores the
  previous handlers.
  """

  def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM,)):
    self._signals = signals
    self._event = threading.Event()
    self._previous: dict[int, Any] = {}

  def _handle(self, signum, frame) -> None:
    del frame
    logging.warning(
      "Received signal %d: will save a checkpoint and stop at the next step boundary.", signum
    )
    self._event.set()

  def request(self) -> None:
    """Asks the loop to save and stop, as a signal would."""
    self._event.set()

  @property
  def requested(self) -> bool:
    """Whether this process was asked to stop."""
    return self._event.is_set()

  def requested_on_any_process(self) -> bool:
    """Whether any process was asked to stop; a collective in multi-process jobs.

    Every process must call it at the same steps, so that they all save the
    same step and stop together.
    """
    if jax.process_count() == 1:
      return self.requested
    flags = multihost_utils.process_allgather(np.int32(self.requested))
    return bool(np.any(flags))

  def __enter__(self) -> "PreemptionGuard":
    if threading.current_thread() is threading.main_thread():
      for s in self._signals:
        self._previous[s] = signal.signal(s, self._handle)
    else:
      logging.warning(
        "PreemptionGuard entered outside the main thread: signals are "
        "not intercepted; use request() to stop the loop."
      )
    return self

  def __exit__(self, *exc_info) -> None:
    for s, handler in self._previous.items():
      signal.signal(s, handler)
    self._previous.clear()
