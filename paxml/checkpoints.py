"""Checkpoints on Orbax: one store that the trainer, eval/decode jobs and both front doors use.

`CheckpointStore` is a directory of `checkpoint_%08d` steps, each holding a pytree item (`state`,
arrays via TensorStore) and one JSON item. It composes:

  an Orbax CheckpointManager  atomic, asynchronous saves: `save` returns once the arrays are
                              copied off the device (the caller may donate them right after);
                              a background thread waits for the files, then
  integrity                   writes the step's manifest of checksums (checkpoint_integrity.py),
                              the last file of a checkpoint; restores verify it;
  retention                   the newest `max_to_keep` checkpoints *with* a manifest are kept,
                              plus multiples of `keep_period` and one per
                              `save_keep_interval_duration`; a newer step that never got its
                              manifest does not count, so it cannot push good ones out;
  fallback                    a corrupt latest step (missing, changed or truncated file, unreadable
                              metadata or manifest, an array whose values differ) is named in one
                              warning, moved aside to `<directory>_corrupt/` by a writer (never
                              deleted; readers leave it where it is) and the newest step that
                              verifies is restored instead.

Three thin layouts of the store keep the names the front doors import:

  Checkpointer      the Pax trainer's `<job_log_dir>/checkpoints`: `state` is the train state,
                    the JSON item `train_input` the input's position.
  CheckpointReader  the same layout, read-only: eval/decode jobs (which read only the params)
                    and warm starts from another run.
  TreeCheckpointer  any pytree plus JSON `metadata`; the bobbin-style toolkit and the JAXline
                    checkpointer adapter are built on it.

A restore takes the target's shardings, not the saved ones: a checkpoint written on one mesh
is read onto another. A failed background save is reported by `check()` (the trainer calls
it every step) instead of at the next save. Durations: paxml/durations.py; SIGTERM:
paxml/preemption.py (both also importable from here, as before).
"""

import dataclasses
import errno
import os
import re
import shutil
import threading
from typing import Any

from absl import logging
import jax
import numpy as np
import orbax.checkpoint as ocp

from paxml import checkpoint_integrity as integrity
from paxml import checkpoint_retention
from paxml.durations import Duration, parse_duration  # pylint: disable=unused-import
from paxml.preemption import PreemptionGuard  # pylint: disable=unused-import

CorruptCheckpointError = integrity.CorruptCheckpointError

_STATE = "state"
_TRAIN_INPUT = "train_input"
_METADATA = "metadata"
_STEP_PREFIX = "checkpoint"
_STEP_FORMAT = _STEP_PREFIX + "_{:08d}"
_STEP_DIR = re.compile(_STEP_PREFIX + r"_(\d{8})")


class CheckpointError(Exception):
  """A checkpoint operation that cannot go on, explained in one line (what, and what to do)."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
  """A requested step is not there; the message lists the steps that are."""


def checkpoint_dir(job_log_dir: str) -> str:
  """Returns the directory that holds the step directories."""
  return os.path.join(job_log_dir, "checkpoints")


def corrupt_dir(directory: str) -> str:
  """Where writers move corrupt steps of `directory`: a sibling `<name>_corrupt`."""
  directory = os.path.normpath(directory)
  return os.path.join(os.path.dirname(directory), os.path.basename(directory) + "_corrupt")


def _options(
  *, save_interval_steps: int, async_save: bool, cleanup_tmp_directories: bool, read_only: bool
) -> ocp.CheckpointManagerOptions:
  return ocp.CheckpointManagerOptions(
    save_interval_steps=save_interval_steps,
    max_to_keep=None,  # Retention is the store's: it must know which steps verified.
    step_name_format=ocp.step.standard_name_format(
      step_prefix=_STEP_PREFIX, step_format_fixed_length=8
    ),
    # A crash mid-save leaves a temporary directory; a writer removes it on start.
    cleanup_tmp_directories=cleanup_tmp_directories,
    enable_async_checkpointing=async_save,
    read_only=read_only,
  )


def _explain_save_failure(step: int, directory: str, error: BaseException) -> str:
  cause: BaseException | None = error
  while cause is not None:
    if (
      isinstance(cause, OSError)
      and cause.errno == errno.ENOSPC
      or ("No space left on device" in str(cause))
    ):
      return (
        f"saving checkpoint step {step} in {directory} failed: disk full (no space left "
        "on device). Free space there and run again; it resumes from the last complete "
        "checkpoint."
      )
    cause = cause.__cause__ or cause.__context__
  first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
  return (
    f"saving checkpoint step {step} in {directory} failed: {type(error).__name__}: "
    f"{first_line[:300]}. Earlier checkpoints are intact; fix the cause and run again."
  )


@dataclasses.dataclass
class _PendingSave:
  """A save Orbax is still writing, and the thread that writes its manifest afterwards."""

  step: int
  thread: threading.Thread
  error: BaseException | None = None


class CheckpointStore:
  """See the module docstring. `json_item` names the JSON item saved beside `state`."""

  def __init__(
    self,
    directory: str,
    *,
    json_item: str,
    save_interval_steps: int = 1,
    max_to_keep: int | None = None,
    keep_period: int | None = None,
    save_keep_interval_duration: Duration | None = None,
    async_save: bool = True,
    read_only: bool = False,
    cleanup_tmp_directories: bool = True,
    verify: bool = True,
  ):
    keep_time = parse_duration(save_keep_interval_duration)
    if keep_time is not None and keep_time.total_seconds() < 1:
      raise ValueError(
        f"save_keep_interval_duration={save_keep_interval_duration!r} is under one "
        "second; checkpoint times are whole seconds. Use at least '1s', or None to disable."
      )
    self.directory = str(directory)
    self._json_item = json_item
    self._max_to_keep = max_to_keep
    self._keep_period = keep_period
    self._keep_seconds = None if keep_time is None else keep_time.total_seconds()
    self._read_only = read_only
    # Only a store that owns its directory moves corrupt steps aside and treats a step without
    # its manifest as damaged; others (readers, `cleanup_tmp_directories=False`) may be looking
    # at a save still in progress, so they skip such steps.
    self._exclusive = not read_only and cleanup_tmp_directories
    self._verify = verify
    self._pending: _PendingSave | None = None
    self._failed = False  # A save failed and was reported: close() adds no second error.
    self._bad_steps: set[int] = set()  # Readers: corrupt steps already reported.
    self._warned_unverified = False
    is_writer = not read_only
    self._manager = ocp.CheckpointManager(
      self.directory,
      options=_options(
        save_interval_steps=save_interval_steps,
        async_save=async_save,
        cleanup_tmp_directories=cleanup_tmp_directories and is_writer,
        read_only=read_only,
      ),
      item_names=(_STATE, json_item),
    )

  # Paths and listing.

  def step_dir(self, step: int) -> str:
    return os.path.join(self.directory, _STEP_FORMAT.format(step))

  def _has_manifest(self, step: int) -> bool:
    return os.path.exists(os.path.join(self.step_dir(step), integrity.MANIFEST))

  def _first_verified_step(self) -> int | None:
    """The oldest step with a manifest. Steps before it were written before checkpoints had
    checksums (read unverified); from it on, a step without one is incomplete or damaged."""
    return next((s for s in self.all_steps() if self._has_manifest(s)), None)

  def all_steps(self) -> list[int]:
    """The steps of all finished checkpoints, oldest first."""
    return sorted(self._manager.all_steps())

  def latest_step(self) -> int | None:
    """The newest finished checkpoint's step, or None if there is none."""
    return self._manager.latest_step()

  def complete_steps(self) -> list[int]:
    """Finished steps that also have their manifest (all steps in an unverified directory)."""
    steps = self.all_steps()
    first = self._first_verified_step()
    return [s for s in steps if first is None or s < first or self._has_manifest(s)]

  # Saving.

  def _save(self, step: int, state: Any, json_value: Any, *, force: bool) -> bool:
    if not force and not self._manager.should_save(step):
      self.check()  # Not due: never wait here for the background save.
      return False
    self._finish_pending()
    saved = self._manager.save(
      step,
      args=ocp.args.Composite(
        **{
          _STATE: ocp.args.StandardSave(state),
          self._json_item: ocp.args.JsonSave(json_value),
        }
      ),
      force=force,
    )
    if saved:
      # Started before the caller may donate `state`; read in the background thread.
      sums = integrity.start_array_checksums(state)
      pending = _PendingSave(
        step,
        threading.Thread(
          target=lambda: self._write_manifest(pending, sums),
          daemon=True,
          name=f"checkpoint-manifest-{step}",
        ),
      )
      self._pending = pending
      pending.thread.start()
    return saved

  def _write_manifest(self, pending: _PendingSave, sums) -> None:
    try:
      self._manager.wait_until_finished()
      self._manager.check_for_errors()
      step_dir = self.step_dir(pending.step)
      if jax.process_index() == 0:
        if not os.path.isdir(step_dir):
          raise CheckpointError(f"Orbax did not finish writing {step_dir}")
        integrity.write_manifest(step_dir, pending.step, integrity.finish_array_checksums(sums))
    except BaseException as e:  # pylint: disable=broad-exception-caught
      pending.error = e

  def _finish_pending(self) -> None:
    """Waits for the pending save and its manifest; applies retention; raises if it failed."""
    pending, self._pending = self._pending, None
    if pending is None:
      return
    pending.thread.join()
    if pending.error is not None:
      self._failed = True
      raise CheckpointError(
        _explain_save_failure(pending.step, self.directory, pending.error)
      ) from pending.error
    self._apply_retention()

  def check(self) -> None:
    """Raises CheckpointError at once if a background save has failed; cheap otherwise."""
    if self._pending is not None and not self._pending.thread.is_alive():
      self._finish_pending()

  def wait_until_finished(self) -> None:
    """Blocks until every pending save (and its manifest) is on disk; raises if one failed."""
    self._finish_pending()

  def _apply_retention(self) -> None:
    if self._max_to_keep is None or self._read_only or jax.process_index() != 0:
      return
    complete = self.complete_steps()
    saved_at = {s: self._saved_at(s) for s in complete} if self._keep_seconds else {}
    removed = checkpoint_retention.steps_to_remove(
      complete,
      saved_at,
      max_to_keep=self._max_to_keep,
      keep_period=self._keep_period,
      keep_seconds=self._keep_seconds,
    )
    for step in removed:
      shutil.rmtree(self.step_dir(step), ignore_errors=True)
    if removed:
      self._manager.reload()

  def _saved_at(self, step: int) -> float | None:
    try:
      return integrity.read_manifest(self.step_dir(step), step).get("saved_at")
    except integrity.CorruptCheckpointError:
      return None

  # Restoring.

  def _candidates(self, step: int | None, newer_than: int | None) -> list[int]:
    if step is not None:
      if step not in self._manager.all_steps():
        self._manager.reload()
      if step not in self._manager.all_steps():
        raise CheckpointNotFoundError(
          f"no checkpoint at step {step} in {self.directory}; the steps there are "
          f"{self.all_steps() or 'none'}. Pick one of them, or leave the step unset for "
          "the latest."
        )
      return [step]
    steps = self.all_steps() if self._exclusive else self.complete_steps()
    return [
      s
      for s in reversed(steps)
      if (newer_than is None or s > newer_than) and s not in self._bad_steps
    ]

  def _restore(
    self,
    step: int | None,
    state_target: Any = None,
    *,
    newer_than: int | None = None,
    partial: bool = False,
  ) -> tuple[int, Any, Any] | None:
    """Reads `step` (None: the newest that verifies) as (step, state, JSON item).

    With `state_target` None only the JSON item is read (state is None); a callable is called
    with the step once its files verified, for the target. With `partial`,
    `state_target` holds `ocp.PLACEHOLDER` where an array is not wanted. Returns None when
    there is no checkpoint. An explicit `step` that fails verification raises
    CorruptCheckpointError; with `step` None corrupt steps are reported and skipped.
    """
    self._finish_pending()
    if self._read_only:
      self._manager.reload()
    candidates = self._candidates(step, newer_than)
    for candidate in candidates:
      try:
        return self._restore_verified(candidate, state_target, partial)
      except integrity.CorruptCheckpointError as e:
        if step is not None:
          raise
        self._set_aside(candidate, e)
    if candidates:
      raise CheckpointError(
        f"no checkpoint in {self.directory} passed verification (steps "
        f"{candidates} are corrupt{'; moved to ' + corrupt_dir(self.directory) if self._exclusive else ''}). "
        "Restore a good copy of one, or start with a new job_log_dir."
      )
    return None

  def _restore_verified(self, step: int, state_target: Any, partial: bool):
    step_dir = self.step_dir(step)
    manifest = None
    first = self._first_verified_step()
    verified = self._verify and first is not None and step >= first
    if verified:
      only = None if state_target is not None else self._json_item
      manifest = integrity.verify_files(step_dir, step, only=only)
    elif self._verify and not self._warned_unverified:
      self._warned_unverified = True
      logging.warning(
        "Checkpoints in %s have no checksums (written before paxml verified "
        "checkpoints); restoring step %d unverified.",
        self.directory,
        step,
      )
    if callable(state_target):
      state_target = state_target(step)
    args = {self._json_item: ocp.args.JsonRestore()}
    if state_target is not None and partial:
      restore_args = jax.tree.map(
        lambda t: (
          t
          if t is ocp.PLACEHOLDER
          else ocp.ArrayRestoreArgs(sharding=t.sharding, dtype=t.dtype, global_shape=t.shape)
        ),
        state_target,
      )
      args[_STATE] = ocp.args.PyTreeRestore(item=state_target, restore_args=restore_args)
    elif state_target is not None:
      args[_STATE] = ocp.args.StandardRestore(state_target)
    try:
      restored = self._manager.restore(step, args=ocp.args.Composite(**args))
    except Exception as e:  # pylint: disable=broad-exception-caught
      first_line = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
      if not verified:
        raise integrity.CorruptCheckpointError(step, f"unreadable: {first_line}") from e
      # The files are the ones written: the target does not fit them (another model?).
      raise CheckpointError(
        f"checkpoint step {step} in {self.directory} does not fit this experiment's state "
        f"({type(e).__name__}: {first_line}). Restore it with the experiment that wrote it, "
        "or use a new job_log_dir."
      ) from e
    state = restored[_STATE] if state_target is not None else None
    if manifest is not None and state is not None:
      tree = state
      if partial:
        tree = jax.tree.map(lambda r: None if r is ocp.PLACEHOLDER else r, state)
      integrity.verify_arrays(manifest, tree, step)
    return step, state, restored[self._json_item]

  def _set_aside(self, step: int, error: integrity.CorruptCheckpointError) -> None:
    self._bad_steps.add(step)
    if not self._exclusive:
      logging.warning("%s in %s; skipping it and trying an older one.", error, self.directory)
      return
    destination = None
    if jax.process_index() == 0:
      os.makedirs(corrupt_dir(self.directory), exist_ok=True)
      destination = os.path.join(corrupt_dir(self.directory), _STEP_FORMAT.format(step))
      suffix = 1
      while os.path.exists(destination):
        destination = os.path.join(
          corrupt_dir(self.directory), f"{_STEP_FORMAT.format(step)}.{suffix}"
        )
        suffix += 1
      os.rename(self.step_dir(step), destination)
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

      multihost_utils.sync_global_devices(f"checkpoint_set_aside_{step}")
    self._manager.reload()
    logging.warning(
      "%s; moved it to %s and restoring the newest checkpoint that verifies.",
      error,
      destination or corrupt_dir(self.directory),
    )

  def reload(self) -> None:
    """Re-reads the step list from disk (to see another process's saves)."""
    self._manager.reload()

  def close(self) -> None:
    """Waits for pending saves (and manifests) to finish, then releases Orbax's resources."""
    try:
      self._finish_pending()
    finally:
      try:
        self._manager.close()
      except Exception:  # pylint: disable=broad-exception-caught
        if not self._failed:
          raise
        # Orbax re-raises the failure already reported as one CheckpointError.
        logging.debug("Orbax's close after a failed save", exc_info=True)

  def __enter__(self):
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()


@dataclasses.dataclass(frozen=True)
class Restored:
  """A checkpoint read back by `Checkpointer.restore`."""

  step: int
  state: Any
  input_state: dict[str, Any]


class Checkpointer(CheckpointStore):
  """The Pax trainer's checkpoints: saves every `save_interval_steps`."""

  def __init__(
    self,
    job_log_dir: str,
    *,
    save_interval_steps: int,
    max_to_keep: int,
    save_keep_interval_duration: Duration | None = None,
    keep_period: int | None = None,
    verify: bool = True,
  ):
    super().__init__(
      checkpoint_dir(job_log_dir),
      json_item=_TRAIN_INPUT,
      save_interval_steps=save_interval_steps,
      max_to_keep=max_to_keep,
      keep_period=keep_period,
      save_keep_interval_duration=save_keep_interval_duration,
      verify=verify,
    )

  def save(
    self, step: int, state: Any, input_state: dict[str, Any], *, force: bool = False
  ) -> bool:
    """Saves if `step` is due (or `force`); returns whether it saved.

    A step is due when it is a multiple of `save_interval_steps`, or when the directory has no
    checkpoint yet (so a fresh run saves its initial state). Without `force`, steps at or
    before the latest checkpoint are skipped. The arrays are copied before this returns, so
    the caller may donate or overwrite `state` right after.
    """
    return self._save(step, state, input_state, force=force)

  def restore(self, abstract_state: Any, step: int | None = None) -> Restored | None:
    """Reads checkpoint `step` (default: the newest that verifies) into `abstract_state`.

    `abstract_state` has `jax.ShapeDtypeStruct` leaves (from `jax.eval_shape`) with the
    shardings to restore onto, possibly another mesh's. Returns None when there is none.
    """
    restored = self._restore(step, abstract_state)
    return None if restored is None else Restored(*restored)


class CheckpointReader(CheckpointStore):
  """Reads trainer checkpoints (`Checkpointer`'s layout) and never writes, moves or deletes any.

  For readers of a directory that a trainer may be writing to at the same time (eval and decode
  jobs) and of another run's checkpoints (warm start, paxml/warm_start.py). `directory` is a
  `job_log_dir`, its `checkpoints/` directory, or one `checkpoint_%08d` directory (then that is
  the only step it offers). With `missing_ok`, a directory that does not exist yet reads as
  one without checkpoints (a job started before its trainer). Steps still without their
  manifest are not offered: their save is not complete yet.
  """

  def __init__(self, directory: str, *, missing_ok: bool = False, verify: bool = True):
    directory = os.path.normpath(str(directory))
    self.only_step: int | None = None
    match = _STEP_DIR.fullmatch(os.path.basename(directory))
    if match:
      directory, self.only_step = os.path.dirname(directory), int(match.group(1))
    elif os.path.isdir(checkpoint_dir(directory)):
      directory = checkpoint_dir(directory)
    if not os.path.isdir(directory) and not missing_ok:
      raise CheckpointNotFoundError(
        f"no checkpoint directory at {directory}: expected a job_log_dir, its checkpoints/ "
        "directory or one checkpoint_%08d directory in it"
      )
    super().__init__(
      directory,
      json_item=_TRAIN_INPUT,
      async_save=False,
      read_only=True,
      cleanup_tmp_directories=False,
      verify=verify,
    )

  def latest_step(self) -> int | None:
    """The newest complete checkpoint's step, re-reading the directory (to see new saves)."""
    if self.only_step is not None:
      return self.only_step
    self._manager.reload()
    steps = [s for s in self.complete_steps() if s not in self._bad_steps]
    return steps[-1] if steps else None

  def restore(self, abstract_state: Any, step: int | None = None) -> Restored | None:
    """Like `Checkpointer.restore`; `step` None is the newest complete step that verifies."""
    restored = self._restore(self.only_step if step is None else step, abstract_state)
    return None if restored is None else Restored(*restored)

  def restore_params(
    self, abstract_params: Any, step: int | None = None, *, newer_than: int | None = None
  ) -> tuple[int, Any] | None:
    """Reads only the `params` of the train state: (step, params), or None if there is none.

    `step` None: the newest complete step after `newer_than` that verifies (corrupt ones are
    reported once and skipped). The optimizer state is not read.
    """
    if step is None and self.only_step is not None:
      step = self.only_step

    def target(candidate: int) -> Any:  # Read after the step's files verified.
      return {
        k: (abstract_params if k == "params" else jax.tree.map(lambda _: ocp.PLACEHOLDER, v))
        for k, v in self.state_metadata(candidate).items()
      }

    restored = self._restore(step, target, newer_than=newer_than, partial=True)
    return None if restored is None else (restored[0], restored[1]["params"])

  def _state_path(self, step: int) -> str:
    self._candidates(step, None)  # Raises with the steps there are.
    return os.path.join(self.step_dir(step), _STATE)

  def state_metadata(self, step: int) -> Any:
    """The saved state's tree at `step` with a `jax.ShapeDtypeStruct` per array; nothing is read
    but the metadata. Its structure is the saved one: dicts for dataclasses and named tuples,
    lists for tuples."""
    path = self._state_path(step)  # Raises, listing the steps there are, if there is none.
    try:
      tree = ocp.PyTreeCheckpointer().metadata(path).item_metadata.tree
    except (OSError, ValueError, KeyError, TypeError) as e:
      raise integrity.CorruptCheckpointError(step, f"unreadable metadata: {e}") from e
    return jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), tree)

  def restore_leaves(self, step: int, targets: Any) -> Any:
    """Reads only some arrays of the state at `step` (verified like any restore).

    `targets` has the structure `state_metadata` returned, with a `jax.ShapeDtypeStruct` (shape,
    dtype to cast to, sharding) where an array is wanted and None elsewhere; the result has the
    arrays where `targets` asked for them and None elsewhere.
    """
    wanted = jax.tree.map(
      lambda t: ocp.PLACEHOLDER if t is None else t, targets, is_leaf=lambda t: t is None
    )
    restored = self._restore(step, wanted, partial=True)[1]
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


class TreeCheckpointer(CheckpointStore):
  """Saves an arbitrary pytree plus JSON metadata as `<directory>/checkpoint_%08d`.

  Unlike `Checkpointer`, every `save` call saves by default (`save_interval_steps=1`): callers
  (a `CronTab` action, JAXline's checkpoint interval) decide when to save.
  `cleanup_tmp_directories=False` is for readers of a directory another thread or process
  writes to: cleaning up would delete that writer's in-progress (temporary) checkpoint.
  """

  def __init__(
    self,
    directory: str,
    *,
    max_to_keep: int | None = None,
    save_interval_steps: int = 1,
    keep_period: int | None = None,
    save_keep_interval_duration: Duration | None = None,
    async_save: bool = True,
    cleanup_tmp_directories: bool = True,
  ):
    super().__init__(
      str(directory),
      json_item=_METADATA,
      save_interval_steps=save_interval_steps,
      max_to_keep=max_to_keep,
      keep_period=keep_period,
      save_keep_interval_duration=save_keep_interval_duration,
      async_save=async_save,
      cleanup_tmp_directories=cleanup_tmp_directories,
    )

  def save(self, step: int, tree: Any, *, metadata: Any = None, force: bool = True) -> bool:
    """Saves `tree` (and JSON-serialisable `metadata`) as checkpoint `step`.

    Returns whether it saved: a step at or before the latest one is skipped, and (without
    `force`) a step not due under `save_interval_steps`. The arrays are copied to host memory
    before this returns.
    """
    if step in self._manager.all_steps():
      # Orbax would raise; JAXline saves "latest" again after the last step.
      return False
    return self._save(int(step), _to_savable(tree), {"value": metadata}, force=force)

  def restore(self, target: Any, step: int | None = None) -> RestoredTree | None:
    """Reads checkpoint `step` (default: the newest that verifies) shaped like `target`: a
    pytree of the saved structure, of concrete arrays (restored with the same sharding and
    type) or `jax.ShapeDtypeStruct`s. Returns None when there is no checkpoint."""
    restored = self._restore(step, _to_restore_target(target))
    if restored is None:
      return None
    step, tree, metadata = restored
    return RestoredTree(step=step, tree=_like_target(tree, target), metadata=metadata["value"])

  def read_metadata(self, step: int | None = None) -> Any:
    """Returns only the JSON metadata of `step` (default latest), or None."""
    restored = self._restore(step)
    return None if restored is None else restored[2]["value"]
