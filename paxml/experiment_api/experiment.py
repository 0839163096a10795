"""`AbstractExperiment`: the JAXline experiment contract.

Subclass it, implement `__init__(mode, init_rng, **experiment_kwargs)`,
`step` and `evaluate`, and run it with `platform.main(Experiment, argv)`.

  CHECKPOINT_ATTRS {attr: name}: pmapped attributes (leading device axis);
    device 0's copy is saved and restored onto every local device.
  NON_BROADCAST_CHECKPOINT_ATTRS {attr: name}: saved and restored as they are.
  step(*, global_step, rng, writer) -> {name: scalar}: one training step.
    `global_step` and `rng` arrive per local device (leading device axis).
    The first call sees global_step == 0.
  evaluate(*, global_step, rng, writer) -> {name: scalar}: a full evaluation;
    `rng` is the same on every call (fold in `global_step` for variety).
Hooks: initialize_train_step_rng, should_run_step, train_loop,
snapshot_state / restore_from_snapshot, on_new_best_model.
"""

import abc
import functools
import time
from typing import Any

from absl import logging
import jax
import numpy as np

from paxml.experiment_api import utils


class AbstractExperiment(abc.ABC):
  """The base of every experiment."""

  CHECKPOINT_ATTRS: dict[str, str] = {}
  NON_BROADCAST_CHECKPOINT_ATTRS: dict[str, str] = {}

  @abc.abstractmethod
  def __init__(self, mode: str, init_rng: jax.Array | None = None):
    """`mode` is 'train' in the training job, the --jaxline_mode value in an
    evaluator ('eval...', or 'train_eval_multithreaded' in that mode's
    evaluator thread)."""

  @abc.abstractmethod
  def step(self, *, global_step: jax.Array, rng: jax.Array, writer: Any) -> dict[str, Any]:
    """Runs one training step; returns scalars to log."""

  @abc.abstractmethod
  def evaluate(
    self, *, global_step: jax.Array, rng: jax.Array, writer: Any
  ) -> dict[str, Any] | None:
    """Evaluates the current state; returns scalars to log."""

  def initialize_train_step_rng(self, rng: jax.Array) -> jax.Array:
    """Places the step key on the devices; default: a copy on each local device."""
    return utils.bcast_local_devices(rng)

  def should_run_step(self, global_step: int, config: Any) -> bool:
    """Whether to train step `global_step`; also ends the eval loop."""
    return global_step < config.training_steps

  def train_loop(
    self, config: Any, state: Any, periodic_actions: list[Any], writer: Any = None
  ) -> None:
    """Steps until `should_run_step` is False, calling the periodic actions.

    One pmapped program per step advances the device step counter and
    splits and specialises the key; after `step`, `state.global_step` is
    incremented and every action is called as `action(t, global_step,
    scalars)`.
    """
    mode = config.random_mode_train

    @functools.partial(jax.pmap, axis_name="i")
    def next_device_state(global_step, rng, host_id):
      step_rng, state_rng = jax.random.split(rng)
      step_rng = utils.specialize_rng_host_device(step_rng, host_id, "i", mode)
      return global_step + 1, (step_rng, state_rng)

    global_step_devices = np.broadcast_to(
      np.int32(state.global_step - 1), [jax.local_device_count()]
    )
    host_ids = utils.host_id_devices_for_rng(mode)
    if host_ids is None:
      host_ids = np.zeros([jax.local_device_count()], np.int32)  # Unused by the mode.
    with utils.log_activity("training loop"):
      while self.should_run_step(state.global_step, config):
        with jax.profiler.StepTraceAnnotation("train", step_num=state.global_step):
          global_step_devices, (step_rng, state.train_step_rng) = next_device_state(
            global_step_devices, state.train_step_rng, host_ids
          )
          scalars = self.step(global_step=global_step_devices, rng=step_rng, writer=writer)
          t = time.time()
          state.global_step += 1
        for action in periodic_actions:
          action(t, state.global_step, scalars)

  def snapshot_state(self) -> dict[str, Any]:
    """{checkpoint name: value}; device 0's copy of CHECKPOINT_ATTRS."""
    if not self.CHECKPOINT_ATTRS and not self.NON_BROADCAST_CHECKPOINT_ATTRS:
      logging.warning(
        "Your experiment's self.CHECKPOINT_ATTRS and self.NON_BROADCAST_CHECKPOINT_ATTRS "
        "are empty. Your job will not checkpoint any state or parameters."
      )
    snapshot = {
      name: utils.get_first(getattr(self, attr)) for attr, name in self.CHECKPOINT_ATTRS.items()
    }
    snapshot.update(
      {name: getattr(self, attr) for attr, name in self.NON_BROADCAST_CHECKPOINT_ATTRS.items()}
    )
    return snapshot

  def restore_from_snapshot(self, snapshot: dict[str, Any]) -> None:
    """Sets the attributes from a snapshot, re-broadcasting CHECKPOINT_ATTRS."""
    # Drop every old device buffer first, so the new ones don't fragment memory.
    for attr in list(self.CHECKPOINT_ATTRS) + list(self.NON_BROADCAST_CHECKPOINT_ATTRS):
      if hasattr(self, attr):
        delattr(self, attr)
    for attr, name in self.CHECKPOINT_ATTRS.items():
      setattr(self, attr, utils.bcast_local_devices(snapshot[name]))
    for attr, name in self.NON_BROADCAST_CHECKPOINT_ATTRS.items():
      setattr(self, attr, snapshot[name])

  def on_new_best_model(self, best_state: Any) -> None:
    """Called before each "best" checkpoint save, with `global_step` and
    `best_eval_metric_value` already set; may add to `best_state`."""
