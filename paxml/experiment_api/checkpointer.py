"""Checkpointers for the drivers: the JAXline protocol, durable on Orbax.

The drivers call `get_experiment_state(series)`, `save(series)`,
`restore(series)`, `restore_path(series)`, `can_be_restored(series)` and
`wait_for_checkpointing_to_finish()`, with series "latest" and "best".

`OrbaxCheckpointer(config, mode)` (the default) keeps each series in
`<config.checkpoint_dir>/models/<series>/checkpoint_%08d`, a
`paxml.checkpoints.TreeCheckpointer` each (the store the Pax trainer uses;
pending saves are finished before the process exits): a killed training job resumes from
"latest" and a restarted evaluator finds its "best" value again. The
snapshot is copied to host memory when `save` is called, so the training
loop may donate its buffers at once: save, run ahead, restore gives the
saved values. Saves are synchronous (see `OrbaxCheckpointer.__init__`).
The tree structure is saved with the arrays, so attributes an experiment
sets to None in `__init__` and builds on its first step restore fine.
"""

import base64
import math
import os
import pickle
import threading
import types
from typing import Any

from absl import logging
import jax
import numpy as np

from paxml import checkpoints
from paxml.experiment_api import utils

Checkpointer = utils.Checkpointer

_ARRAY_TYPES = (np.ndarray, np.generic, jax.Array)


def _snapshot(state: Any) -> dict[str, Any]:
  """The saved tree of an experiment state, copied to host memory."""
  tree = {"experiment": state.experiment_module.snapshot_state()}
  if getattr(state, "train_step_rng", None) is not None:
    tree["train_step_rng"] = utils.get_first(state.train_step_rng)
  return jax.device_get(tree)


def _encode(obj: Any) -> str:
  return base64.b64encode(pickle.dumps(obj)).decode("ascii")


def _decode(text: str) -> Any:
  return pickle.loads(base64.b64decode(text))


def _split(tree: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
  """Arrays to store, and the JSON that rebuilds the tree around them.

  The tree structure is kept (pickled), so restore does not need a template:
  attributes that are None in a fresh experiment (built lazily on the first
  step) restore to what was saved. Non-array leaves (strings, Python
  numbers) go into the JSON, pickled.
  """
  leaves, treedef = jax.tree.flatten(tree)
  arrays, kinds = {}, []
  for i, leaf in enumerate(leaves):
    if isinstance(leaf, _ARRAY_TYPES):
      arrays[str(i)] = np.asarray(leaf)
      kinds.append(
        {
          "shape": list(np.shape(leaf)),
          "dtype": np.asarray(leaf).dtype.str,
          "generic": isinstance(leaf, np.generic),
        }
      )
    else:
      kinds.append({"value": _encode(leaf)})
  return arrays, {"treedef": _encode(treedef), "leaves": kinds}


def _template(structure: dict[str, Any]) -> dict[str, np.ndarray]:
  return {
    str(i): np.zeros(k["shape"], np.dtype(k["dtype"]))
    for i, k in enumerate(structure["leaves"])
    if "shape" in k
  }


def _join(arrays: dict[str, Any], structure: dict[str, Any]) -> Any:
  leaves = []
  for i, k in enumerate(structure["leaves"]):
    if "shape" not in k:
      leaves.append(_decode(k["value"]))
    elif k["generic"]:
      leaves.append(np.asarray(arrays[str(i)]).reshape(())[()])
    else:
      leaves.append(np.asarray(arrays[str(i)]))
  return jax.tree.unflatten(_decode(structure["treedef"]), leaves)


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
      raise ValueError(
        "config.checkpoint_dir is not set; add it to your config (where "
        "checkpoints and TensorBoard files go)."
      )
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
          os.path.join(self._root, series),
          max_to_keep=self._max_to_keep,
          async_save=self._async,
          cleanup_tmp_directories=self._writes_latest or series != "latest",
          finish_at_exit=True,
        )
      return self._series[series]

  def get_experiment_state(self, series: str) -> types.SimpleNamespace:
    if series not in self._states:
      self._states[series] = types.SimpleNamespace(global_step=0)
    return self._states[series]

  def save(self, series: str) -> None:
    state = self.get_experiment_state(series)
    arrays, structure = _split(_snapshot(state))
    metadata = {"global_step": int(state.global_step), "structure": structure}
    best = getattr(state, "best_eval_metric_value", None)
    if best is not None:
      metadata["best_eval_metric_value"] = float(best)
    saved = self._checkpointer(series).save(int(state.global_step), arrays, metadata=metadata)
    if saved:
      logging.info("Saved %r checkpoint at global_step %d", series, state.global_step)

  def restore(self, series: str) -> None:
    state = self.get_experiment_state(series)
    ckpt = self._checkpointer(series)
    ckpt.wait_until_finished()  # Our own pending save must be visible.
    ckpt.reload()
    metadata = ckpt.read_metadata()
    if metadata is None:
      raise ValueError(
        f"No {series!r} checkpoint in {ckpt.directory} to restore; check can_be_restored() first."
      )
    restored = ckpt.restore(_template(metadata["structure"]), step=metadata["global_step"])
    if restored is None:
      raise ValueError(
        f"No {series!r} checkpoint in {ckpt.directory} to restore; check can_be_restored() first."
      )
    tree = _join(restored.tree, metadata["structure"])
    state.experiment_module.restore_from_snapshot(tree["experiment"])
    if "train_step_rng" in tree and getattr(state, "train_step_rng", None) is not None:
      state.train_step_rng = state.experiment_module.initialize_train_step_rng(
        tree["train_step_rng"]
      )
    state.global_step = metadata["global_step"]
    if "best_eval_metric_value" in metadata:
      state.best_eval_metric_value = metadata["best_eval_metric_value"]
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
