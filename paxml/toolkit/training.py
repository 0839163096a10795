"""Train state, train tasks and the step-function builder (bobbin's training).

  TrainState: flax's TrainState plus `extra_vars` (every non-params
    collection, e.g. batch_stats and sown "tensorboard" summaries);
    `model_vars` is what `model.apply` takes.
  BaseTrainTask: override `compute_loss(params, batch, *, extra_vars,
    prng_key, step) -> (loss, (mutated_vars, aux))`.
  TrainTask(model, example_args, example_kwargs, required_rngs): adds the
    model, `get_rng_dict` and `initialize_train_state` (restores the latest
    checkpoint in `checkpoint_path` when there is one).
  TrainingStepFnBuilder: `task.make_training_step_fn().jit()` or
    `.pmap("batch")`; call it as `step_fn(state, batch, rng)` ->
    `(state, StepInfo)`. In both modes the mutated collections are written
    back into `extra_vars` (bobbin's jit path dropped them, so BatchNorm
    statistics never moved).
  Cron actions: `make_checkpoint_saver`, `make_log_writer`,
  `make_training_progress_publisher` (PublishTrainingProgress).
"""

from collections.abc import Callable, Sequence
import dataclasses
import functools
import logging as py_logging
import time
from typing import Any

from absl import logging
import flax.struct
import flax.training.train_state
import jax
import numpy as np
import optax

from paxml import checkpoints
from paxml import summaries
from paxml.toolkit import crontab
from paxml.toolkit import pmap_utils
from paxml.toolkit import summary

VarCollection = dict[str, Any]


class TrainState(flax.training.train_state.TrainState):
  """flax's TrainState (step, params, tx, opt_state) plus `extra_vars`."""

  extra_vars: VarCollection = flax.struct.field(default_factory=dict)

  @property
  def model_vars(self) -> VarCollection:
    """`extra_vars` with `params` added: the variables `model.apply` takes."""
    return {**self.extra_vars, "params": self.params}

  def is_replicated_for_pmap(self) -> bool:
    return crontab.is_replicated(self)


class StepInfo(flax.struct.PyTreeNode):
  """What a training step returns besides the new state."""

  loss: Any
  loss_aux_out: Any = None


def initialize_train_state(apply_fn: Callable[..., Any], init_model_vars: VarCollection,
                           tx: optax.GradientTransformation, *,
                           checkpoint_path: str | None = None) -> TrainState:
  """Builds a TrainState from `model.init` output; restores from `checkpoint_path`.

  The newest checkpoint in `checkpoint_path` (written by
  `make_checkpoint_saver`) replaces the fresh values; the fresh state gives
  the structure, shapes and shardings to restore into.
  """
  variables = dict(init_model_vars)
  params = variables.pop("params")
  state = TrainState.create(apply_fn=apply_fn, params=params, tx=tx, extra_vars=variables)
  if checkpoint_path is not None:
    with checkpoints.TreeCheckpointer(checkpoint_path) as ckpt:
      restored = ckpt.restore(state)
    if restored is not None:
      logging.info("Restored train state of step %d from %s", restored.step, checkpoint_path)
      state = restored.tree
  return state


class SaveCheckpoint:
  """A cron action that saves the train state in `directory/checkpoint_%08d`."""

  def __init__(self, directory: str, *, max_to_keep: int | None = None,
               keep_period: int | None = None, only_leader_process: bool = True):
    self.directory = directory
    self._checkpointer = None
    if summaries.is_leader_process() or not only_leader_process:
      self._checkpointer = checkpoints.TreeCheckpointer(
          directory, max_to_keep=max_to_keep, keep_period=keep_period)

  def __call__(self, train_state: TrainState, *args, **kwargs) -> bool:
    del args, kwargs
    return self.save(train_state)

  def save(self, train_state: TrainState, *, metadata: Any = None) -> bool:
    """Saves `train_state` (and JSON-serialisable `metadata`) as its step.

    Returns whether it saved: False in a process that does no I/O, or when
    the step is already saved.
    """
    if self._checkpointer is None:
      return False
    return self._checkpointer.save(int(np.asarray(train_state.step)), train_state,
                                   metadata=metadata)

  def read_metadata(self) -> Any:
    """The newest checkpoint's metadata; None without one, or in a process that does no I/O."""
    return None if self._checkpointer is None else self._checkpointer.read_metadata()

  def wait_until_finished(self) -> None:
    if self._checkpointer is not None:
      self._checkpointer.wait_until_finished()

  def close(self) -> None:
    if self._checkpointer is not None:
      self._checkpointer.close()


class WriteLog:
  """A cron action logging `@step=N, loss=L` (loss averaged over devices)."""

  def __init__(self, logger: Any = logging, loglevel: int = py_logging.INFO):
    self._logger = logger
    self._level = loglevel

  def __call__(self, train_state, *args, step_info: StepInfo, **kwargs) -> str:
    del args, kwargs
    message = "@step=%d, loss=%f" % (int(np.asarray(train_state.step)),
                                    float(np.mean(np.asarray(step_info.loss))))
    self._logger.log(self._level, message)
    return message


class PublishTrainingProgress:
  """A cron action writing `trainer/steps_per_sec` and the sown summaries.

  Steps per second are measured between two calls (the first call only starts
  the clock). Summaries are every `PublishableSummary` in the listed
  `extra_vars` collections.
  """

  def __init__(self, writer: Any, summary_collections: Sequence[str] = ("tensorboard",),
               clock: Callable[[], float] | None = None):
    self._writer = writer
    self._collections = tuple(summary_collections)
    self._clock = clock or (lambda: time.time())  # Patchable time.time.
    self._last: tuple[float, int] | None = None

  def __call__(self, train_state, *args, **kwargs) -> dict[str, float]:
    del args, kwargs
    step = int(np.asarray(train_state.step))
    now = self._clock()
    written = {}
    if self._last is not None and now > self._last[0]:
      written["trainer/steps_per_sec"] = (step - self._last[1]) / (now - self._last[0])
      self._writer.scalar("trainer/steps_per_sec", written["trainer/steps_per_sec"], step)
    self._last = (now, step)
    for name in self._collections:
      if name in train_state.extra_vars:
        summary.publish_train_intermediates(self._writer, train_state.extra_vars[name], step)
    return written


@dataclasses.dataclass(frozen=True)
class TrainingStepFnBuilder:
  """Builds `step(state, batch, rng) -> (state, StepInfo)`; compiled on first call.

  Immutable: `.jit()` and `.pmap(axis_name)` return configured copies. Under
  pmap the state must be replicated (`pmap_utils.replicate`); the batch is
  split across local devices ("shard") and the key split per device ("rng").
  """

  task: "BaseTrainTask"
  pmap_axis_name: str | None = None
  use_jit: bool = False
  donate_train_state: bool = False

  def jit(self, *, donate_train_state: bool = False) -> "TrainingStepFnBuilder":
    return dataclasses.replace(self, use_jit=True, pmap_axis_name=None,
                               donate_train_state=donate_train_state)

  def pmap(self, axis_name: str) -> "TrainingStepFnBuilder":
    return dataclasses.replace(self, pmap_axis_name=axis_name, use_jit=False)

  def make_base_step_fn(self) -> Callable[..., tuple[TrainState, StepInfo]]:
    """The uncompiled step: gradient, cross-device mean, update, extra_vars."""
    task, axis = self.task, self.pmap_axis_name

    def step(train_state: TrainState, batch: Any, rng: jax.Array):
      def loss_fn(params):
        return task.compute_loss(params, batch, extra_vars=train_state.extra_vars,
                                 prng_key=rng, step=train_state.step)
      (loss, (mutated, aux)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
          train_state.params)
      if axis is not None:
        grads = jax.lax.pmean(grads, axis)
      extra_vars = dict(train_state.extra_vars)
      # Every mutated collection is kept, jit or pmap alike.
      for name, tree in (mutated or {}).items():
        if name != "params":
          extra_vars[name] = task.reduce_extra_vars(name, tree, axis_name=axis)
      new_state = train_state.apply_gradients(grads=grads).replace(extra_vars=extra_vars)
      return new_state, StepInfo(loss=loss, loss_aux_out=aux)

    return step

  @functools.cached_property
  def compiled_fn(self) -> Callable[..., tuple[TrainState, StepInfo]]:
    step = self.make_base_step_fn()
    if self.pmap_axis_name is not None:
      return pmap_utils.tpmap(step, self.pmap_axis_name, ("thru", "shard", "rng"))
    if self.use_jit:
      return jax.jit(step, donate_argnums=(0,) if self.donate_train_state else ())
    return step

  def __call__(self, train_state: TrainState, batch: Any, rng: jax.Array):
    replicated = crontab.is_replicated(train_state)
    if self.pmap_axis_name is not None and not replicated:
      raise ValueError(
          "This step function was built with .pmap(), which needs a train state with a "
          "leading device axis: call paxml.toolkit.replicate(train_state) first. If you "
          "don't intend to parallelise over devices, don't call .pmap(); use .jit().")
    if self.pmap_axis_name is None and replicated:
      raise ValueError(
          "The train state is replicated across devices (its step has shape "
          f"{np.shape(train_state.step)}) but this step function is not pmapped; build it "
          "with .pmap(axis_name), or unreplicate the state.")
    return self.compiled_fn(train_state, batch, rng)


def _pmean_floats(tree: Any, axis_name: str) -> Any:
  return jax.tree.map(
      lambda x: jax.lax.pmean(x, axis_name) if jax.numpy.issubdtype(x.dtype, jax.numpy.inexact)
      else x, tree)


class BaseTrainTask:
  """What to minimise; subclasses implement `compute_loss`."""

  def compute_loss(self, params: Any, batch: Any, *, extra_vars: VarCollection,
                   prng_key: jax.Array, step: Any) -> tuple[Any, tuple[VarCollection, Any]]:
    """Returns `(loss, (mutated_vars, aux))` for one (per-device) batch."""
    raise NotImplementedError(
        f"{type(self).__name__} must implement compute_loss(params, batch, *, extra_vars, "
        "prng_key, step) -> (loss, (mutated_vars, aux)).")

  def reduce_extra_vars(self, collection_name: str, tree: Any, *,
                        axis_name: str | None) -> Any:
    """Makes a mutated collection identical across devices.

    The default averages floating-point leaves over `axis_name` under pmap
    (BatchNorm means and summaries) so replicas stay equal, and returns the
    tree as is otherwise. Override for other reductions.
    """
    del collection_name
    return tree if axis_name is None else _pmean_floats(tree, axis_name)

  def make_training_step_fn(self) -> TrainingStepFnBuilder:
    return TrainingStepFnBuilder(self)

  def make_checkpoint_saver(self, directory: str, **kwargs) -> SaveCheckpoint:
    return SaveCheckpoint(directory, **kwargs)

  def make_log_writer(self, logger: Any = logging,
                      loglevel: int = py_logging.INFO) -> WriteLog:
    return WriteLog(logger, loglevel)

  def make_training_progress_publisher(
      self, writer: Any, summary_collections: Sequence[str] = ("tensorboard",),
      **kwargs) -> PublishTrainingProgress:
    return PublishTrainingProgress(writer, summary_collections, **kwargs)


class TrainTask(BaseTrainTask):
  """A train task around a flax module."""

  def __init__(self, model: Any, example_args: Sequence[Any],
               example_kwargs: dict[str, Any] | None = None,
               required_rngs: Sequence[str] = ()):
    self.model = model
    self.example_args = tuple(example_args)
    self.example_kwargs = dict(example_kwargs or {})
    self.required_rngs = tuple(required_rngs)

  def get_rng_dict(self, rng: jax.Array, extra_keys: Sequence[str] = ()) -> dict[str, jax.Array]:
    """Splits `rng` into one key per name in `required_rngs` + `extra_keys`."""
    names = tuple(self.required_rngs) + tuple(extra_keys)
    if not names:
      return {}
    return dict(zip(names, jax.random.split(rng, len(names))))

  def initialize_train_state(self, rng: jax.Array, tx: optax.GradientTransformation, *,
                             checkpoint_path: str | None = None,
                             compile_init: Callable[..., Any] | bool | None = None
                             ) -> TrainState:
    """Initialises the model's variables (or restores them from `checkpoint_path`).

    Args:
      rng: key for "params" and the `required_rngs`.
      tx: the optimizer.
      checkpoint_path: a directory of `make_checkpoint_saver` checkpoints;
        the newest one is restored when it exists.
      compile_init: wraps the init function (e.g. `jax.jit`); True means jit.
    """
    def init(rng):
      rngs = self.get_rng_dict(rng, extra_keys=("params",))
      return self.model.init(rngs, *self.example_args, **self.example_kwargs)
    if compile_init is True:
      compile_init = jax.jit
    if compile_init:
      init = compile_init(init)
    return initialize_train_state(self.model.apply, init(rng), tx,
                                  checkpoint_path=checkpoint_path)
