"""Pax's names and lookups for checkpoint step directories (`paxml.checkpoint_paths`).

A step directory is `checkpoint_%08d` (Pax's GDA/PERSISTENCE naming, the one this project's
trainer writes), `checkpoint_<step>` for Pax's FLAX type, or the bare step number with
`use_digit_step_subdirectory`. A directory Orbax is still writing (a temporary one) is never the
latest checkpoint.
"""

import os
import re

from etils import epath
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp

from paxml import checkpoint_types

CheckpointType = checkpoint_types.CheckpointType
retrieve_checkpoint_type = checkpoint_types.retrieve_checkpoint_type

CHECKPOINT_PREFIX = "checkpoint_"
STATE_ITEM_NAME = "state"
INPUT_ITEM_NAME = "train_input"
TMP_PREFIX = "tmp_"
# A step directory: `checkpoint_<digits>` or just digits (the prefix is optional).
CHECKPOINT_PATTERN_RE = re.compile(rf"({CHECKPOINT_PREFIX})?\d+$")
# Pax's oldest temporary naming: `tmp_<timestamp>.checkpoint_<step>`.
TMP_CHECKPOINT_PATTERN_RE = re.compile(rf"{TMP_PREFIX}\d+.{CHECKPOINT_PREFIX}\d+$")
_FIXED_DIGITS = 8


def checkpoint_prefix(checkpoint_type: CheckpointType = CheckpointType.UNSPECIFIED) -> str:
  """The step directories' prefix (the same for every type)."""
  del checkpoint_type
  return CHECKPOINT_PREFIX.rstrip("_")


def checkpoint_name_fixed_length(
  checkpoint_type: CheckpointType = CheckpointType.UNSPECIFIED,
) -> int | None:
  """How many digits the step is padded to; None (no padding) for FLAX."""
  return None if checkpoint_type == CheckpointType.FLAX else _FIXED_DIGITS


def checkpoint_name(
  step: int,
  checkpoint_type: CheckpointType = CheckpointType.UNSPECIFIED,
  use_digit_step_subdirectory: bool = False,
) -> str:
  """The step directory's name: '1234', 'checkpoint_1234' (FLAX) or 'checkpoint_00001234'."""
  if use_digit_step_subdirectory:
    return str(step)
  digits = checkpoint_name_fixed_length(checkpoint_type)
  return f"{CHECKPOINT_PREFIX}{step:0{digits}d}" if digits else f"{CHECKPOINT_PREFIX}{step}"


def make_checkpoint_step_dir(
  checkpoint_dir: epath.PathLike,
  step: int,
  checkpoint_type: CheckpointType = CheckpointType.UNSPECIFIED,
  use_digit_step_subdirectory: bool = False,
) -> epath.Path:
  """`checkpoint_dir / checkpoint_name(step, ...)`."""
  name = checkpoint_name(step, checkpoint_type, use_digit_step_subdirectory)
  return epath.Path(checkpoint_dir) / name


def is_checkpoint_asset(x: epath.PathLike) -> bool:
  """Whether `x` is named like a step directory (finished or not)."""
  return bool(CHECKPOINT_PATTERN_RE.match(os.path.basename(os.fspath(x))))


def is_tmp_checkpoint_asset(x: epath.PathLike) -> bool:
  """Whether `x` is a checkpoint still being written (Orbax's temporary directory, or Pax's
  oldest `tmp_<time>.checkpoint_<step>` naming)."""
  path = epath.Path(x)
  if TMP_CHECKPOINT_PATTERN_RE.match(path.name):
    return True
  if path.is_file():  # A legacy single-file Flax checkpoint is always final.
    return False
  return ocp.utils.is_tmp_checkpoint(path)


def get_step_from_checkpoint_asset(checkpoint_dir: epath.PathLike) -> int:
  """The step a step directory (of any of the namings above) holds."""
  path = epath.Path(checkpoint_dir)
  if path.name.isdigit():
    return int(path.name)
  if is_tmp_checkpoint_asset(path):
    return int(path.suffix[len(CHECKPOINT_PREFIX) :])
  return int(path.stem[len(CHECKPOINT_PREFIX) :])


def latest_checkpoint_if_exists(checkpoint_dir: epath.PathLike) -> epath.Path | None:
  """The newest finished step directory under `checkpoint_dir`, or None (also when the directory
  does not exist)."""
  directory = epath.Path(checkpoint_dir)
  if not directory.exists():
    return None
  finished = [
    p for p in directory.iterdir() if is_checkpoint_asset(p) and not is_tmp_checkpoint_asset(p)
  ]
  if not finished:
    return None
  return directory / max(finished, key=get_step_from_checkpoint_asset).name


def _missing(checkpoint_dir: epath.Path) -> ValueError:
  if not checkpoint_dir.exists():
    return ValueError(f"{checkpoint_dir=!r} does not exist")
  return ValueError(f"No checkpoints were found in directory {checkpoint_dir=!r}")


def latest_checkpoint(checkpoint_dir: epath.PathLike) -> epath.Path:
  """Like `latest_checkpoint_if_exists`, but a missing checkpoint raises ValueError."""
  checkpoint_dir = epath.Path(checkpoint_dir)
  path = latest_checkpoint_if_exists(checkpoint_dir)
  if path is None:
    raise _missing(checkpoint_dir)
  return path


def retrieve_latest_checkpoint_step_if_exists(checkpoint_dir: epath.PathLike) -> int | None:
  """The newest finished step, or None; every process gets process 0's answer (they must agree
  on what to restore even while a save lands)."""
  path = latest_checkpoint_if_exists(checkpoint_dir)
  step = -1 if path is None else get_step_from_checkpoint_asset(path)
  if jax.process_count() > 1:
    step = int(multihost_utils.broadcast_one_to_all(np.asarray(step)).item())
  return None if step == -1 else step


def retrieve_latest_checkpoint_step(checkpoint_dir: epath.PathLike) -> int:
  """Like `retrieve_latest_checkpoint_step_if_exists`; no checkpoint raises ValueError."""
  checkpoint_dir = epath.Path(checkpoint_dir)
  step = retrieve_latest_checkpoint_step_if_exists(checkpoint_dir)
  if step is None:
    raise _missing(checkpoint_dir)
  return step


def is_tfhub_dir(directory: epath.PathLike) -> bool:
  """Pax's hook for TF-Hub exports (none here)."""
  del directory
  return False


def is_legacy_flax_checkpoint(path: epath.PathLike) -> bool:
  """Whether `path` is a single-file Flax checkpoint named like a step directory."""
  path = epath.Path(path)
  return is_checkpoint_asset(path) and not is_tmp_checkpoint_asset(path) and path.is_file()
