"""The checkpoint store on Orbax that the trainer, eval/decode jobs and both front doors share.

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
                              warning, moved aside to `<directory>_corrupt/` by a writer
                              (readers leave it where it is) and the newest step that verifies
                              is restored instead. A step without its manifest is reported as
                              unfinished (an interrupted save), not damaged. Set-aside steps
                              are bounded once a newer step verifies: unfinished ones are
                              removed, damaged ones beyond the newest 3
                              (checkpoint_retention.set_aside_to_remove).

A restore takes the target's shardings, not the saved ones: a checkpoint written on one mesh
is read onto another. A failed background save is reported by `check()` (the trainer calls
it every step) instead of at the next save. The layouts the front doors use are in
paxml/checkpoints.py.
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
import orbax.checkpoint as ocp

from paxml import checkpoint_integrity as integrity
from paxml import checkpoint_retention
from paxml import leader
from paxml.durations import Duration, parse_duration

STATE_ITEM = "state"  # The pytree item of every step.
_STEP_PREFIX = "checkpoint"
STEP_FORMAT = _STEP_PREFIX + "_{:08d}"
STEP_DIR = re.compile(_STEP_PREFIX + r"_(\d{8})")  # A step directory's name.


class CheckpointError(Exception):
  """A checkpoint operation that cannot go on, explained in one line (what, and what to do)."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
  """A requested step is not there; the message lists the steps that are."""


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
    self._checksum_program: Any = None  # prepare_save's, once compiled.
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
      item_names=(STATE_ITEM, json_item),
    )

  # Paths and listing.

  def step_dir(self, step: int) -> str:
    return os.path.join(self.directory, STEP_FORMAT.format(step))

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

  def prepare_save(self, abstract_state: Any) -> threading.Thread:
    """Compiles the checksum program for states shaped like `abstract_state` (ShapeDtypeStruct
    leaves with their shardings) on a background thread, so that the first save does not
    compile it on the caller's thread. Saves before it is ready use the jitted program.
    Returns the thread (join it to wait)."""

    def compile_program():
      try:
        self._checksum_program = integrity.compile_array_checksums(abstract_state)
      except Exception as e:  # pylint: disable=broad-exception-caught
        logging.warning("Checkpoint checksums not compiled ahead (%s); the first save will.", e)

    thread = threading.Thread(target=compile_program, daemon=True, name="checkpoint-prepare")
    thread.start()
    return thread

  def _save(self, step: int, state: Any, json_value: Any, *, force: bool) -> bool:
    if not force and not self._manager.should_save(step):
      self.check()  # Not due: never wait here for the background save.
      return False
    self._finish_pending()
    saved = self._manager.save(
      step,
      args=ocp.args.Composite(
        **{
          STATE_ITEM: ocp.args.StandardSave(state),
          self._json_item: ocp.args.JsonSave(json_value),
        }
      ),
      force=force,
    )
    if saved:
      # Started before the caller may donate `state`; read in the background thread.
      sums = integrity.start_array_checksums(state, self._checksum_program)
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
      if leader.is_leader():
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
    if self._read_only or not leader.is_leader():
      return
    complete = self.complete_steps()
    if self._exclusive:
      self._prune_set_aside(complete[-1] if complete else None)
    if self._max_to_keep is None:
      return
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
      args[STATE_ITEM] = ocp.args.PyTreeRestore(item=state_target, restore_args=restore_args)
    elif state_target is not None:
      args[STATE_ITEM] = ocp.args.StandardRestore(state_target)
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
    state = restored[STATE_ITEM] if state_target is not None else None
    if manifest is not None and state is not None:
      tree = state
      if partial:
        tree = jax.tree.map(lambda r: None if r is ocp.PLACEHOLDER else r, state)
      # The program prepare_save compiled, when ready: the restored state has its shapes.
      integrity.verify_arrays(manifest, tree, step, self._checksum_program)
    return step, state, restored[self._json_item]

  def _set_aside(self, step: int, error: integrity.CorruptCheckpointError) -> None:
    self._bad_steps.add(step)
    unfinished = isinstance(error, integrity.UnfinishedCheckpointError)
    if not self._exclusive:
      logging.warning("%s in %s; skipping it and trying an older one.", error, self.directory)
      return
    destination = None
    if leader.is_leader():
      os.makedirs(corrupt_dir(self.directory), exist_ok=True)
      name = STEP_FORMAT.format(step)
      if unfinished:
        name += checkpoint_retention.UNFINISHED_SUFFIX
      destination = os.path.join(corrupt_dir(self.directory), name)
      suffix = 1
      while os.path.exists(destination):
        destination = os.path.join(corrupt_dir(self.directory), f"{name}.{suffix}")
        suffix += 1
      os.rename(self.step_dir(step), destination)
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

      multihost_utils.sync_global_devices(f"checkpoint_set_aside_{step}")
    self._manager.reload()
    if unfinished:
      logging.warning(
        "%s: an interrupted save (e.g. killed before its checksums were written), not a "
        "damaged one; moved it to %s (removed once a newer step verifies) and restoring the "
        "newest checkpoint that verifies.",
        error,
        destination or corrupt_dir(self.directory),
      )
      return
    logging.warning(
      "%s; moved it to %s and restoring the newest checkpoint that verifies.",
      error,
      destination or corrupt_dir(self.directory),
    )

  def _prune_set_aside(self, newest_verified: int | None) -> None:
    """Bounds `<directory>_corrupt/` (checkpoint_retention.set_aside_to_remove)."""
    try:
      names = os.listdir(corrupt_dir(self.directory))
    except FileNotFoundError:
      return
    for name in checkpoint_retention.set_aside_to_remove(names, newest_verified):
      shutil.rmtree(os.path.join(corrupt_dir(self.directory), name), ignore_errors=True)
      logging.info(
        "Removed the set-aside %s from %s: step %d is newer and verified.",
        name,
        corrupt_dir(self.directory),
        newest_verified,
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
