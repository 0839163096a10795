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
import time
from typing import Any

from absl import logging
import jax
import numpy as np

from paxml.experiment_api import rng as rng_lib


class AbstractExperiment(abc.ABC):
  """The base of every experiment."""

  CHECKPOINT_ATTRS: dict[str, str] = {}
  NON_BROADCAST_CHECKPOINT_ATTRS: dict[str, str] = {}

  @abc.abstractmethod
  def __init__(self, mode: str, init_rng: jax.Array | None = None):
    """`mode` is the --jaxline_mode value ('train', 'eval...', or
    'train_eval_multithreaded' in both threads of that mode)."""

  @abc.abstractmethod
  def step(self, *, global_step: jax.Array, rng: jax.Array, writer: Any) -> dict[str, Any]:
    """Runs one training step; returns scalars to log."""

  @abc.abstractmethod
  def evaluate(self, *, global_step: jax.Array, rng: jax.Array, writer: Any
               ) -> dict[str, Any] | None:
    """Evaluates the current state; returns scalars to log."""

  def initialize_train_step_rng(self, rng: jax.Array) -> jax.Array:
    """Places the step key on the devices; default: a copy on each local device."""
    return rng_lib.bcast_local_devices(rng)

  def should_run_step(self, global_step: int, config: Any) -> bool:
    """Whether to train step `global_step`; also ends the eval loop."""
    return global_step < config.training_steps

  def train_loop(self, config: Any, state: Any, periodic_actions: list[Any],
                 writer: Any = None) -> None:
    """Steps until `should_run_step` is False, calling the periodic actions.

    After each `step` the host-side `state.global_step` is incremented and
    every action is called with `(time, global_step, scalars)`.
    """
    split = rng_lib.make_step_rng_splitter(config.random_mode_train)
    host_ids = rng_lib.host_id_devices()
    while self.should_run_step(state.global_step, config):
      with jax.profiler.StepTraceAnnotation("train", step_num=state.global_step):
        step_rng, state.train_step_rng = split(state.train_step_rng, host_ids)
        global_step = rng_lib.bcast_local_devices(np.int32(state.global_step))
        scalars = self.step(global_step=global_step, rng=step_rng, writer=writer)
        state.global_step += 1
        t = time.time()
        for action in periodic_actions:
          action(t, state.global_step, scalars)

  def snapshot_state(self) -> dict[str, Any]:
    """Returns {checkpoint name: value}: device 0's copy of CHECKPOINT_ATTRS."""
    if not self.CHECKPOINT_ATTRS and not self.NON_BROADCAST_CHECKPOINT_ATTRS:
      logging.log_first_n(
          logging.WARNING, "%s has neither CHECKPOINT_ATTRS nor "
          "NON_BROADCAST_CHECKPOINT_ATTRS: your job will not checkpoint any state.", 1,
          type(self).__name__)
    snapshot = {name: rng_lib.get_first(getattr(self, attr))
                for attr, name in self.CHECKPOINT_ATTRS.items()}
    snapshot.update({name: getattr(self, attr)
                     for attr, name in self.NON_BROADCAST_CHECKPOINT_ATTRS.items()})
    return snapshot

  def restore_from_snapshot(self, snapshot: dict[str, Any]) -> None:
    """Sets the attributes from a snapshot, re-broadcasting CHECKPOINT_ATTRS."""
    for attr, name in self.CHECKPOINT_ATTRS.items():
      # Drop the old device buffers first, so the new ones don't fragment memory.
      if hasattr(self, attr):
        delattr(self, attr)
      setattr(self, attr, rng_lib.bcast_local_devices(snapshot[name]))
    for attr, name in self.NON_BROADCAST_CHECKPOINT_ATTRS.items():
      setattr(self, attr, snapshot[name])

  def on_new_best_model(self, best_state: Any) -> None:
    """Called before each "best" checkpoint save; may change `best_state`."""
