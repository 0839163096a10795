"""Train state, train tasks and the step-function builder (bobbin's `training`).

TrainState: flax's TrainState plus `extra_vars` (every non-params
  collection: batch_stats, the sown "tensorboard" summaries, ...);
  `model_vars` is what `model.apply` takes.
BaseTrainTask: override `compute_loss(params, batch, *, extra_vars,
  prng_key, step) -> (loss, (mutated_vars, aux))`; optionally
  `reduce_extra_vars` (cross-device sync of mutated collections) and
  `write_trainer_log`.
TrainTask(model, example_args, example_kwargs, required_rngs): adds the
  flax model, `get_rng_dict` and `initialize_train_state`.
TrainingStepFnBuilder: `task.make_training_step_fn().jit()` or
  `.pmap("batch")`; `step_fn(state, batch, rng) -> (state, StepInfo)`.
  Mutated collections are written back in every mode (bobbin dropped them
  outside pmap, so BatchNorm statistics never moved under jit).
Cron actions: `make_checkpoint_saver`, `make_log_writer`,
  `make_training_progress_publisher` (PublishTrainingProgress).
"""

from collections.abc import Callable, Iterable, Mapping
import dataclasses
import functools
import logging
import os
import time
from typing import Any

import flax.struct
import flax.training.train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml import checkpoints
from paxml import leader
from paxml import preemption
from paxml.toolkit import flax_compat
from paxml.toolkit import pmap_util
from paxml.toolkit import pytypes
from paxml.toolkit import tensorboard

Batch = pytypes.Batch
Parameter = pytypes.Parameter
VarCollection = pytypes.VarCollection
Action = Callable[..., Any]

# bobbin code builds flax's TrainState with params=None; flax >= 0.8 rejects it.
flax_compat.install()


class TrainState(flax.training.train_state.TrainState):
  """flax's TrainState (step, params, tx, opt_state) plus `extra_vars`.

  `create` and `apply_gradients` also take params that are not a dict (an
  array, a tuple, None), as in bobbin; see flax_compat.
  """

  extra_vars: VarCollection = flax.struct.field(default_factory=dict)

  @property
  def model_vars(self) -> VarCollection:
    """`extra_vars` plus `params`: the variables `model.apply` takes."""
    out = dict(self.extra_vars)
    out["params"] = self.params
    return out

  def is_replicated_for_pmap(self) -> bool:
    """Whether the state has a leading device axis (pmap layout)."""
    return jnp.ndim(self.step) >= 1


class StepInfo(flax.struct.PyTreeNode):
  """What a step returns besides the state: the loss and the loss's aux output."""

  loss: Any
  loss_aux_out: Any = None


@dataclasses.dataclass(frozen=True)
class TrainingStepFnBuilder:
  """Lazily built `step(train_state, batch, prng_key) -> (state, StepInfo)`.

  Immutable: `.jit()` and `.pmap(axis_name)` return configured copies; the
  function is compiled on the first call. Under pmap the state must be
  replicated; the batch is split across local devices and the key split
  per device.
  """

  compute_loss_fn: Callable[..., Any]
  reduce_extra_vars_fn: Callable[..., Any]
  do_jit: bool = False
  static_argnums: tuple[int, ...] = ()
  backend: str | None = None
  devices: list[Any] | None = None
  donate_argnums: tuple[int, ...] = ()
  pmap_axis_name: Any = None

  def make_base_step_fn(self) -> Callable[..., tuple[TrainState, StepInfo]]:
    """The uncompiled step: gradient, cross-device mean, update, extra_vars."""
    axis = self.pmap_axis_name

    def step(train_state: TrainState, batch: Batch, prng_key: jax.Array):
      if axis is not None:
        try:
          jax.lax.axis_index(axis)
        except NameError:
          raise ValueError(
            f"training step function is configured to use pmap_axis_name={axis}, but is "
            "called outside of a pmap context. If you do not intend to perform "
            "multi-device parallelization, do not call `TrainingStepFnBuilder.pmap`"
          ) from None
      (loss, (mutated, aux)), grads = jax.value_and_grad(self.compute_loss_fn, has_aux=True)(
        train_state.params,
        batch,
        extra_vars=train_state.extra_vars,
        prng_key=prng_key,
        step=train_state.step,
      )
      if axis is not None:
        grads = jax.lax.pmean(grads, axis_name=axis)
      train_state = train_state.apply_gradients(grads=grads)
      extra_vars = dict(train_state.extra_vars)
      for name, tree in (mutated or {}).items():
        if name == "params":
          continue
        # Written back under jit too (bobbin kept them only under pmap).
        extra_vars[name] = (
          tree if axis is None else self.reduce_extra_vars_fn(name, tree, axis_name=axis)
        )
      return train_state.replace(extra_vars=extra_vars), StepInfo(loss=loss, loss_aux_out=aux)

    return step

  def pmap(self, axis_name: Any) -> "TrainingStepFnBuilder":
    if axis_name is None:
      raise ValueError("axis_name for `pmap` cannot be None.")
    return dataclasses.replace(self, pmap_axis_name=axis_name)

  def jit(self) -> "TrainingStepFnBuilder":
    return dataclasses.replace(self, do_jit=True)

  @functools.cached_property
  def compiled_fn(self) -> Callable[..., tuple[TrainState, StepInfo]]:
    f = self.make_base_step_fn()
    if self.pmap_axis_name is not None:
      return pmap_util.tpmap(
        f,
        axis_name=self.pmap_axis_name,
        argtypes=["thru", "shard", "rng"],
        devices=self.devices,
        backend=self.backend,
        donate_argnums=self.donate_argnums,
      )
    if self.do_jit:
      kwargs = {}
      if self.devices:
        kwargs["device"] = self.devices[0]
      elif self.backend is not None:
        kwargs["backend"] = self.backend
      return jax.jit(
        f, static_argnums=self.static_argnums, donate_argnums=self.donate_argnums, **kwargs
      )
    return f

  def __call__(self, *args: Any, **kwargs: Any) -> tuple[TrainState, StepInfo]:
    return self.compiled_fn(*args, **kwargs)


class PublishTrainingProgress:
  """A cron action writing `trainer/steps_per_sec` and the sown summaries."""

  def __init__(self, writer: Any, summary_collections: Iterable[str] = ("tensorboard",)):
    self.writer = writer
    self.summary_collections = tuple(summary_collections)
    self.last_fired_time = None
    self.last_fired_step = None

  def __call__(self, train_state: Any, **unused_kwargs: Any) -> None:
    if not isinstance(train_state, TrainState):
      raise ValueError(
        "`PublishTrainingProgress` action must be used with `bobbin.TrainState`"
        " (paxml.toolkit.TrainState)."
      )
    now = time.time()  # Looked up at call time so tests can patch it.
    if self.last_fired_time is not None:
      steps_per_sec = (train_state.step - self.last_fired_step) / (now - self.last_fired_time)
      self.writer.scalar("trainer/steps_per_sec", steps_per_sec, step=train_state.step)
    for name in self.summary_collections:
      if name in train_state.extra_vars:
        tensorboard.publish_train_intermediates(
          self.writer, train_state.extra_vars[name], train_state.step
        )
    self.last_fired_time = now
    self.last_fired_step = train_state.step


class SaveCheckpoint:
  """A cron action saving the train state as `checkpoint_path/checkpoint_<step>`.

  Saves are asynchronous; `checkpoint_store` waits for them at exit, so the
  last save of a script survives (bobbin's flax saves were synchronous).
  Only process 0 writes, as with flax's `save_checkpoint`.
  """

  def __init__(self, checkpoint_path: Any, save_args: Mapping[str, Any] | None = None):
    save_args = dict(save_args or {})
    # flax's save_checkpoint keeps 1 checkpoint by default.
    self._max_to_keep = save_args.pop("keep", 1)
    self._keep_period = save_args.pop("keep_every_n_steps", None)
    save_args.pop("overwrite", None)  # Saving a step that exists is a no-op.
    if save_args:
      raise TypeError(
        f"make_checkpoint_saver got save_args {sorted(save_args)} it does not "
        "support; use keep= and keep_every_n_steps=."
      )
    self.checkpoint_path = os.fspath(checkpoint_path)
    self._store = None

  @property
  def store(self) -> checkpoints.TreeCheckpointer:
    if self._store is None:
      self._store = checkpoints.TreeCheckpointer(
        self.checkpoint_path,
        max_to_keep=self._max_to_keep,
        keep_period=self._keep_period,
        finish_at_exit=True,  # bobbin's loops do not poll for SIGTERM; a last save must land.
      )
    return self._store

  def __call__(self, train_state: Any, **unused_kwargs: Any) -> bool:
    if not leader.is_leader():
      return False
    return self.store.save(int(np.asarray(train_state.step)), train_state)

  def wait_until_finished(self) -> None:
    if self._store is not None:
      self._store.wait_until_finished()


def restore_checkpoint(checkpoint_path: Any, target: Any) -> Any:
  """Returns `target` replaced by the newest checkpoint in `checkpoint_path`.

  `target` unchanged when the directory holds no finished checkpoint. Saves
  this process has in flight are waited for first.
  """
  if checkpoint_path is None or not os.path.exists(checkpoint_path):
    return target
  # This process's own saves may still be in flight (e.g. keep-best's last one).
  preemption.wait_for_pending_saves()
  store = checkpoints.TreeCheckpointer(os.fspath(checkpoint_path), cleanup_tmp_directories=False)
  try:
    restored = store.restore(target)
  finally:
    store.close()
  if restored is None:
    return target
  logging.info("Restored the train state of step %d from %s", restored.step, checkpoint_path)
  return restored.tree


class WriteLog:
  """A cron action calling `task.write_trainer_log` (default: "@step=N, loss=L")."""

  def __init__(
    self, task: "BaseTrainTask", logger: logging.Logger | None = None, loglevel: int = logging.INFO
  ):
    self._task = task
    self._logger = logging.root if logger is None else logger
    self._loglevel = loglevel

  def __call__(
    self, train_state: Any, *, step_info: StepInfo | None = None, **unused_kwargs: Any
  ) -> None:
    self._task.write_trainer_log(
      train_state, step_info=step_info, logger=self._logger, loglevel=self._loglevel
    )


class BaseTrainTask:
  """What to minimise; subclasses implement `compute_loss`."""

  def compute_loss(
    self,
    params: Parameter,
    batch: Batch,
    *,
    extra_vars: VarCollection,
    prng_key: jax.Array,
    step: Any,
  ) -> tuple[Any, tuple[VarCollection, Any]]:
    """Returns `(loss, (mutated_vars, aux))` for one (per-device) batch."""
    raise NotImplementedError(
      f"{type(self).__name__} must implement compute_loss(params, batch, *, extra_vars, "
      "prng_key, step) -> (loss, (mutated_vars, aux))."
    )

  def make_training_step_fn(self) -> TrainingStepFnBuilder:
    """Returns the step builder; configure with `.jit()` or `.pmap(axis)`."""
    return TrainingStepFnBuilder(
      compute_loss_fn=self.compute_loss, reduce_extra_vars_fn=self.reduce_extra_vars
    )

  def reduce_extra_vars(self, colname: str, tree: Any, *, axis_name: str) -> Any:
    """Syncs a mutated collection across devices (called under pmap only).

    The default averages the floating-point leaves over `axis_name`
    (BatchNorm statistics, sown summaries), so replicas stay equal; bobbin's
    default returned the tree as is and let the replicas drift apart.
    Override for another reduction.
    """
    del colname
    return jax.tree.map(
      lambda x: jax.lax.pmean(x, axis_name) if jnp.issubdtype(x.dtype, jnp.inexact) else x, tree
    )

  def write_trainer_log(
    self, train_state: Any, *, step_info: StepInfo | None, logger: logging.Logger, loglevel: int
  ) -> None:
    """Logs "@step=N, loss=L" (loss averaged over devices); override to change."""
    logger.log(
      loglevel,
      "@step=%d, loss=%f",
      int(np.asarray(train_state.step)),
      float(np.mean(np.asarray(step_info.loss))),
    )

  def make_log_writer(
    self, *, logger: logging.Logger | None = None, loglevel: int = logging.INFO
  ) -> WriteLog:
    """A cron action logging through `write_trainer_log` (root logger by default)."""
    return WriteLog(self, logger, loglevel)

  def make_checkpoint_saver(
    self, checkpoint_path: Any, save_args: Mapping[str, Any] | None = None
  ) -> SaveCheckpoint:
    """A cron action saving the train state in `checkpoint_path`."""
    return SaveCheckpoint(checkpoint_path, save_args)

  def make_training_progress_publisher(
    self, writer: Any, summary_collections: Iterable[str] = ("tensorboard",)
  ) -> PublishTrainingProgress:
    return PublishTrainingProgress(writer, summary_collections)


class TrainTask(BaseTrainTask):
  """A train task around a flax module."""

  def __init__(
    self,
    model: Any,
    example_args: Iterable[Any],
    example_kwargs: Mapping[str, Any] | None = None,
    required_rngs: Iterable[str] = (),
  ):
    """Args: the flax `model`; example inputs for `model.init`; the rng names
    `get_rng_dict` splits a key into (besides "params" at init)."""
    super().__init__()
    self._model = model
    self._required_rngs = tuple(required_rngs)
    self._example_args = tuple(example_args)
    self._example_kwargs = dict(example_kwargs or {})

  @property
  def model(self) -> Any:
    return self._model

  def get_rng_dict(
    self, rng_key: jax.Array, extra_keys: Iterable[str] = ()
  ) -> dict[str, jax.Array]:
    """Splits `rng_key` into one key per required rng name plus `extra_keys`."""
    keys = self._required_rngs + tuple(extra_keys)
    return dict(zip(keys, jax.random.split(rng_key, len(keys))))

  def _initialize_vars(
    self, rng_key: jax.Array, compile_init: Callable | None = None
  ) -> VarCollection:
    init = self.model.init if compile_init is None else compile_init(self.model.init)
    return init(
      self.get_rng_dict(rng_key, ("params",)), *self._example_args, **self._example_kwargs
    )

  def initialize_train_state(
    self,
    rng: jax.Array,
    tx: optax.GradientTransformation,
    checkpoint_path: Any = None,
    compile_init: Callable | None = None,
  ) -> TrainState:
    """Initialises the variables; restores the newest checkpoint in `checkpoint_path`.

    Args:
      rng: the key for variable initialisation.
      tx: the optimizer.
      checkpoint_path: a `make_checkpoint_saver` directory; its newest
        checkpoint replaces the fresh state when it exists.
      compile_init: wraps `model.init` (e.g. `jax.jit`).
    """
    return initialize_train_state(
      self.model.apply, self._initialize_vars(rng, compile_init), tx, checkpoint_path
    )


def initialize_train_state(
  apply_fn: Callable | None,
  init_model_vars: VarCollection,
  tx: optax.GradientTransformation,
  checkpoint_path: Any = None,
) -> TrainState:
  """A TrainState from `model.init` output, or the newest checkpoint in `checkpoint_path`."""
  state = TrainState.create(
    apply_fn=apply_fn,
    params=init_model_vars["params"],
    tx=tx,
    extra_vars={k: v for k, v in init_model_vars.items() if k != "params"},
  )
  return restore_checkpoint(checkpoint_path, state)
