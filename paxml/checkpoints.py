"""Checkpoints on Orbax: the one implementation every front door uses.

Three classes share one Orbax `CheckpointManager` configuration (`_options`):

  Checkpointer: the Pax trainer's `<job_log_dir>/checkpoints/checkpoint_%08d`
    with two items, `state` (the train state, arrays via TensorStore) and
    `train_input` (the input's position as JSON).
  CheckpointReader: reads that layout and never writes: eval/decode jobs
    following a trainer, and warm starts from another run (which may read only
    some of the arrays, cast and resharded to the new model's layout).
  TreeCheckpointer: any directory of `checkpoint_%08d` holding an arbitrary
    pytree (`state`) plus JSON `metadata` (e.g. keep-best eval results); the
    bobbin-style toolkit's checkpoint saver, `initialize_train_state(
    checkpoint_path=...)`, keep-best and the JAXline checkpointer adapter are
    built on it.

A restore takes the target's shardings, not the saved ones: a checkpoint
written on one mesh is read onto another (TensorStore reads each device's
slice).

The two writers save asynchronously: `save` returns once the arrays are copied off the
device (so the caller may donate them right after) and the files are written in
the background; `wait_until_finished` (or `close`, or leaving the `with` block)
waits for them. Orbax writes each checkpoint to a temporary directory and
renames it when complete, so an interrupted save is never listed as a step (nor
chosen as latest) and its leftovers are removed by the next manager.

Retention: the newest `max_to_keep` are kept; older ones are also kept when
their step is a multiple of `keep_period`, or when at least
`save_keep_interval_duration` passed since the previous kept one (Pax's flag of
that name; Orbax's `keep_time_interval`).

`PreemptionGuard` turns SIGTERM into a flag the train loop polls ("save now,
then exit cleanly").
"""

import dataclasses
import datetime
import os
import re
import signal
import threading
from typing import Any

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp

_STATE = "state"
_TRAIN_INPUT = "train_input"
_METADATA = "metadata"
_STEP_PREFIX = "checkpoint"
_STEP_FORMAT = _STEP_PREFIX + "_{:08d}"
_STEP_DIR = re.compile(_STEP_PREFIX + r"_(\d{8})")

Duration = datetime.timedelta | float | int | str


def parse_duration(value: Duration | None) -> datetime.timedelta | None:
  """Returns `value` as a timedelta: seconds, or a string like '12h', '1h30m', '90s'."""
  if value is None or isinstance(value, datetime.timedelta):
    return value
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    return datetime.timedelta(seconds=value)
  if isinstance(value, str):
    parts = re.findall(r"(\d+(?:\.\d+)?)([dhms])", value.strip())
    if parts and "".join(n + u for n, u in parts) == value.replace(" ", ""):
      unit_s = {"d": 86400, "h": 3600, "m": 60, "s": 1}
      return datetime.timedelta(seconds=sum(float(n) * unit_s[u] for n, u in parts))
  raise ValueError(
      f"Cannot read {value!r} as a duration; pass a datetime.timedelta, a number of "
      "seconds, or a string of <number><unit> parts with units d/h/m/s, e.g. '12h'.")


def _options(*, save_interval_steps: int, max_to_keep: int | None,
             keep_period: int | None, save_keep_interval_duration: Duration | None,
             async_save: bool, cleanup_tmp_directories: bool = True,
             read_only: bool = False) -> ocp.CheckpointManagerOptions:
  keep_time = parse_duration(save_keep_interval_duration)
  if keep_time is not None and keep_time.total_seconds() < 1:
    # Orbax truncates to whole seconds; below 1 s it would keep everything.
    raise ValueError(
        f"save_keep_interval_duration={save_keep_interval_duration!r} is under one "
        "second; Orbax counts whole seconds. Use at least '1s', or None to disable.")
  return ocp.CheckpointManagerOptions(
      save_interval_steps=save_interval_steps,
      max_to_keep=max_to_keep,
      keep_period=keep_period,
      keep_time_interval=keep_time,
      step_name_format=ocp.step.standard_name_format(
          step_prefix=_STEP_PREFIX, step_format_fixed_length=8),
      # A crash mid-save leaves a temporary directory; remove it on start.
      cleanup_tmp_directories=cleanup_tmp_directories,
      enable_async_checkpointing=async_save,
      read_only=read_only,
  )


@dataclasses.dataclass(frozen=True)
class Restored:
  """A checkpoint read back by `Checkpointer.restore`."""

  step: int
  state: Any
  input_state: dict[str, Any]


def checkpoint_dir(job_log_dir: str) -> str:
  """Returns the directory that holds the step directories."""
  return os.path.join(job_log_dir, "checkpoints")


class _ManagerOwner:
  """What every class here shares: an Orbax manager of two items, the `state`
  pytree and one JSON item (named `json_item`), with saving, restoring, step
  listing, waiting and closing."""

  def __init__(self, directory: str, json_item: str, options: ocp.CheckpointManagerOptions):
    self.directory = directory
    self._json_item = json_item
    self._manager = ocp.CheckpointManager(directory, options=options,
                                          item_names=(_STATE, json_item))

  def _save(self, step: int, state: Any, json_value: Any, *, force: bool) -> bool:
    return self._manager.save(
        step,
        args=ocp.args.Composite(**{
            _STATE: ocp.args.StandardSave(state),
            self._json_item: ocp.args.JsonSave(json_value),
        }),
        force=force,
    )

  def _restore(self, step: int | None, state_target: Any = None
               ) -> tuple[int, Any, Any] | None:
    """Reads checkpoint `step` (None: the latest) as (step, state, JSON item).

    With `state_target` None only the JSON item is read (state is None).
    Returns None when there is no checkpoint.
    """
    step = self.latest_step() if step is None else step
    if step is None:
      return None
    args = {self._json_item: ocp.args.JsonRestore()}
    if state_target is not None:
      args[_STATE] = ocp.args.StandardRestore(state_target)
    restored = self._manager.restore(step, args=ocp.args.Composite(**args))
    state = restored[_STATE] if state_target is not None else None
    return step, state, restored[self._json_item]

  def latest_step(self) -> int | None:
    """Returns the newest finished checkpoint's step, or None if there is none."""
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    """Returns the steps of all finished checkpoints, oldest first."""
    return sorted(self._manager.all_steps())

  def wait_until_finished(self) -> None:
    """Blocks until every pending asynchronous save is on disk."""
    self._manager.wait_until_finished()

  def reload(self) -> None:
    """Re-reads the step list from disk (to see another process's saves)."""
    self._manager.reload()

  def close(self) -> None:
    """Waits for pending saves to finish, then releases Orbax's resources."""
    self._manager.wait_until_finished()
    self._manager.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()


class _TrainLayout(_ManagerOwner):
  """The trainer's layout (`state` plus the input position as `train_input`), which both the
  writer and the reader restore the same way."""

  def __init__(self, directory: str, options: ocp.CheckpointManagerOptions):
    super().__init__(directory, _TRAIN_INPUT, options)

  def restore(self, abstract_state: Any, step: int | None = None) -> Restored | None:
    """Reads checkpoint `step` (default: the latest) into `abstract_state`'s structure.

    Args:
      abstract_state: the state's pytree with `jax.ShapeDtypeStruct` leaves (from
        `jax.eval_shape`), each with the sharding the restored array should have; that may be
        another mesh's than the one the checkpoint was saved from.
      step: which checkpoint; None means the latest.

    Returns:
      The checkpoint, or None when there is none to restore.
    """
    restored = self._restore(step, abstract_state)
    if restored is None:
      return None
    step, state, input_state = restored
    return Restored(step=step, state=state, input_state=input_state)


class Checkpointer(_TrainLayout):
  """The Pax trainer's checkpoints: saves every `save_interval_steps`."""

  def __init__(self, job_log_dir: str, *, save_interval_steps: int, max_to_keep: int,
               save_keep_interval_duration: Duration | None = None,
               keep_period: int | None = None):
    super().__init__(
        checkpoint_dir(job_log_dir),
        _options(save_interval_steps=save_interval_steps, max_to_keep=max_to_keep,
                 keep_period=keep_period,
                 save_keep_interval_duration=save_keep_interval_duration, async_save=True))

  def save(
      self, step: int, state: Any, input_state: dict[str, Any], *, force: bool = False
  ) -> bool:
    """Saves if `step` is due (or `force`); returns whether it saved.

    A step is due when it is a multiple of `save_interval_steps`, or when the
    directory has no checkpoint yet (so a fresh run saves its initial state).
    Without `force`, steps at or before the latest checkpoint are skipped.

    The arrays are copied before this returns, so the caller may donate or
    overwrite `state` right after.
    """
    return self._save(step, state, input_state, force=force)


class CheckpointReader(_TrainLayout):
  """Reads trainer checkpoints (`Checkpointer`'s layout) and never writes or deletes any.

  For readers of a directory that a trainer may be writing to at the same time (eval and decode
  jobs) and of another run's checkpoints (warm start, paxml/warm_start.py). `directory` is a
  `job_log_dir`, its `checkpoints/` directory, or one `checkpoint_%08d` directory (then that is
  the only step it offers). With `missing_ok`, a directory that does not exist yet reads as
  one without checkpoints (a job started before its trainer).
  """

  def __init__(self, directory: str, *, missing_ok: bool = False):
    directory = os.path.normpath(str(directory))
    self.only_step: int | None = None
    match = _STEP_DIR.fullmatch(os.path.basename(directory))
    if match:
      directory, self.only_step = os.path.dirname(directory), int(match.group(1))
    elif os.path.isdir(checkpoint_dir(directory)):
      directory = checkpoint_dir(directory)
    if not os.path.isdir(directory) and not missing_ok:
      raise FileNotFoundError(
          f"No checkpoint directory at {directory}: expected a job_log_dir, its checkpoints/ "
          "directory or one checkpoint_%08d directory in it")
    super().__init__(directory, _options(
        save_interval_steps=1, max_to_keep=None, keep_period=None,
        save_keep_interval_duration=None, async_save=False,
        cleanup_tmp_directories=False, read_only=True))

  def latest_step(self) -> int | None:
    """The newest finished checkpoint's step, re-reading the directory (to see new saves)."""
    if self.only_step is not None:
      return self.only_step
    self._manager.reload()
    return self._manager.latest_step()

  def _state_path(self, step: int) -> str:
    if step not in self._manager.all_steps():
      raise FileNotFoundError(
          f"No finished checkpoint at step {step} in {self.directory}; it has steps "
          f"{self.all_steps() or 'none'}")
    return os.path.join(self.directory, _STEP_FORMAT.format(step), _STATE)

  def state_metadata(self, step: int) -> Any:
    """The saved state's tree at `step` with a `jax.ShapeDtypeStruct` per array; nothing is read
    but the metadata. Its structure is the saved one: dicts for dataclasses and named tuples,
    lists for tuples."""
    tree = ocp.PyTreeCheckpointer().metadata(self._state_path(step)).item_metadata.tree
    return jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), tree)

  def restore_leaves(self, step: int, targets: Any) -> Any:
    """Reads only some arrays of the state at `step`.

    `targets` has the structure `state_metadata` returned, with a `jax.ShapeDtypeStruct` (shape,
    dtype to cast to, sharding) where an array is wanted and None elsewhere; the result has the
    arrays where `targets` asked for them and None elsewhere.
    """
    self._state_path(step)  # Raises with the steps there are.
    wanted = jax.tree.map(lambda t: ocp.PLACEHOLDER if t is None else t, targets,
                          is_leaf=lambda t: t is None)
    restore_args = jax.tree.map(
        lambda t: t if t is ocp.PLACEHOLDER else ocp.ArrayRestoreArgs(
            sharding=t.sharding, dtype=t.dtype, global_shape=t.shape), wanted)
    restored = self._manager.restore(step, args=ocp.args.Composite(**{
        _STATE: ocp.args.PyTreeRestore(item=wanted, restore_args=restore_args)}))[_STATE]
    return jax.tree.map(lambda r: None if r is ocp.PLACEHOLDER else r, restored)


# Leaves Orbax stores as arrays; Python and NumPy scalars become 0-d arrays on
# save and are turned back into the target's type on restore.
_SCALARS = (bool, int, float, complex, np.generic)


def _to_savable(tree: Any) -> Any:
  return jax.tree.map(lambda x: np.asarray(x) if isinstance(x, _SCALARS) else x, tree)


def _to_restore_target(tree: Any) -> Any:
  def leaf(x):
    if isinstance(x, jax.Array):
      return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    if isinstance(x, _SCALARS):
      return np.asarray(x)
    return x  # np.ndarray or jax.ShapeDtypeStruct.
  return jax.tree.map(leaf, tree)


def _like_target(restored: Any, target: Any) -> Any:
  def leaf(r, t):
    if isinstance(t, np.generic):
      return type(t)(r)
    if isinstance(t, _SCALARS):
      return type(t)(r.item())
    return r
  return jax.tree.map(leaf, restored, target)


@dataclasses.dataclass(frozen=True)
class RestoredTree:
  """A checkpoint read back by `TreeCheckpointer.restore`."""

  step: int
  tree: Any
  metadata: Any


class TreeCheckpointer(_ManagerOwner):
  """Saves an arbitrary pytree plus JSON metadata as `<directory>/checkpoint_%08d`.

  Unlike `Checkpointer`, every `save` call saves by default
  (`save_interval_steps=1`): callers (a `CronTab` action, JAXline's
  checkpoint interval) decide when to save.
  """

  def __init__(self, directory: str, *, max_to_keep: int | None = None,
               save_interval_steps: int = 1, keep_period: int | None = None,
               save_keep_interval_duration: Duration | None = None,
               async_save: bool = True, cleanup_tmp_directories: bool = True):
    """See the class docstring; `cleanup_tmp_directories=False` is for readers
    of a directory another thread or process writes to: cleaning up would
    delete that writer's in-progress (temporary) checkpoint."""
    super().__init__(
        str(directory), _METADATA,
        _options(save_interval_steps=save_interval_steps, max_to_keep=max_to_keep,
                 keep_period=keep_period,
                 save_keep_interval_duration=save_keep_interval_duration,
                 async_save=async_save, cleanup_tmp_directories=cleanup_tmp_directories))

  def save(self, step: int, tree: Any, *, metadata: Any = None,
           force: bool = True) -> bool:
    """Saves `tree` (and JSON-serialisable `metadata`) as checkpoint `step`.

    Returns whether it saved: Orbax skips a step at or before the latest one,
    and (without `force`) a step not due under `save_interval_steps`. The
    arrays are copied to host memory before this returns.
    """
    if step in self._manager.all_steps():
      # Orbax would raise; JAXline saves "latest" again after the last step.
      return False
    return self._save(int(step), _to_savable(tree), {"value": metadata}, force=force)

  def restore(self, target: Any, step: int | None = None) -> RestoredTree | None:
    """Reads checkpoint `step` (default: the latest) shaped like `target`.

    Args:
      target: a pytree of the saved structure: concrete arrays (restored with
        the same sharding and type) or `jax.ShapeDtypeStruct`s.
      step: which checkpoint; None means the latest.

    Returns:
      The checkpoint, or None when there is none to restore.
    """
    restored = self._restore(step, _to_restore_target(target))
    if restored is None:
      return None
    step, tree, metadata = restored
    return RestoredTree(step=step, tree=_like_target(tree, target), metadata=metadata["value"])

  def read_metadata(self, step: int | None = None) -> Any:
    """Returns only the JSON metadata of `step` (default latest), or None."""
    restored = self._restore(step)
    return None if restored is None else restored[2]["value"]


class PreemptionGuard:
  """Turns SIGTERM (by default) into a flag the train loop polls.

  Usage:
    with checkpoints.PreemptionGuard() as guard:
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
    logging.warning("Received signal %d: will save a checkpoint and stop at the next "
                    "step boundary.", signum)
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
      logging.warning("PreemptionGuard entered outside the main thread: signals are "
                      "not intercepted; use request() to stop the loop.")
    return self

  def __exit__(self, *exc_info) -> None:
    for s, handler in self._previous.items():
      signal.signal(s, handler)
    self._previous.clear()
