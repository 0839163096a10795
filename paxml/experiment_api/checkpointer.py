"""Checkpointers for the drivers: the JAXline protocol, durable on Orbax.

The drivers call `get_experiment_state(series)`, `save(series)`,
`restore(series)`, `restore_path(series)`, `can_be_restored(series)` and
`wait_for_checkpointing_to_finish()`, with series "latest" and "best".

`OrbaxCheckpointer(config, mode)` (the default) keeps each series in
`<config.checkpoint_dir>/models/<series>/checkpoint_%08d` through
`paxml.checkpoints.TreeCheckpointer`: a killed training job resumes from
"latest" and a restarted evaluator finds its "best" value again. The
snapshot is copied to host memory when `save` is called, so the training
loop may donate its buffers at once: save, run ahead, restore gives the
saved values. Saves are synchronous (see `OrbaxCheckpointer.__init__`).
"""

import math
import os
import threading
import types
from typing import Any, Protocol

from absl import logging
import jax
import numpy as np

from paxml import checkpoints
from paxml.experiment_api import rng as rng_lib


class Checkpointer(Protocol):
  """What `train.train` and `train.evaluate` need from a checkpointer."""

  def get_experiment_state(self, series: str) -> Any: ...

  def save(self, series: str) -> None: ...

  def restore(self, series: str) -> None: ...

  def restore_path(self, series: str) -> str | None: ...

  def can_be_restored(self, series: str) -> bool: ...

  def wait_for_checkpointing_to_finish(self) -> None: ...


def _snapshot(state: Any) -> dict[str, Any]:
  """The saved tree of an experiment state, copied to host memory."""
  tree = {"experiment": state.experiment_module.snapshot_state()}
  if getattr(state, "train_step_rng", None) is not None:
    tree["train_step_rng"] = rng_lib.get_first(state.train_step_rng)
  return jax.device_get(tree)


class OrbaxCheckpointer:
  """Durable "latest"/"best" series for one experiment."""

  def __init__(self, config: Any, mode: str, *, async_save: bool = False):
    """Saves are synchronous by default, as in JAXline: the snapshot is
    already on the host, and Orbax's asynchronous saves from two threads of
    one process (train_eval_multithreaded: "latest" in one, "best" in the
    other) were seen to deadlock in its completion signalling."""
    # Only the training job writes "latest". An evaluator that cleaned up
    # temporary directories there would delete a save in progress.
    self._writes_latest = mode == "train"
    if not config.get("checkpoint_dir"):
      raise ValueError("config.checkpoint_dir is not set; add it to your config (where "
                       "checkpoints and TensorBoard files go).")
    self._root = os.path.join(config.checkpoint_dir, "models")
    self._max_to_keep = config.max_checkpoints_to_keep
    self._async = async_save
    self._states: dict[str, types.SimpleNamespace] = {}
    self._series: dict[str, checkpoints.TreeCheckpointer] = {}
    self._lock = threading.Lock()

  def _checkpointer(self, series: str) -> checkpoints.TreeCheckpointer:
    with self._lock:
      if series not in self._series:
        self._series[series] = checkpoints.TreeCheckpointer(
            os.path.join(self._root, series), max_to_keep=self._max_to_keep,
            async_save=self._async,
            cleanup_tmp_directories=self._writes_latest or series != "latest")
      return self._series[series]

  def get_experiment_state(self, series: str) -> types.SimpleNamespace:
    if series not in self._states:
      self._states[series] = types.SimpleNamespace(global_step=0)
    return self._states[series]

  def save(self, series: str) -> None:
    state = self.get_experiment_state(series)
    snapshot = _snapshot(state)
    metadata = {"global_step": int(state.global_step)}
    if "train_step_rng" in snapshot:
      # An evaluator restores without a key of its own: it needs the spec.
      rng = snapshot["train_step_rng"]
      metadata["train_step_rng"] = {"shape": list(rng.shape), "dtype": rng.dtype.str}
    best = getattr(state, "best_eval_metric_value", None)
    if best is not None:
      metadata["best_eval_metric_value"] = float(best)
    saved = self._checkpointer(series).save(int(state.global_step), snapshot,
                                            metadata=metadata)
    if saved:
      logging.info("Saved %r checkpoint at global_step %d", series, state.global_step)

  def restore(self, series: str) -> None:
    state = self.get_experiment_state(series)
    ckpt = self._checkpointer(series)
    ckpt.wait_until_finished()  # Our own pending save must be visible.
    ckpt.reload()
    metadata = ckpt.read_metadata()
    if metadata is None:
      raise ValueError(f"No {series!r} checkpoint in {ckpt.directory} to restore; check "
                       "can_be_restored() first.")
    target = _snapshot(state)
    target.pop("train_step_rng", None)
    if "train_step_rng" in metadata:
      spec = metadata["train_step_rng"]
      target["train_step_rng"] = np.zeros(spec["shape"], np.dtype(spec["dtype"]))
    restored = ckpt.restore(target, step=metadata["global_step"])
    if restored is None:
      raise ValueError(f"No {series!r} checkpoint in {ckpt.directory} to restore; check "
                       "can_be_restored() first.")
    state.experiment_module.restore_from_snapshot(restored.tree["experiment"])
    if "train_step_rng" in restored.tree and hasattr(state, "train_step_rng"):
      state.train_step_rng = state.experiment_module.initialize_train_step_rng(
          restored.tree["train_step_rng"])
    state.global_step = restored.metadata["global_step"]
    if "best_eval_metric_value" in restored.metadata:
      state.best_eval_metric_value = restored.metadata["best_eval_metric_value"]
    logging.info("Restored %r checkpoint of global_step %d", series, state.global_step)

  def restore_path(self, series: str) -> str | None:
    ckpt = self._checkpointer(series)
    ckpt.reload()
    step = ckpt.latest_step()
    return None if step is None else os.path.join(ckpt.directory, "checkpoint_%08d" % step)

  def can_be_restored(self, series: str) -> bool:
    return self.restore_path(series) is not None

  def wait_for_checkpointing_to_finish(self) -> None:
    for ckpt in list(self._series.values()):
      ckpt.wait_until_finished()

  def close(self) -> None:
    for ckpt in list(self._series.values()):
      ckpt.close()


def create_checkpointer(config: Any, mode: str) -> OrbaxCheckpointer:
  """The default `checkpointer_factory` of `platform.main`."""
  return OrbaxCheckpointer(config, mode)


def worst_value(higher_is_better: bool) -> float:
  return -math.inf if higher_is_better else math.inf


def is_better(value: float, best: float, higher_is_better: bool) -> bool:
  return bool(np.greater(value, best) if higher_is_better else np.less(value, best))
