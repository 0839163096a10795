"""Checkpoints: the three layouts of the store (paxml/checkpoint_store.py) the front doors import.

  Checkpointer      the Pax trainer's `<job_log_dir>/checkpoints`: `state` is the train state,
                    the JSON item `train_input` the input's position.
  CheckpointReader  the same layout, read-only: eval/decode jobs (which read only the params)
                    and warm starts from another run.
  TreeCheckpointer  any pytree plus JSON `metadata`; the bobbin-style toolkit and the JAXline
                    checkpointer adapter are built on it.

The store's errors, durations (paxml/durations.py) and SIGTERM handling (paxml/preemption.py)
are importable from here too, as before.
"""

import dataclasses
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from paxml import checkpoint_integrity as integrity
from paxml import checkpoint_paths
from paxml import checkpoint_types
from paxml import train_state_names
from paxml import train_states
from paxml.checkpoint_store import (
  STATE_ITEM,
  STEP_DIR,
  CheckpointError,
  CheckpointNotFoundError,
  CheckpointStore,
  corrupt_dir,
)
from paxml.durations import Duration, parse_duration
from paxml import preemption
from paxml.preemption import PreemptionGuard

CorruptCheckpointError = integrity.CorruptCheckpointError

# Pax's names for the step-directory helpers (paxml/checkpoint_paths.py).
CHECKPOINT_PREFIX = checkpoint_paths.CHECKPOINT_PREFIX
CheckpointType = checkpoint_types.CheckpointType
retrieve_checkpoint_type = checkpoint_types.retrieve_checkpoint_type
latest_checkpoint = checkpoint_paths.latest_checkpoint
latest_checkpoint_if_exists = checkpoint_paths.latest_checkpoint_if_exists
retrieve_latest_checkpoint_step = checkpoint_paths.retrieve_latest_checkpoint_step
retrieve_latest_checkpoint_step_if_exists = (
  checkpoint_paths.retrieve_latest_checkpoint_step_if_exists
)
make_checkpoint_step_dir = checkpoint_paths.make_checkpoint_step_dir
get_step_from_checkpoint_asset = checkpoint_paths.get_step_from_checkpoint_asset
is_checkpoint_asset = checkpoint_paths.is_checkpoint_asset

_TRAIN_INPUT = "train_input"
_METADATA = "metadata"


def checkpoint_dir(job_log_dir: str) -> str:
  """Returns the directory that holds the step directories."""
  return os.path.join(job_log_dir, "checkpoints")


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
    return _restore_state(self, step, abstract_state)


def _saved_tree(store: CheckpointStore, step: int) -> Any:
  """The state's tree as saved at `step`, with orbax's metadata per array (nothing else read)."""
  path = os.path.join(store.step_dir(step), STATE_ITEM)
  try:
    return ocp.PyTreeCheckpointer().metadata(path).item_metadata.tree
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise integrity.CorruptCheckpointError(step, f"unreadable metadata: {e}") from e


def _restore_state(
  store: CheckpointStore, step: int | None, abstract_state: Any
) -> Restored | None:
  """Restores into `abstract_state`; a checkpoint in the layout before Pax's TrainState fields
  (paxml/train_state_names.py) is read in that layout and returned in Pax's."""

  def target(candidate: int) -> Any:  # Called once the step's files verified.
    if not isinstance(abstract_state, train_states.TrainState):
      return abstract_state
    return train_state_names.restore_target(abstract_state, _saved_tree(store, candidate))

  restored = store._restore(step, target)  # pylint: disable=protected-access
  if restored is None:
    return None
  found, state, input_state = restored
  return Restored(found, train_state_names.from_saved(state), input_state)


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
    match = STEP_DIR.fullmatch(os.path.basename(directory))
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
    return _restore_state(self, self.only_step if step is None else step, abstract_state)

  def restore_params(
    self, abstract_params: Any, step: int | None = None, *, newer_than: int | None = None
  ) -> tuple[int, Any] | None:
    """Reads only the weights (`mdl_vars["params"]`) of the train state: (step, params), or None
    if there is none.

    `step` None: the newest complete step after `newer_than` that verifies (corrupt ones are
    reported once and skipped). The optimizer state is not read.
    """
    if step is None and self.only_step is not None:
      step = self.only_step

    def target(candidate: int) -> Any:  # Read after the step's files verified.
      saved = self.state_metadata(candidate)
      return _with_params(saved, train_state_names.params_key(saved), abstract_params)

    restored = self._restore(step, target, newer_than=newer_than, partial=True)
    if restored is None:
      return None
    params = restored[1]
    for key in train_state_names.params_key(restored[1]):
      params = params[key]
    return restored[0], params

  def _state_path(self, step: int) -> str:
    self._candidates(step, None)  # Raises with the steps there are.
    return os.path.join(self.step_dir(step), STATE_ITEM)

  def state_metadata(self, step: int) -> Any:
    """The saved state's tree at `step` with a `jax.ShapeDtypeStruct` per array; nothing is read
    but the metadata. Its structure is the saved one: dicts for dataclasses and named tuples,
    lists for tuples."""
    self._state_path(step)  # Raises, listing the steps there are, if there is none.
    tree = _saved_tree(self, step)
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


def _with_params(saved: Any, keys: tuple[str, ...], params: Any) -> Any:
  """`saved` (a subtree of the saved state) with PLACEHOLDERs, and `params` at `keys` under it."""
  if not keys:
    return params
  placeheld = {k: jax.tree.map(lambda _: ocp.PLACEHOLDER, v) for k, v in saved.items()}
  return placeheld | {keys[0]: _with_params(saved[keys[0]], keys[1:], params)}


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
  `finish_at_exit=True` (the toolkit's and JAXline's stores: their loops do not poll for SIGTERM)
  waits for pending saves at interpreter exit and on SIGTERM (preemption.finish_saves_at_exit).
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
    finish_at_exit: bool = False,
  ):
    directory = os.fspath(directory)
    super().__init__(
      directory,
      json_item=_METADATA,
      save_interval_steps=save_interval_steps,
      max_to_keep=max_to_keep,
      keep_period=keep_period,
      save_keep_interval_duration=save_keep_interval_duration,
      async_save=async_save,
      cleanup_tmp_directories=cleanup_tmp_directories,
    )
    if finish_at_exit:
      preemption.finish_saves_at_exit(self)

  def close(self) -> None:
    try:
      super().close()
    finally:
      preemption.forget_saves(self)

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


def save_checkpoint(
  train_state: train_states.TrainState,
  checkpoint_dir: Any,
  overwrite: bool = False,
  checkpoint_type: CheckpointType = CheckpointType.FLAX,
  state_specs: Any = None,
  async_checkpointer: Any = None,
  train_state_unpadded_shape_dtype_struct: Any = None,
  tensorstore_use_ocdbt: bool = False,
  async_options: Any = None,
) -> CheckpointStore:
  """Pax's `save_checkpoint`: saves `train_state` at its own step under `checkpoint_dir` (a
  `<job_log_dir>/checkpoints` directory), in the trainer's layout, checksums included, so the
  trainer resumes from it and `restore_checkpoint` reads what the trainer wrote.

  Every `checkpoint_type` writes the one Orbax format here (`checkpoint_%08d`); the Orbax and
  tensorstore options are accepted and unused. With `overwrite`, checkpoints at this step or a
  later one are deleted first. Returns the store; `wait_until_finished()` waits for the
  (asynchronous) save, `close()` releases it.

  Raises:
    CheckpointError: a checkpoint at this step or later exists and `overwrite` is False.
  """
  del checkpoint_type, state_specs, async_checkpointer, train_state_unpadded_shape_dtype_struct
  del tensorstore_use_ocdbt, async_options
  step = int(np.asarray(jax.device_get(train_state.step)).reshape(-1)[0])  # [] or replicated [1].
  store = CheckpointStore(os.fspath(checkpoint_dir), json_item=_TRAIN_INPUT)
  later = [s for s in store.all_steps() if s >= step]
  if later and not overwrite:
    store.close()
    raise CheckpointError(
      f"{checkpoint_dir} already has checkpoints at steps {later} (>= {step}); pass "
      "overwrite=True to replace them, or save a later step"
    )
  for old in later:
    store._manager.delete(old)  # pylint: disable=protected-access
  store._save(step, train_state, {}, force=True)  # pylint: disable=protected-access
  return store


def restore_checkpoint(
  state_global_shapes: train_states.TrainState,
  checkpoint_dir: Any,
  global_mesh: jax.sharding.Mesh | None = None,
  checkpoint_type: CheckpointType = CheckpointType.FLAX,
  state_specs: Any = None,
  step: int | None = None,
  enforce_restore_shape_check: bool = False,
  state_unpadded_shape_dtype_struct: Any = None,
  tensorstore_use_ocdbt: bool = False,
  restore_transformations: Any = None,
) -> train_states.TrainState:
  """Pax's `restore_checkpoint`: the train state at `step` (default the newest that verifies)
  under `checkpoint_dir`, shaped like `state_global_shapes` (arrays or ShapeDtypeStructs).

  Arrays land with the shardings of `state_global_shapes` where it has them, else with
  `state_specs` on `global_mesh` when both are given, else on the first device. Checkpoints in
  this project's earlier train-state layout restore too (paxml/train_state_names.py).

  Raises:
    ValueError: `state_global_shapes` is not a TrainState (e.g. a (state, provenance) tuple
      that was not unpacked), the directory does not exist, or it has no checkpoint.
  """
  del checkpoint_type, enforce_restore_shape_check, state_unpadded_shape_dtype_struct
  del tensorstore_use_ocdbt, restore_transformations
  if not isinstance(state_global_shapes, train_states.TrainState):
    raise ValueError(
      f"state_global_shapes must be a subclass of `{train_states.TrainState}`, but was "
      f"`{type(state_global_shapes)}`; unpack (state, provenance) tuples first."
    )
  directory = os.fspath(checkpoint_dir)
  if not os.path.isdir(directory):
    raise ValueError(f"{checkpoint_dir=!r} does not exist")
  first_device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  specs = None
  if global_mesh is not None and state_specs is not None:
    specs = jax.tree.map(lambda s: jax.sharding.NamedSharding(global_mesh, s), state_specs)

  def target(x: Any, sharding: Any = None) -> Any:
    if isinstance(x, jax.Array):
      return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding or x.sharding)
    if isinstance(x, jax.ShapeDtypeStruct | np.ndarray) or np.isscalar(x):
      x = np.asarray(x) if not isinstance(x, jax.ShapeDtypeStruct) else x
      given = getattr(x, "sharding", None)
      return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding or given or first_device)
    return x

  if specs is None:
    abstract = jax.tree.map(target, state_global_shapes)
  else:
    abstract = jax.tree.map(target, state_global_shapes, specs)
  with CheckpointReader(directory) as reader:
    restored = _restore_state(reader, step, abstract)
  if restored is None:
    raise ValueError(f"No checkpoints were found in directory {checkpoint_dir=!r}")
  return restored.state
