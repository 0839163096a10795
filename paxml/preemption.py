"""What happens when a job is stopped, for every front door.

PreemptionGuard         SIGTERM becomes a flag the Pax train loop polls ("save now, then stop").
finish_saves_at_exit    for loops that do not poll (bobbin's and JAXline's): a store's pending
                        asynchronous saves are waited for at interpreter exit and on SIGTERM,
                        so a save made just before the script ends is not lost.
"""

import atexit

# Imported first so that its exit hook (which shuts the worker pools down) is registered before
# ours below, and therefore runs after it: see _wait_at_exit.
import concurrent.futures.thread  # noqa: F401  pylint: disable=unused-import
import os
import signal
import threading
from typing import Any, Protocol

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


class _Finishable(Protocol):
  directory: str

  def wait_until_finished(self) -> None: ...


# Strong references: a store whose owner is gone (a bobbin action dropped when the loop function
# returned) must still finish its saves before the process ends.
_pending_stores: "set[_Finishable]" = set()
_pending_lock = threading.Lock()
_sigterm_waits = False


def wait_for_pending_saves() -> None:
  """Blocks until every registered store's asynchronous saves are on disk."""
  for store in list(_pending_stores):
    try:
      store.wait_until_finished()
    except Exception:  # pylint: disable=broad-except
      logging.exception("Waiting for the pending saves of %s failed.", store.directory)


def _wait_at_exit() -> None:
  # Orbax finishes a save in concurrent.futures worker threads, whose pools `threading` shuts down
  # in an exit hook that runs before `atexit` handlers; `threading` runs its hooks newest first,
  # so one registered at import runs before that shutdown. atexit is the fallback.
  register = getattr(threading, "_register_atexit", None)
  if register is not None:
    register(wait_for_pending_saves)
  atexit.register(wait_for_pending_saves)  # A no-op when the hook above has run.


_wait_at_exit()


def _on_sigterm(signum: int, frame: Any, previous: Any) -> None:
  logging.warning("SIGTERM: waiting for pending checkpoint saves before exiting.")
  wait_for_pending_saves()
  if callable(previous):
    previous(signum, frame)
    return
  if previous == signal.SIG_IGN:
    return
  signal.signal(signum, signal.SIG_DFL)  # The default disposition: die of SIGTERM, as before.
  os.kill(os.getpid(), signum)


def finish_saves_at_exit(store: _Finishable) -> None:
  """Registers `store`: its pending saves are waited for at exit and on SIGTERM (a handler put in
  front of the previous one the first time, from the main thread; the previous one still acts)."""
  global _sigterm_waits
  with _pending_lock:
    _pending_stores.add(store)
    if not _sigterm_waits and threading.current_thread() is threading.main_thread():
      previous = signal.getsignal(signal.SIGTERM)
      signal.signal(signal.SIGTERM, lambda s, f: _on_sigterm(s, f, previous))
      _sigterm_waits = True


def forget_saves(store: _Finishable) -> None:
  """Unregisters `store` (it was closed: nothing of it is pending any more)."""
  with _pending_lock:
    _pending_stores.discard(store)
