"""Train-state checkpoints in `<job_log_dir>/checkpoints/`, on Orbax.

Each checkpoint is a directory `checkpoint_%08d` (Pax's layout for sharded
checkpoints, e.g. `checkpoint_00000300`) holding two Orbax items:
  state: the train state pytree (arrays written with TensorStore);
  train_input: the input's position as JSON, so a resumed run reads new data.

Saves are asynchronous: `save` returns once the arrays are copied off the
device and the files are written in the background. Call `close` (or use the
object as a context manager) before the process exits, or the last checkpoint
may be incomplete; Orbax writes to a temporary directory and renames it when
done, so an interrupted save is never mistaken for a finished one.
"""

import dataclasses
import os
from typing import Any

import orbax.checkpoint as ocp

_STATE = "state"
_TRAIN_INPUT = "train_input"


@dataclasses.dataclass(frozen=True)
class Restored:
  """A checkpoint read back by `Checkpointer.restore`."""

  step: int
  state: Any
  input_state: dict[str, Any]


def checkpoint_dir(job_log_dir: str) -> str:
  """Returns the directory that holds the step directories."""
  return os.path.join(job_log_dir, "checkpoints")


class Checkpointer:
  """Saves every `save_interval_steps`, keeps the newest `max_to_keep`."""

  def __init__(self, job_log_dir: str, *, save_interval_steps: int, max_to_keep: int):
    self.directory = checkpoint_dir(job_log_dir)
    options = ocp.CheckpointManagerOptions(
        save_interval_steps=save_interval_steps,
        max_to_keep=max_to_keep,
        step_name_format=ocp.step.standard_name_format(
            step_prefix="checkpoint", step_format_fixed_length=8
        ),
        # A crash mid-save leaves a temporary directory; remove it on start.
        cleanup_tmp_directories=True,
        enable_async_checkpointing=True,
    )
    self._manager = ocp.CheckpointManager(
        self.directory, options=options, item_names=(_STATE, _TRAIN_INPUT)
    )

  def latest_step(self) -> int | None:
    """Returns the newest finished checkpoint's step, or None if there is none."""
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    """Returns the steps of all finished checkpoints, oldest first."""
    return sorted(self._manager.all_steps())

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
    return self._manager.save(
        step,
        args=ocp.args.Composite(**{
            _STATE: ocp.args.StandardSave(state),
            _TRAIN_INPUT: ocp.args.JsonSave(input_state),
        }),
        force=force,
    )

  def restore(self, abstract_state: Any, step: int | None = None) -> Restored | None:
    """Reads checkpoint `step` (default: the latest) into `abstract_state`'s structure.

    Args:
      abstract_state: the state's pytree with `jax.ShapeDtypeStruct` leaves (from
        `jax.eval_shape`), each with the sharding the restored array should have.
      step: which checkpoint; None means the latest.

    Returns:
      The checkpoint, or None when there is none to restore.
    """
    step = self.latest_step() if step is None else step
    if step is None:
      return None
    restored = self._manager.restore(
        step,
        args=ocp.args.Composite(**{
            _STATE: ocp.args.StandardRestore(abstract_state),
            _TRAIN_INPUT: ocp.args.JsonRestore(),
        }),
    )
    return Restored(step=step, state=restored[_STATE], input_state=restored[_TRAIN_INPUT])

  def close(self) -> None:
    """Waits for pending saves to finish, then releases Orbax's resources."""
    self._manager.wait_until_finished()
    self._manager.close()

  def __enter__(self) -> "Checkpointer":
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()
