"""Pax's checkpoint formats (`paxml.checkpoint_types.CheckpointType`).

This project writes one format: Orbax with `checkpoint_%08d` step directories (Pax's GDA layout,
which Pax also uses for PERSISTENCE). The enum is accepted wherever Pax's functions take it; FLAX
only changes the step directory's name (`checkpoint_<step>` without zero padding, as Pax's pmap
checkpoints were named).
"""

import enum
from typing import Any


@enum.unique
class CheckpointType(str, enum.Enum):
  """Pax's checkpoint formats (string-valued, so flags and configs may give the value)."""

  UNSPECIFIED = "unspecified"
  FLAX = "flax"
  GDA = "gda"
  PERSISTENCE = "persistence"


def retrieve_checkpoint_type(
  maybe_use_persistence_checkpointing: bool, task: Any
) -> CheckpointType:
  """The type Pax picks for `task`: a task whose model has a mesh (pjit) writes GDA (PERSISTENCE
  when asked), a pmap one FLAX (Pax's `--pmap_use_tensorstore` flag does not exist here)."""
  if getattr(task.model, "mesh_shape", None) is not None:
    return CheckpointType.PERSISTENCE if maybe_use_persistence_checkpointing else CheckpointType.GDA
  return CheckpointType.FLAX
