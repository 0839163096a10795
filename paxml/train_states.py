"""The train state, its optimizer, and how it is initialised and sharded.

Shared by the train loop (trainer.py) and the eval/decode jobs (eval_lib.py), which restore the
same checkpoints.

`StateLayout` is the one place where an abstract train state (`jax.eval_shape` of the
initialisation, weights boxed with their logical axis names) becomes shardings. The optimizer
state is initialised from the *boxed* weights, so Adam's moments and the parameter EMA keep
their weights' logical names and are sharded like them (praxis.sharding.logical_to_shardings).
"""

import dataclasses
import functools
from typing import Any, Callable

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax

from paxml import partitioning
from praxis import base_layer
from praxis import optimizers
from praxis import pytypes
from praxis import trees


SKIPPED_STEPS = "skipped_steps"
"""`extra_state[SKIPPED_STEPS]`: int32 scalar, steps whose loss or gradient was NaN/Inf (so no
update was applied)."""


class TrainState(flax.struct.PyTreeNode):
  """Pax's train state: everything a step reads and replaces; what a checkpoint stores.

  `mdl_vars` is the model's variable collections (`{"params": ...}`), `opt_states` one optimizer
  state per learner (one learner here: a one-element list), `extra_state` anything else the
  trainer carries (here `{SKIPPED_STEPS: count}`; Pax's default is an empty tuple).
  """

  step: Any
  """int32 scalar: steps taken so far, skipped ones included (the data position follows it)."""
  mdl_vars: Any
  opt_states: list[Any]
  extra_state: Any = ()

  def new_state(self, mdl_vars: Any, opt_states: list[Any], extra_state: Any = ()) -> "TrainState":
    """The next step's state: `step + 1` and the given parts (copied, so the caller may donate
    its buffers)."""
    return TrainState(
      step=self.step + 1,
      mdl_vars=trees.copy(mdl_vars),
      opt_states=trees.copy(opt_states),
      extra_state=trees.copy(extra_state),
    )

  def to_eval_state(self) -> "TrainState":
    """The same step and weights without optimizer or extra state (what eval programs need)."""
    return TrainState(step=self.step, mdl_vars=self.mdl_vars, opt_states=[], extra_state=())


def make_train_state(step: Any, params: Any, opt_state: Any, skipped_steps: Any) -> TrainState:
  """The trainer's state in Pax's fields from its parts (one learner)."""
  return TrainState(
    step=step,
    mdl_vars={"params": params},
    opt_states=[opt_state],
    extra_state={SKIPPED_STEPS: skipped_steps},
  )


@dataclasses.dataclass(frozen=True)
class Optimizer:
  """A praxis optimizer config built once: its optax transformation and what summaries need.

  `init` / `update` are the transformation's (so this can stand in for it); `update` always
  takes the parameters (weight decay, EMA and update capping read them).
  """

  config: Any
  """The praxis optimizer config (praxis.optimizers)."""
  tx: optax.GradientTransformation
  """clip -> scale (Adam, ...) -> weight decay -> learning rate -> EMA; see praxis.optimizers."""
  clip_gradient_norm_to_value: float
  """The global-norm clip inside `tx` (0: none); the step reports the clipped norm with it."""

  def init(self, params: Any) -> optax.OptState:
    return self.tx.init(params)

  def update(self, grads: Any, state: optax.OptState, params: Any) -> tuple[Any, Any]:
    return self.tx.update(grads, state, params)

  def learning_rate(self, opt_state: optax.OptState) -> jax.Array:
    """The learning rate of the next update (base rate x schedule at the update count)."""
    return optimizers.current_learning_rate(self.config, opt_state)


def make_optimizer(
  task: Any,
  params: Any = None,  # task: a tasks_lib.TaskConfig
) -> tuple[Optimizer, Callable[[Any], jax.Array]]:
  """Returns (the task's optimizer, its learning rate as a function of the update count).

  `params` (optional, e.g. the abstract weights) lets the builder log which weights the
  weight-decay exclusion pattern matches.
  """
  config = task.optimizer_config()
  tx = optimizers.build(config, params)
  # A Fiddle config reads an unset field as its default, as the built optimizer does.
  clip = float(config.clip_gradient_norm_to_value or 0.0)
  return Optimizer(config, tx, clip), optimizers.learning_rate_fn(config)


def sample_batch(spec: Any) -> Any:
  """Zeros shaped like one row of `spec` (a batch or its ShapeDtypeStructs), for `init`."""
  return jax.tree.map(lambda x: jnp.zeros((1,) + tuple(x.shape[1:]), x.dtype), spec)


def init_state(
  model: nn.Module,
  optimizer: Optimizer | optax.GradientTransformation,
  rng: jax.Array,
  batch_spec: Any,
) -> TrainState:
  """The step-0 state, weights still boxed with their logical axes (`nn.unbox` removes them).

  The optimizer state is built from the boxed weights, so Adam's moments (and an EMA) carry the
  same axis names and are sharded like the weights they follow.
  """
  # init_boxed, not init: Pax's `init` returns plain arrays; the boxes carry the sharding names.
  params = base_layer.init_boxed(model, rng, pytypes.NestedMap(sample_batch(batch_spec)))["params"]
  return make_train_state(
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
      nn.unbox(self.boxed),
      self.shardings,
    )

  def initialize(self, rng: jax.Array) -> TrainState:
    """A fresh state, created directly in its shards (never whole on one device)."""
    return jax.jit(self.init_fn, out_shardings=self.shardings)(rng)


def state_layout(
  task: Any,  # a tasks_lib.TaskConfig
  optimizer: Optimizer | optax.GradientTransformation,
  partitioner: partitioning.Partitioner,
  batch_spec: Any,
  rng: jax.Array,
) -> StateLayout:
  boxed_init = functools.partial(init_state, task.model, optimizer, batch_spec=batch_spec)
  boxed = jax.eval_shape(boxed_init, rng)
  return StateLayout(
    boxed=boxed,
    shardings=partitioner.state_shardings(boxed),
    init_fn=lambda r: nn.unbox(boxed_init(r)),
  )


@dataclasses.dataclass
class TrainStateProvenance:
  """Where each part of a train state came from (Pax's fields): "random_init", or the
  checkpoint a warm start read it from."""

  checkpoints: dict[str, Any] = dataclasses.field(default_factory=dict)
  mdl_vars: Any = None
  opt_states: Any = None


def build_train_state_provenance(train_state: TrainState, checkpoint_path: str | None = None):
  """Every variable and optimizer-state array of `train_state` marked as coming from
  `checkpoint_path` (None: "random_init")."""
  source = "random_init" if checkpoint_path is None else str(checkpoint_path)

  def mark(tree):
    return jax.tree.map(lambda _: source, tree)

  return TrainStateProvenance(
    checkpoints={} if checkpoint_path is None else {source: None},
    mdl_vars=mark(train_state.mdl_vars),
    opt_states=mark(train_state.opt_states),
  )
