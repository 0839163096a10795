"""The checkpoint store of the front doors, and the guarantee that saves finish.

`Store` is the one place `paxml.toolkit` and `paxml.experiment_api` touch
`paxml.checkpoints` (an adapter: re-point it here when that module changes).
It saves a pytree per step asynchronously, like the Pax trainer.

Asynchronous saves must not be lost when the script ends right after one
(bobbin's examples save at their last step and return). Every live store is
therefore registered here, and pending saves are waited for:
  * at interpreter exit (normal return, `sys.exit`, an uncaught exception),
    by an `atexit` hook;
  * on SIGTERM, by a handler installed in the main thread the first time a
    store is created: it waits, then lets the previous SIGTERM disposition
    act (by default the process still dies of SIGTERM).
`wait_for_pending_saves()` does the same on demand.
"""

import atexit
import os
import signal
import threading
from typing import Any

from absl import logging

from paxml import checkpoints

# Strong references: a store whose owner is gone (an action object dropped when
# the loop function returned) must still finish its saves before exit.
_live: "set[Store]" = set()
_lock = threading.Lock()
_sigterm_installed = False


def wait_for_pending_saves() -> None:
  """Blocks until every live store's asynchronous saves are on disk."""
  for store in list(_live):
    try:
      store.wait_until_finished()
    except Exception:  # pylint: disable=broad-except
      logging.exception("Waiting for the pending saves of %s failed.", store.directory)


def _register_exit_hook() -> None:
  # Orbax finishes a save in worker threads (concurrent.futures). At exit those
  # pools are shut down by a `threading` exit hook that runs before `atexit`
  # handlers, so an `atexit` wait would come too late. `threading` runs its
  # hooks newest first, so one registered now runs before that shutdown.
  register = getattr(threading, "_register_atexit", None)
  if register is not None:
    register(wait_for_pending_saves)
  atexit.register(wait_for_pending_saves)  # A no-op if the hook above ran.


_register_exit_hook()


def _on_sigterm(signum: int, frame: Any, previous: Any) -> None:
  logging.warning("SIGTERM: waiting for pending checkpoint saves before exiting.")
  wait_for_pending_saves()
  if callable(previous):
    previous(signum, frame)
    return
  if previous == signal.SIG_IGN:
    return
  # The default disposition: die of SIGTERM, as without this handler.
  signal.signal(signum, signal.SIG_DFL)
  os.kill(os.getpid(), signum)


def _install_sigterm_handler() -> None:
  global _sigterm_installed
  if _sigterm_installed or threading.current_thread() is not threading.main_thread():
    return
  previous = signal.getsignal(signal.SIGTERM)
  signal.signal(signal.SIGTERM, lambda s, f: _on_sigterm(s, f, previous))
  _sigterm_installed = True


class Store:
  """Pytree checkpoints `<directory>/checkpoint_%08d` (plus JSON metadata)."""

  def __init__(
    self,
    directory: Any,
    *,
    max_to_keep: int | None = None,
    keep_period: int | None = None,
    async_save: bool = True,
    reader_only: bool = False,
  ):
    """Opens (creating lazily) the store in `directory`.

    Args:
      directory: where the step directories live.
      max_to_keep: keep only the newest this many; None keeps all.
      keep_period: also keep every step that is a multiple of this.
      async_save: write in the background (waited for at exit, see above).
      reader_only: another process or thread writes here; do not clean up its
        in-progress temporary directories.
    """
    self.directory = os.fspath(directory)
    self._ckpt = checkpoints.TreeCheckpointer(
      self.directory,
      max_to_keep=max_to_keep,
      keep_period=keep_period,
      async_save=async_save,
      cleanup_tmp_directories=not reader_only,
    )
    with _lock:
      _live.add(self)
      _install_sigterm_handler()

  def save(self, step: int, tree: Any, *, metadata: Any = None) -> bool:
    """Saves `tree` as `step`; False if that step is already saved."""
    return self._ckpt.save(int(step), tree, metadata=metadata)

  def restore(self, target: Any, step: int | None = None) -> tuple[int, Any, Any] | None:
    """Returns (step, tree shaped like `target`, metadata), or None if empty."""
    restored = self._ckpt.restore(target, step)
    if restored is None:
      return None
    return restored.step, restored.tree, restored.metadata

  def read_metadata(self, step: int | None = None) -> Any:
    return self._ckpt.read_metadata(step)

  def latest_step(self) -> int | None:
    return self._ckpt.latest_step()

  def all_steps(self) -> list[int]:
    return self._ckpt.all_steps()

  def reload(self) -> None:
    self._ckpt.reload()

  def wait_until_finished(self) -> None:
    self._ckpt.wait_until_finished()

  def close(self) -> None:
    self._ckpt.close()
    _live.discard(self)
