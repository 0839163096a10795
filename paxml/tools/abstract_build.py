"""An experiment built abstractly: its task, input shapes and `jax.eval_shape` of the train state.

Nothing is allocated and no device count is needed, so a 1T-parameter configuration builds on a
laptop in seconds. The tools (model_analysis, validate_config) and tests/experiments_test.py use
this one function:

  built = abstract_build.build(experiment)
  built.num_params                       # from the abstract weights
  built.state_bytes_per_device()         # weights + optimizer state, sharded by the rules
  built.flops_per_step()                 # 6 N + 12 L H Q T per token, times tokens per step

The input's shapes come from the training dataset's config (`batch_size`, `seq_len`), not from
building it, so experiments that read files (c4) build abstractly without their data.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import fiddle as fdl
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from paxml import base_experiment
from paxml import partitioning
from paxml import progress
from paxml import tasks_lib
from paxml import train_states
from paxml import trainer
from praxis import pytypes

# The LM batch: name -> dtype; every field is [B, T].
LM_BATCH_DTYPES = {
  "ids": jnp.int32,
  "labels": jnp.int32,
  "paddings": jnp.float32,
  "weights": jnp.float32,
  "segment_ids": jnp.int32,
  "segment_pos": jnp.int32,
}


def batch_spec(experiment: base_experiment.BaseExperiment) -> pytypes.NestedMap:
  """ShapeDtypeStructs of one global training batch, from the train dataset's config.

  The global batch is the config's per-host `batch_size` times its `num_infeed_hosts` (1 when
  the config has none), except for an experiment that declares PERCORE_BATCH_SIZE and a mesh:
  then it is the batch of that mesh, PERCORE_BATCH_SIZE x its devices (a pipelined experiment
  must split it into its microbatches, whatever machine builds it).
  """
  config = experiment.train_dataset()
  # Pax's inputs: a LingvoInputAdaptor's sizes are its wrapped `input`'s; SeqIOInput's length
  # is its task_feature_lengths' 'targets'.
  inner = getattr(config, "input", None)
  sized = inner if isinstance(inner, fdl.Buildable) else config
  seq_len = getattr(sized, "seq_len", None)
  if seq_len is None:
    seq_len = (getattr(sized, "task_feature_lengths", None) or {}).get("targets")
  missing = [f for f, v in (("batch_size", sized.batch_size), ("seq_len", seq_len)) if v is None]
  if missing:
    raise ValueError(
      f"{type(experiment).__name__}: the training dataset config "
      f"({getattr(config.__fn_or_cls__, '__name__', config)}) does not set {missing}; the "
      "abstract build reads the batch shape from these fields"
    )
  rows = sized.batch_size * (getattr(config, "num_infeed_hosts", None) or 1)
  percore = getattr(experiment, "PERCORE_BATCH_SIZE", None)
  ici = getattr(experiment, "ICI_MESH_SHAPE", None)
  if percore is not None and ici is not None:
    dcn = getattr(experiment, "DCN_MESH_SHAPE", None) or ()
    rows = round(percore * math.prod(ici) * math.prod(dcn))
  shape = (rows, seq_len)
  return pytypes.NestedMap(
    {k: jax.ShapeDtypeStruct(shape, dtype) for k, dtype in LM_BATCH_DTYPES.items()}
  )


def mesh_shape(task: tasks_lib.TaskConfig, num_devices: int | None = None) -> dict[str, int]:
  """Axis name -> size of the task's ICI x DCN mesh (None ICI: `num_devices` on `data`)."""
  if task.ici_mesh_shape is not None:  # The declared mesh, whatever this machine has.
    num_devices = math.prod(task.ici_mesh_shape) * math.prod(task.dcn_mesh_shape or ())
  names, ici, dcn = partitioning.mesh_shapes(
    task.ici_mesh_shape, task.dcn_mesh_shape, num_devices or jax.device_count()
  )
  return {name: i * d for name, i, d in zip(names, ici, dcn)}


@dataclasses.dataclass(frozen=True)
class Built:
  """An experiment's task and abstract train state."""

  experiment: base_experiment.BaseExperiment
  task: tasks_lib.TaskConfig
  batch: pytypes.NestedMap
  """ShapeDtypeStructs of one global batch."""
  boxed_state: train_states.TrainState
  """`jax.eval_shape` of the initialisation; weights boxed with their logical axes."""
  optimizer: train_states.Optimizer
  learning_rate_fn: Any
  """Update count -> learning rate."""

  @property
  def num_params(self) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nn.unbox(self.boxed_state.params)))

  @property
  def tokens_per_step(self) -> int:
    return int(np.prod(self.batch.ids.shape))

  def rules(self) -> Any:
    """The logical-axis rules the experiment's partitioner uses (the default table if it
    declares none; building its partitioner would need its devices)."""
    names = partitioning.mesh_axis_names(self.task.ici_mesh_shape, self.task.dcn_mesh_shape)
    return getattr(self.experiment, "SHARDING_RULES", partitioning.rules_for(names))

  def state_bytes_per_device(self, num_devices: int | None = None) -> dict[str, float]:
    """Bytes per device of the weights and of the optimizer state, each leaf divided by the
    number of shards the rules give it on the declared mesh (counters are replicated)."""
    mesh = mesh_shape(self.task, num_devices)
    rules = self.rules()

    def per_device(tree: Any) -> float:
      specs = nn.get_partition_spec(tree)
      total = 0.0
      for value, spec in zip(
        jax.tree.leaves(nn.unbox(tree)),
        jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec)),
      ):
        ways = 1
        for axes in nn.logical_to_mesh_axes(tuple(spec), rules):
          for axis in (axes,) if isinstance(axes, str) else (axes or ()):
            ways *= mesh[axis]
        total += np.prod(value.shape) * jnp.dtype(value.dtype).itemsize / ways
      return total

    return {
      "params": per_device(self.boxed_state.params),
      "opt_state": per_device(self.boxed_state.opt_state),
    }

  def flops_per_step(self) -> float:
    """Model FLOPs of one train step, progress.py's 6 N + 12 L H Q T per token (remat not
    counted). A learned position table (a lookup) is excluded from N."""
    dims = tasks_lib.transformer_dims(self.task.model)
    if dims is None and hasattr(self.experiment, "NUM_LAYERS"):
      from paxml.tasks.lm import model_params  # pylint: disable=g-import-not-at-top

      dims = (
        self.experiment.NUM_LAYERS,
        model_params.num_heads(self.experiment),
        model_params.dims_per_head(self.experiment),
      )
    seq_len = self.batch.ids.shape[1]
    return (
      progress.model_flops_per_token(self.boxed_state.params, dims, seq_len) * self.tokens_per_step
    )


def build(experiment: base_experiment.BaseExperiment, seed: int = 0) -> Built:
  """Builds `experiment`'s task and abstract train state (see the module docstring).

  An experiment that reads files from `DATA_DIR` builds without them: its input configs are
  read for their shapes only, never built.
  """
  if hasattr(experiment, "DATA_DIR") and not experiment.DATA_DIR:
    experiment.DATA_DIR = "<DATA_DIR: not read by an abstract build>"
  task = tasks_lib.to_task_config(experiment.task())
  batch = batch_spec(experiment)
  optimizer, learning_rate_fn = train_states.make_optimizer(task)
  boxed = jax.eval_shape(
    functools.partial(train_states.init_state, task.model, optimizer, batch_spec=batch),
    jax.random.PRNGKey(seed),
  )
  return Built(
    experiment=experiment,
    task=task,
    batch=batch,
    boxed_state=boxed,
    optimizer=optimizer,
    learning_rate_fn=learning_rate_fn,
  )


def abstract_train_state(built: Built, partitioner: partitioning.Partitioner) -> Any:
  """The unboxed abstract train state: ShapeDtypeStructs with the trainer's shardings."""
  return jax.tree.map(
    lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
    nn.unbox(built.boxed_state),
    partitioner.state_shardings(built.boxed_state),
  )


def compile_train_step(
  built: Built, partitioner: partitioning.Partitioner | None = None
) -> tuple[Any, partitioning.Partitioner]:
  """Compiles the experiment's train step ahead of time for its declared mesh.

  `jax.jit(train_step, shardings).lower(abstract state, batch).compile()` with the trainer's
  shardings and microbatches, so a sharding rule, mesh or shape error shows up without the
  accelerators and without allocating the weights. Needs the mesh's number of devices (fake CPU
  devices do: XLA_FLAGS=--xla_force_host_platform_device_count=N); `partitioner` places the mesh
  on chosen devices (default: the experiment's, on all devices). Returns (compiled,
  partitioner).
  """
  if partitioner is None:
    partitioner = partitioning.for_experiment(built.experiment, built.task)
  state_shardings = partitioner.state_shardings(built.boxed_state)
  step = jax.jit(
    functools.partial(
      trainer.train_step,
      model=built.task.model,
      optimizer=built.optimizer,
      num_microbatches=built.task.num_microbatches,
    ),
    in_shardings=(state_shardings, partitioner.batch_sharding(), partitioner.replicated()),
    out_shardings=(state_shardings, partitioner.replicated()),
    donate_argnums=0,
  )
  # Outside the rules context: unboxing there would apply the weights' sharding constraints to
  # the ShapeDtypeStructs themselves.
  abstract_state = abstract_train_state(built, partitioner)
  # As in the trainer: the layers' sharding constraints apply while the step is traced.
  with partitioner.rules_context():
    compiled = step.lower(abstract_state, built.batch, jax.random.PRNGKey(0)).compile()
  return compiled, partitioner
