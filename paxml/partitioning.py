"""Sharding as data: the device mesh, the logical-axis rules, and the shardings they give.

The experiment owns the mesh shape (Pax's `ICI_MESH_SHAPE` x `DCN_MESH_SHAPE`, axes
`replica, data, mdl`) and one rules table; layers only name logical axes on their weights and
activations (see praxis/transformer_lm.py). One function turns an abstract train state into
`NamedSharding`s: `jax.eval_shape` of the initialisation keeps the weights' logical names, the
rules map each name to mesh axes.

  mesh = create_mesh(ici_mesh_shape=(1, 4, 2))
  partitioner = Partitioner(mesh)
  shardings = partitioner.state_shardings(jax.eval_shape(init_fn, rng))
  batch_sharding = partitioner.batch_sharding()

Pax's rules (`set_sharding_params_v1`): weights are sharded over `data` x `mdl` (their model
dims over `data`, FSDP-style, and their hidden/head/vocab dims over `mdl`), activations' batch
over (`replica`, `data`) and their model dims over `mdl`; `replica` only replicates.
"""

from collections.abc import Sequence
import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
from jax.experimental import mesh_utils
import numpy as np

MESH_AXIS_NAMES = ("replica", "data", "mdl")
"""Pax's mesh axes: pure data-parallel replicas, data (batch + FSDP), model (tensor) parallel."""

BATCH_AXES = ("replica", "data")
"""The mesh axes an input batch's leading dimension is split over."""

# Logical name -> mesh axes. A name missing here is replicated. A local copy of Pax's v1 table
# until praxis/sharding.py provides the shared one; the names are praxis/transformer_lm.py's.
LOGICAL_AXIS_RULES: tuple[tuple[str, Any], ...] = (
    # Weights.
    ("vocab", "mdl"),
    ("embed", "data"),
    ("mlp", "mdl"),
    ("heads", "mdl"),
    ("kv", None),
    ("norm", None),
    ("position", None),
    # Activations.
    ("activation_batch", BATCH_AXES),
    ("activation_length", None),
    ("activation_embed", "mdl"),
    ("activation_mlp", "mdl"),
    ("activation_heads", "mdl"),
    ("activation_kv", None),
    ("activation_vocab", "mdl"),
)


class MeshError(ValueError):
  """The requested mesh does not fit the devices (or the batch does not fit the mesh)."""


def create_mesh(
    ici_mesh_shape: Sequence[int] | None = None,
    dcn_mesh_shape: Sequence[int] | None = None,
    devices: Sequence[jax.Device] | None = None,
) -> jax.sharding.Mesh:
  """Returns a `replica, data, mdl` mesh over `devices` (default: all of them).

  Args:
    ici_mesh_shape: the mesh within a slice (or host); None puts every device on `data`
      (data parallelism, with the weights' model dims FSDP-sharded over `data` by the rules).
    dcn_mesh_shape: how many slices (hosts) lie along each axis; None or all ones for one.
    devices: the devices to lay out; their number must be prod(ici) * prod(dcn).

  Raises:
    MeshError: the shapes are malformed or their product is not the device count.
  """
  devices = list(jax.devices() if devices is None else devices)
  dcn = tuple(dcn_mesh_shape or (1,) * len(MESH_AXIS_NAMES))
  ici = tuple(ici_mesh_shape or (1, len(devices) // math.prod(dcn), 1))
  for name, shape in (("ICI_MESH_SHAPE", ici), ("DCN_MESH_SHAPE", dcn)):
    if len(shape) != len(MESH_AXIS_NAMES) or any(int(d) < 1 for d in shape):
      raise MeshError(
          f"{name}={list(shape)} must have {len(MESH_AXIS_NAMES)} positive entries, one per "
          f"mesh axis {MESH_AXIS_NAMES}")
  needed = math.prod(ici) * math.prod(dcn)
  if needed != len(devices):
    raise MeshError(
        f"ICI_MESH_SHAPE={list(ici)} x DCN_MESH_SHAPE={list(dcn)} needs {needed} devices, but "
        f"{len(devices)} {devices[0].platform} device(s) are available; change the shapes so "
        f"that their product is {len(devices)} (for fake CPU devices set "
        "XLA_FLAGS=--xla_force_host_platform_device_count=N)")
  if math.prod(dcn) == 1:
    device_grid = mesh_utils.create_device_mesh(ici, devices)
  else:
    # Slices are TPU slices; on other platforms each process is one slice.
    device_grid = mesh_utils.create_hybrid_device_mesh(
        ici, dcn, devices, process_is_granule=devices[0].platform != "tpu")
  return jax.sharding.Mesh(device_grid, MESH_AXIS_NAMES)


@dataclasses.dataclass(frozen=True)
class Partitioner:
  """Shardings of train states and batches on one mesh under one rules table."""

  mesh: jax.sharding.Mesh
  rules: tuple[tuple[str, Any], ...] = LOGICAL_AXIS_RULES

  @property
  def num_batch_shards(self) -> int:
    """How many ways the batch is split: the product of the `BATCH_AXES` sizes."""
    return math.prod(self.mesh.shape[a] for a in BATCH_AXES)

  def logical_specs(self, abstract_tree: Any) -> Any:
    """The logical PartitionSpec of each leaf: its axis names if boxed, else replicated."""
    return nn.get_partition_spec(abstract_tree)

  def state_shardings(self, abstract_tree: Any) -> Any:
    """Maps a (boxed) abstract tree to NamedShardings, with the boxes removed.

    `abstract_tree` is typically `jax.eval_shape(init_fn, rng)`; leaves boxed with
    `nn.with_logical_partitioning` are sharded by the rules, other leaves (counters,
    optimizer step counts) are replicated. The result has the structure of
    `nn.unbox(abstract_tree)`.
    """
    specs = self.logical_specs(abstract_tree)
    shardings = nn.logical_to_mesh_sharding(specs, self.mesh, self.rules)
    # Divisibility is checked here, where the names are known, not deep inside XLA.
    flat_values, _ = jax.tree_util.tree_flatten_with_path(nn.unbox(abstract_tree))
    for (path, value), sharding in zip(flat_values, jax.tree.leaves(shardings)):
      for dim, axes in zip(value.shape, sharding.spec):
        ways = self._ways(axes)
        if dim % ways:
          raise MeshError(
              f"{jax.tree_util.keystr(path)} of shape {value.shape} cannot be split {ways} "
              f"ways over mesh axes {axes} (mesh {dict(self.mesh.shape)}); change the model "
              "dims or the mesh shape so that each sharded dim divides evenly")
    return shardings

  def replicated(self) -> jax.sharding.NamedSharding:
    return jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())

  def batch_sharding(self) -> jax.sharding.NamedSharding:
    """Leading (batch) dim over (`replica`, `data`); other dims replicated."""
    return jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec(BATCH_AXES))

  def check_global_batch(self, global_batch_size: int) -> None:
    if global_batch_size % self.num_batch_shards:
      raise MeshError(
          f"the global batch of {global_batch_size} rows cannot be split over the "
          f"{self.num_batch_shards} batch shards of mesh {dict(self.mesh.shape)} "
          f"(replica x data); make the batch a multiple of {self.num_batch_shards}")

  def global_batch(self, host_batch: Any) -> Any:
    """Makes this host's rows (numpy) part of one global, batch-sharded jax.Array per leaf."""
    sharding = self.batch_sharding()
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), host_batch)

  def rules_context(self):
    """The context under which `nn.with_logical_constraint` in layers takes effect."""
    return nn.logical_axis_rules(self.rules)

  def _ways(self, axes: Any) -> int:
    if axes is None:
      return 1
    if isinstance(axes, str):
      return self.mesh.shape[axes]
    return math.prod(self.mesh.shape[a] for a in axes)


def for_experiment(experiment: Any, task: Any) -> Partitioner:
  """The experiment's own `partitioner()`, else a mesh from the task's mesh shapes."""
  custom = experiment.partitioner()
  if custom is not None:
    return custom
  return Partitioner(create_mesh(task.ici_mesh_shape, task.dcn_mesh_shape))
