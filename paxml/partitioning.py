"""Sharding as data: the device mesh, the logical-axis rules, and the shardings they give.

The experiment owns the mesh shape (Pax's `ICI_MESH_SHAPE` x `DCN_MESH_SHAPE`, axes
`replica, data, mdl`) and one rules table; layers only name logical axes on their weights and
activations (praxis/base_layer.py lists the names). The table is praxis.sharding's
`LOGICAL_AXIS_RULES`, Pax's `set_sharding_params_v1`: weights over `data` x `mdl` (FSDP x tensor
parallel), activations' batch over `data` x `replica` and their model dims over `mdl`.

  mesh = create_mesh(ici_mesh_shape=(1, 4, 2))
  partitioner = Partitioner(mesh)
  shardings = partitioner.state_shardings(jax.eval_shape(init_fn, rng))   # boxed -> unboxed
  batch_sharding = partitioner.batch_sharding()
  with partitioner.rules_context():      # trace jitted steps here: maybe_shard constraints apply
    ...

The batch is split over (data, replica), not Pax's (replica, data): both give the same blocks and
collectives, but XLA in jax 0.10.2 miscompiles Pax's order on a mesh with all three axes > 1
(praxis/sharding.py explains and tests it).
"""

from collections.abc import Sequence
import copy
import dataclasses
import math
from typing import Any

import jax

from paxml.data import host_to_device
from praxis import sharding

MESH_AXIS_NAMES = sharding.MESH_AXIS_NAMES
"""Pax's mesh axes: pure data-parallel replicas, data (batch + FSDP), model (tensor) parallel."""

BATCH_AXES = sharding.BATCH_AXES
"""The mesh axes an input batch's leading dimension is split over, major first."""

LOGICAL_AXIS_RULES = sharding.LOGICAL_AXIS_RULES
"""Logical name -> mesh axes (praxis.sharding.pax_v1_rules()); a name missing here is replicated."""

STAGE_AXIS = "stage"
"""The leading mesh axis of pipelined experiments, and the logical name of the stage dim."""


class MeshError(ValueError):
  """The requested mesh does not fit the devices (or the batch does not fit the mesh)."""


def axis_names(rank: int) -> tuple[str, ...]:
  """The mesh axes of a `rank`-entry mesh shape: Pax's 3, or 4 with a leading `stage` axis."""
  return (STAGE_AXIS,) + MESH_AXIS_NAMES if rank == len(MESH_AXIS_NAMES) + 1 else MESH_AXIS_NAMES


def mesh_axis_names(
  ici_mesh_shape: Sequence[int] | None, dcn_mesh_shape: Sequence[int] | None
) -> tuple[str, ...]:
  """The axes of the mesh these shapes declare (either may be None): `axis_names` of their rank."""
  return axis_names(len(ici_mesh_shape or dcn_mesh_shape or MESH_AXIS_NAMES))


def rules_for(names: Sequence[str]) -> tuple[tuple[str, Any], ...]:
  """The rules table for a mesh with these axes: the logical `stage` dim goes to `stage`."""
  if STAGE_AXIS in names:
    return ((STAGE_AXIS, STAGE_AXIS),) + LOGICAL_AXIS_RULES
  return LOGICAL_AXIS_RULES


def mesh_shapes(
  ici_mesh_shape: Sequence[int] | None,
  dcn_mesh_shape: Sequence[int] | None,
  num_devices: int,
  platform: str = "",
) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
  """(axis names, ICI shape, DCN shape) of an experiment's mesh on `num_devices` devices.

  The one reading of Pax's ICI_MESH_SHAPE x DCN_MESH_SHAPE: three sizes (`replica, data, mdl`)
  or four (a leading `stage` axis for pipelines); a None ICI shape puts every device on `data`
  (data parallelism, with the weights' model dims FSDP-sharded over `data` by the rules); a None
  DCN shape is one slice.

  Raises:
    MeshError: the shapes are malformed or their product is not `num_devices`.
  """
  names = mesh_axis_names(ici_mesh_shape, dcn_mesh_shape)
  dcn = tuple(int(d) for d in (dcn_mesh_shape or (1,) * len(names)))
  ici = tuple(int(d) for d in (ici_mesh_shape or (1, num_devices // math.prod(dcn), 1)))
  for name, shape in (("ICI_MESH_SHAPE", ici), ("DCN_MESH_SHAPE", dcn)):
    if len(shape) != len(names) or any(d < 1 for d in shape):
      raise MeshError(
        f"{name}={list(shape)} must have {len(names)} positive entries, one per mesh axis "
        f"{names} (or 4 with a leading stage axis for pipelines)"
      )
  needed = math.prod(ici) * math.prod(dcn)
  if needed != num_devices:
    raise MeshError(
      f"ICI_MESH_SHAPE={list(ici)} x DCN_MESH_SHAPE={list(dcn)} needs {needed} devices, but "
      f"{num_devices} {platform + ' ' if platform else ''}device(s) are available; change the shapes so that their product is "
      f"{num_devices} (for fake CPU devices set "
      "XLA_FLAGS=--xla_force_host_platform_device_count=N)"
    )
  return names, ici, dcn


def create_mesh(
  ici_mesh_shape: Sequence[int] | None = None,
  dcn_mesh_shape: Sequence[int] | None = None,
  devices: Sequence[jax.Device] | None = None,
) -> jax.sharding.Mesh:
  """Returns the `replica, data, mdl` (or `stage, replica, data, mdl`) mesh over `devices`
  (default: all of them), shaped as `mesh_shapes` reads the two shapes.

  Devices are laid out by praxis.sharding.make_mesh: in-slice (ICI) neighbours along each axis,
  slices (DCN: TPU slices, else processes, else blocks of fake devices) outermost.

  Raises:
    MeshError: the shapes are malformed or their product is not the device count.
  """
  devices = list(jax.devices() if devices is None else devices)
  names, ici, dcn = mesh_shapes(
    ici_mesh_shape, dcn_mesh_shape, len(devices), devices[0].platform if devices else ""
  )
  return sharding.make_mesh(ici, dcn, devices, axis_names=names)


@dataclasses.dataclass(frozen=True)
class Partitioner:
  """Shardings of train states and batches on one mesh under one rules table."""

  mesh: jax.sharding.Mesh
  rules: tuple[tuple[str, Any], ...] = LOGICAL_AXIS_RULES

  @property
  def num_batch_shards(self) -> int:
    """How many ways the batch is split: the product of the `BATCH_AXES` sizes."""
    return math.prod(self.mesh.shape[a] for a in BATCH_AXES)

  def state_shardings(self, abstract_tree: Any) -> Any:
    """Maps a (boxed) abstract tree to NamedShardings, with the boxes removed.

    `abstract_tree` is typically `jax.eval_shape(init_fn, rng)`; leaves boxed with logical names
    (weights, and the optimizer moments and EMA built from them) are sharded by the rules,
    other leaves (counters, Adafactor's factored statistics) are replicated. The result has the
    structure of `nn.unbox(abstract_tree)`.

    Raises:
      MeshError: a sharded dim does not divide over its mesh axes (the message names the
        array's path).
    """
    try:
      return sharding.logical_to_shardings(abstract_tree, self.mesh, self.rules)
    except ValueError as e:
      raise MeshError(
        f"{e} (mesh {dict(self.mesh.shape)}); change the model dims or the mesh shape"
      ) from None

  def replicated(self) -> jax.sharding.NamedSharding:
    return jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())

  def batch_sharding(self) -> jax.sharding.NamedSharding:
    """Leading (batch) dim over `BATCH_AXES`; other dims replicated (the rules' `batch`)."""
    return jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec(BATCH_AXES))

  def check_global_batch(self, global_batch_size: int) -> None:
    if global_batch_size % self.num_batch_shards:
      raise MeshError(
        f"the global batch of {global_batch_size} rows cannot be split over the "
        f"{self.num_batch_shards} batch shards of mesh {dict(self.mesh.shape)} "
        f"(replica x data); make the batch a multiple of {self.num_batch_shards}"
      )

  def global_batch(self, host_batch: Any) -> Any:
    """Makes this host's rows (numpy) part of one global, batch-sharded jax.Array per leaf."""
    return host_to_device.to_global(host_batch, self.batch_sharding())

  def preprocess_input_config(self, input_p: Any) -> Any:
    """Gives an input config this process's place among the infeed hosts (Pax's method).

    `num_infeed_hosts=0` becomes `jax.process_count()`; `infeed_host_index` becomes
    `jax.process_index()` unless the experiment set it. Without this every process would read
    the same rows. Returns a copy; `input_p` is not changed.
    """
    input_p = copy.deepcopy(input_p)
    accepted = input_p.__signature_info__.parameters  # An input may take only one of the two.
    if "num_infeed_hosts" in accepted and input_p.num_infeed_hosts == 0:
      input_p.num_infeed_hosts = jax.process_count()
    if "infeed_host_index" in accepted and "infeed_host_index" not in input_p.__arguments__:
      input_p.infeed_host_index = jax.process_index()
    return input_p

  def rules_context(self):
    """The mesh and rules under which the layers' `maybe_shard` constraints take effect.

    They are read while a function is traced and are not part of jit's cache key, so the first
    call of a jitted step must happen inside this context.
    """
    return sharding.activate(self.mesh, self.rules)


def for_experiment(experiment: Any, task: Any) -> Partitioner:
  """The experiment's own `partitioner()`, else a mesh from the task's mesh shapes."""
  custom = experiment.partitioner()
  if custom is not None:
    return custom
  mesh = create_mesh(task.ici_mesh_shape, task.dcn_mesh_shape)
  return Partitioner(mesh, rules_for(mesh.axis_names))


def filter_nestedmap(full_specs: Any, partial_specs: Any) -> Any:
  """`full_specs` cut down to the keys of `partial_specs` (Pax's helper).

  Dicts (NestedMap included) keep their own type and only the keys `partial_specs` has, recursively;
  lists are filtered element by element and must have the same length (a layer's list of
  children). Anything else, a PartitionSpec included (a tuple, hence not recursed into), is a leaf
  taken from `full_specs` whatever `partial_specs` holds there.
  """
  if isinstance(full_specs, dict):
    kept = type(full_specs)()
    for key in partial_specs.keys():
      kept[key] = filter_nestedmap(full_specs[key], partial_specs[key])
    return kept
  if isinstance(full_specs, list):
    if len(full_specs) != len(partial_specs):
      raise ValueError(
        f"filter_nestedmap: a list of {len(full_specs)} entries against one of "
        f"{len(partial_specs)}; both trees must list the same children ({full_specs=}, "
        f"{partial_specs=})"
      )
    return [filter_nestedmap(f, p) for f, p in zip(full_specs, partial_specs)]
  return full_specs
