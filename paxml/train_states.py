"""The train state, its optimizer, and how it is initialised and sharded.

Shared by the train loop (trainer.py) and the eval/decode jobs (eval_lib.py), which restore the
same checkpoints.

`StateLayout` is the one place where an abstract train state (`jax.eval_shape` of the
initialisation, weights boxed with their logical axis names) becomes shardings.
"""

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax

from paxml import partitioning
from paxml import tasks_lib
from praxis import pytypes


class TrainState(flax.struct.PyTreeNode):
  """Everything a step reads and replaces; what a checkpoint stores."""

  step: jax.Array
  """int32 scalar: steps taken so far, skipped ones included (the data position follows it)."""
  params: Any
  opt_state: optax.OptState
  skipped_steps: jax.Array
  """int32 scalar: steps whose loss or gradient was NaN/Inf, so no update was applied."""


def make_optimizer(
    task: tasks_lib.TaskConfig,
) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """Returns (Adam, its learning-rate schedule). Clipping is the train step's (it reports both
  the raw and the clipped gradient norm)."""
  schedule = optax.constant_schedule(task.learning_rate)
  if task.warmup_steps:
    schedule = optax.join_schedules(
        [optax.linear_schedule(0.0, task.learning_rate, task.warmup_steps), schedule],
        boundaries=[task.warmup_steps],
    )
  return optax.adam(schedule), schedule


def sample_batch(spec: Any) -> Any:
  """Zeros shaped like one row of `spec` (a batch or its ShapeDtypeStructs), for `init`."""
  return jax.tree.map(lambda x: jnp.zeros((1,) + tuple(x.shape[1:]), x.dtype), spec)


def init_state(model: nn.Module, optimizer: optax.GradientTransformation, rng: jax.Array,
               batch_spec: Any) -> TrainState:
  """The step-0 state, weights still boxed with their logical axes (`nn.unbox` removes them).

  Adam's moments are built from the boxed weights, so they carry the same axis names and are
  sharded like the weights they follow.
  """
  params = model.init(rng, pytypes.NestedMap(sample_batch(batch_spec)))["params"]
  return TrainState(
      step=jnp.zeros((), jnp.int32),
      params=params,
      opt_state=optimizer.init(params),
      skipped_steps=jnp.zeros((), jnp.int32),
  )


@dataclasses.dataclass(frozen=True)
class StateLayout:
  """The abstract train state of one model on one mesh, and its shardings."""

  boxed: TrainState
  """`jax.eval_shape` of `init_state`: ShapeDtypeStructs, weights boxed with logical names."""
  shardings: TrainState
  """A NamedSharding per leaf of the unboxed state."""
  init_fn: Any
  """rng -> unboxed step-0 state (not jitted)."""

  @property
  def abstract(self) -> TrainState:
    """ShapeDtypeStructs with their shardings: the target for a checkpoint restore."""
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        nn.unbox(self.boxed), self.shardings)

  def initialize(self, rng: jax.Array) -> TrainState:
    """A fresh state, created directly in its shards (never whole on one device)."""
    return jax.jit(self.init_fn, out_shardings=self.shardings)(rng)


def state_layout(task: tasks_lib.TaskConfig, optimizer: optax.GradientTransformation,
                 partitioner: partitioning.Partitioner, batch_spec: Any,
                 rng: jax.Array) -> StateLayout:
  boxed_init = functools.partial(init_state, task.model, optimizer, batch_spec=batch_spec)
  boxed = jax.eval_shape(boxed_init, rng)
  return StateLayout(
      boxed=boxed,
      shardings=partitioner.state_shardings(boxed),
      init_fn=lambda r: nn.unbox(boxed_init(r)),
  )
