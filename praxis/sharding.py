"""Sharding as data: the device mesh, and the table mapping logical axis names to mesh axes.

Layers never name mesh axes. Every weight (`BaseLayer.create_variable`) and large activation
(`BaseLayer.maybe_shard`) carries *logical* axis names (listed in praxis/base_layer.py); the
experiment owns the mesh (`ici_mesh_shape` x `dcn_mesh_shape`, axes `replica, data, mdl` as in
Pax) and one rules table. This module provides both and the glue:

    mesh = sharding.make_mesh((1, 4, 2))
    rules = sharding.LOGICAL_AXIS_RULES
    abstract = jax.eval_shape(model.init, rng, batch)          # boxed: nn.LogicallyPartitioned
    param_shardings = sharding.logical_to_shardings(abstract, mesh, rules)
    with sharding.activate(mesh, rules):                       # maybe_shard constraints apply
      out = jax.jit(step, in_shardings=..., out_shardings=...)(...)

The table (`pax_v1_rules`) reproduces Pax's `TransformerLm.set_sharding_params_v1`:

    weights                        Pax mapping            logical axes -> mesh axes
    ffn0 w[d, f], ffn1 w[f, d]     w_df = [data, mdl]     embed -> data, mlp -> mdl
    q/k/v/post w[d, n, h]          w_dnh = [data, mdl, -] heads -> mdl, kv -> None
    embedding w[v, d]              w_vd = [mdl, data]     vocab -> mdl
    stacked (scan) leading axis    (repeat prefix: -)     layers -> None
  activations
    [b, l, d]                      a_bld = [batch, -, mdl]  (training optimised)
    [b, l, f]                      a_blf = [batch, -, mdl]
    [b, l, n, h]                   a_blnh = [batch, -, mdl, -]
    [b, l, v]                      a_blv = [batch, -, mdl]
  batch -> (data, replica): the batch is split over replica x data (Pax: (replica, data))

so weights are sharded over data x mdl (FSDP x tensor parallel) and replicated over `replica`,
and the batch is split over the replica x data devices.

Why (data, replica) and not Pax's (replica, data). Both split the batch into the same
replica x data blocks and need the same collectives; they differ only in which device holds which
block (block index d * R + r instead of r * D + d). With Pax's order, XLA's SPMD partitioner in
jax/jaxlib 0.10.2 miscompiles the down projections when all three mesh axes are > 1 (mesh
(2, 2, 2)): `einsum("btf,fd->btd", h, w)` with h on [(replica, data), -, mdl], w on [mdl, data]
and the output on [(replica, data), -, mdl] swaps the batch blocks of devices (r0, d1) and
(r1, d0) (a stray collective-permute), both with Shardy and with GSPMD propagation; the attention
output projection ("btnh,dnh->btd") likewise. With (data, replica), a two-layer transformer's
loss and gradients matched one device on all eight 3-axis shapes of 8 devices we tried by hand
((2,2,2), (1,4,2), (2,4,1), (2,1,4), (1,8,1), (1,2,4), (4,2,1), (4,1,2)); sharding_test (which
fails with Pax's order on (2, 2, 2)) and sharding_transformer_test keep (1,8,1), (1,4,2) and
(2,2,2) checked. `pax_v1_rules(batch_axes=("replica", "data"))` gives Pax's exact order; use it
where the compiler is known to be fixed. `BATCH_AXES` is also what `batch_sharding` uses, so
inputs and activations always agree.

One name, two placements. `embed` must go to `data` on weights (Pax's w_df) but to `mdl` on
activations (Pax's a_bld with TRAINING_OPTIMIZED_SHARDING, the lm_cloud default). Flax's rules
are an ordered list in which a logical name may appear more than once: for each rule, in order,
the dim with that name takes the rule's mesh axes if that dim is still unassigned and no other dim
of the same array already uses those mesh axes. The table therefore lists `batch ->
(data, replica)` first, then `embed -> data`, and last `embed -> mdl` as a fallback. An activation
always has a batch dim, which takes `data` first, so its `embed` dim falls through to `mdl`; a
weight has no batch dim, so its `embed` dim takes `data` and the fallback never applies. Layers
thus use the same names for weights and activations (no separate `act_embed`). Consequences
to know:
  * The order of the table matters; keep `batch` first and the `embed -> mdl` fallback last.
  * An activation *without* a batch dim (e.g. a [1, T, D] position embedding) has its embed dim
    on `data`, like a weight. Annotate such tensors with None, or leave them unannotated.
  * One-dim weights over `embed` (LayerNorm scale/bias) are sharded over `data`; Pax leaves them
    replicated. They are tiny, so all-gathering them costs little; we keep one rule.
`pax_v1_rules(training_optimized=False)` drops the fallback: activation embed dims are then
replicated (Pax's a_bld = [batch, -, -], the decode-friendly setting).

Other names: `length`, `kv`, `layers`, `classes` are never sharded. `kv_heads` (grouped-query /
multi-query K/V heads) is replicated because multi-query attention has one K/V head, which cannot
be split over `mdl` (jit rejects a dim of size 1 split 2 ways); the K/V projections are small.

Flax rejects an array whose logical axes repeat a name (e.g. attention probabilities
[batch, heads, length, length]): annotate the second one None.

The rules apply while tracing: `maybe_shard` reads them (and the mesh) from the context that
`activate` opens, so trace (first call) the jitted function inside `with activate(...)`.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Sequence

import flax.linen as nn
import jax
from jax.experimental import mesh_utils
import numpy as np

PartitionSpec = jax.sharding.PartitionSpec
NamedSharding = jax.sharding.NamedSharding
LogicalRules = tuple[tuple[str, str | tuple[str, ...] | None], ...]

# Pax's mesh axes, outermost (slowest links) first.
MESH_AXIS_NAMES: tuple[str, ...] = ("replica", "data", "mdl")
# The mesh axes a global batch is split over (Pax's inputs_split_mapping, in the order that XLA
# 0.10.2 compiles correctly: see the module docstring).
BATCH_AXES: tuple[str, ...] = ("data", "replica")


def pax_v1_rules(
  training_optimized: bool = True, batch_axes: tuple[str, ...] = BATCH_AXES
) -> LogicalRules:
  """The logical-axis rules reproducing Pax's `set_sharding_params_v1` (see module docstring).

  Args:
    training_optimized: Pax's TRAINING_OPTIMIZED_SHARDING (True for lm_cloud): activations'
      `embed` dim goes to `mdl`. False replicates it.
    batch_axes: the mesh axes of the batch dim, major first. Must contain `data` (the fallback
      of `embed` relies on it).
  """
  if "data" not in batch_axes:
    raise ValueError(
      f"batch_axes {batch_axes} must include 'data': activations' embed dim "
      "reaches `mdl` only because the batch dim already holds `data`."
    )
  rules: list[tuple[str, Any]] = [
    # First, so that an activation's batch dim claims `data` before its embed dim can.
    ("batch", tuple(batch_axes)),
    ("length", None),
    ("embed", "data"),
    ("mlp", "mdl"),
    ("heads", "mdl"),
    ("kv", None),
    ("vocab", "mdl"),
    ("layers", None),
    ("kv_heads", None),
    ("classes", None),
  ]
  if training_optimized:
    # Last: only reached by an embed dim whose array already uses `data` (an activation).
    rules.append(("embed", "mdl"))
  return tuple(rules)


LOGICAL_AXIS_RULES: LogicalRules = pax_v1_rules()


def make_mesh(
  ici_mesh_shape: Sequence[int],
  dcn_mesh_shape: Sequence[int] | None = None,
  devices: Sequence[Any] | None = None,
  axis_names: Sequence[str] = MESH_AXIS_NAMES,
) -> jax.sharding.Mesh:
  """Builds the device mesh `ici_mesh_shape` x `dcn_mesh_shape` (elementwise) over `axis_names`.

  ICI is the fast in-slice network, DCN the slower one between slices (Pax's ICI_MESH_SHAPE and
  DCN_MESH_SHAPE). Every device is used exactly once. The DCN granules are the TPU slices when
  the devices' `slice_index` values give one per granule; else (CPU and GPU devices all report
  slice 0) the processes when there is one per granule; else (fake devices in one process)
  consecutive blocks of the device list, so multi-slice meshes can be tested on CPU.
  """
  devices = list(jax.devices() if devices is None else devices)
  ici = tuple(int(d) for d in ici_mesh_shape)
  dcn = (1,) * len(ici) if dcn_mesh_shape is None else tuple(int(d) for d in dcn_mesh_shape)
  axis_names = tuple(axis_names)
  if len(ici) != len(axis_names) or len(dcn) != len(axis_names):
    raise ValueError(
      f"ici_mesh_shape {ici} and dcn_mesh_shape {dcn} must each have one entry per mesh axis "
      f"{axis_names}; give {len(axis_names)} sizes each (e.g. ici_mesh_shape=[1, 4, 1])."
    )
  if any(d < 1 for d in ici + dcn):
    raise ValueError(f"Mesh sizes must be >= 1; got ici_mesh_shape {ici}, dcn_mesh_shape {dcn}.")
  needed = math.prod(ici) * math.prod(dcn)
  if needed != len(devices):
    raise ValueError(
      f"ici_mesh_shape {ici} x dcn_mesh_shape {dcn} needs {math.prod(ici)} x {math.prod(dcn)} = "
      f"{needed} devices, but {len(devices)} are available "
      f"({devices[0].platform if devices else 'none'}). Choose shapes whose product of all "
      f"entries is {len(devices)} (on CPU, XLA_FLAGS=--xla_force_host_platform_device_count="
      f"{needed} fakes that many devices)."
    )
  num_slices = len({getattr(d, "slice_index", None) for d in devices})
  if math.prod(dcn) == 1:
    grid = mesh_utils.create_device_mesh(ici, devices)
  elif num_slices == math.prod(dcn):
    grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices)
  elif len({d.process_index for d in devices}) == math.prod(dcn):
    # CPU and GPU devices report slice_index 0 for all (jax 0.10): processes are the granules.
    grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices, process_is_granule=True)
  else:
    grid = _blocked_hybrid_grid(ici, dcn, devices)
  return jax.sharding.Mesh(grid, axis_names)


def device_list_mesh(devices: Sequence[Any], axis_name: str = "devices") -> jax.sharding.Mesh:
  """A 1-D mesh of `devices` in the order given (pmap's order; make_mesh reorders by topology).

  The mesh of per-device stacks: an array [len(devices), ...] sharded over it has slice i on
  devices[i], the layout `jax.pmap` over `devices` expects of its inputs.
  """
  return jax.sharding.Mesh(np.asarray(list(devices)), (axis_name,))


def stacked_sharding(devices: Sequence[Any], axis_name: str = "devices") -> NamedSharding:
  """Sharding of [len(devices), ...] arrays: slice i on devices[i] (device_list_mesh)."""
  return NamedSharding(device_list_mesh(devices, axis_name), PartitionSpec(axis_name))


def put_stacked(stacked: Any, devices: Sequence[Any]) -> Any:
  """Each leaf [len(devices), ...] as one jax.Array with slice i on devices[i]: what
  `jax.device_put_sharded(list(stacked), devices)` made before JAX removed it (the pmap faces:
  bobbin's per-device RNG keys, JAXline's batches and broadcast values)."""
  placement = stacked_sharding(devices)
  return jax.tree.map(lambda x: jax.device_put(x, placement), stacked)


def _blocked_hybrid_grid(
  ici: tuple[int, ...], dcn: tuple[int, ...], devices: list[Any]
) -> np.ndarray:
  """Consecutive blocks of prod(ici) devices are the DCN granules, laid out like Pax's mesh."""
  n = len(ici)
  grid = np.empty(len(devices), dtype=object)
  grid[:] = devices
  grid = grid.reshape(dcn + ici)  # [granule dims..., in-granule dims...]
  # Interleave (dcn_0, ici_0, dcn_1, ici_1, ...) so each mesh axis is granule-major.
  order = [axis for i in range(n) for axis in (i, n + i)]
  return grid.transpose(order).reshape(tuple(d * i for d, i in zip(dcn, ici)))


def logical_to_mesh_spec(
  logical_axes: Sequence[str | None] | PartitionSpec, rules: LogicalRules = LOGICAL_AXIS_RULES
) -> PartitionSpec:
  """The mesh PartitionSpec for one array with these logical axes (names not in rules: None)."""
  return nn.logical_to_mesh_axes(tuple(logical_axes), rules)


def _is_annotation(x: Any) -> bool:
  return isinstance(x, (nn.Partitioned, PartitionSpec))


def logical_to_shardings(
  tree: Any, mesh: jax.sharding.Mesh, rules: LogicalRules = LOGICAL_AXIS_RULES
) -> Any:
  """NamedShardings for a tree of annotated values, e.g. `jax.eval_shape(model.init, ...)`.

  Leaves may be
    * `nn.LogicallyPartitioned` boxes (what `create_variable` / `nn.with_logical_partitioning`
      make): sharded by their logical names through `rules`; the box is removed, so the result
      matches the *unboxed* tree (`nn.unbox(variables)`), which is what jit is given;
    * `nn.Partitioned` boxes (mesh axis names already): used as they are;
    * a box whose value's rank differs from its names (an optimizer statistic such as
      Adafactor's factored second moment, which inherits its parameter's box): replicated;
    * `PartitionSpec`s of logical names: converted through `rules`;
    * anything else with a shape (arrays, ShapeDtypeStruct, optimizer counters): replicated;
    * None: stays None.
  Optimizer states built by `optax` `init` on the *boxed* parameters keep the boxes (they are
  pytree nodes), so one call on `jax.eval_shape` of the whole train state shards the moments
  like their parameters.

  Raises:
    ValueError: when a sharded dim's size is not a multiple of its mesh axes' device count,
      naming the array's path (jit would otherwise fail later with no path).
  """

  def convert(path, leaf):
    if isinstance(leaf, nn.Partitioned) and _rank(leaf.value) != len(leaf.names):
      # An optimizer statistic of another rank than its parameter (Adafactor's factored rows /
      # columns) inherits the parameter's box but not its layout: replicate it (it is small).
      spec, value = PartitionSpec(), leaf.value
    elif isinstance(leaf, nn.LogicallyPartitioned):
      spec = logical_to_mesh_spec(leaf.names, rules)
      value = leaf.value
    elif isinstance(leaf, nn.Partitioned):
      spec, value = PartitionSpec(*leaf.names), leaf.value
    elif isinstance(leaf, PartitionSpec):
      return NamedSharding(mesh, logical_to_mesh_spec(leaf, rules))
    elif hasattr(leaf, "shape"):
      spec, value = PartitionSpec(), leaf
    else:
      return leaf  # None or a non-array leaf: nothing to place.
    _check_divisible(jax.tree_util.keystr(path), getattr(value, "shape", None), spec, mesh)
    return NamedSharding(mesh, spec)

  return jax.tree_util.tree_map_with_path(convert, tree, is_leaf=_is_annotation)


def _rank(value: Any) -> int | None:
  shape = getattr(value, "shape", None)
  return None if shape is None else len(shape)


def _check_divisible(
  path: str, shape: Sequence[int] | None, spec: PartitionSpec, mesh: jax.sharding.Mesh
) -> None:
  if shape is None:
    return
  if len(spec) > len(shape):
    raise ValueError(f"{path}: sharding {spec} has more entries than the array's shape {shape}.")
  for dim, axes in enumerate(spec):
    if axes is None:
      continue
    axes = (axes,) if isinstance(axes, str) else tuple(axes)
    ways = math.prod(mesh.shape[a] for a in axes)
    if shape[dim] % ways:
      raise ValueError(
        f"{path}: dim {dim} of shape {tuple(shape)} has size {shape[dim]}, which the mesh axes "
        f"{axes} ({ways} devices, mesh {dict(mesh.shape)}) cannot split evenly. Make that size a "
        f"multiple of {ways}, or map its logical name to None in the rules."
      )


def batch_sharding(mesh: jax.sharding.Mesh, ndim: int) -> NamedSharding:
  """Sharding of an input array of rank `ndim`: dim 0 over BATCH_AXES, the rest replicated.

  Pax's `inputs_split_mapping` (map_1d / map_2d) for any rank; the same placement as the rules'
  `batch`, so the first layer needs no resharding.
  """
  axes = tuple(a for a in BATCH_AXES if a in mesh.axis_names)
  return NamedSharding(mesh, PartitionSpec(axes, *([None] * (ndim - 1))))


@contextlib.contextmanager
def activate(
  mesh: jax.sharding.Mesh, rules: LogicalRules = LOGICAL_AXIS_RULES
) -> Iterator[jax.sharding.Mesh]:
  """Makes `mesh` the current mesh and `rules` the current rules, so that `maybe_shard` /
  `nn.with_logical_constraint` constrain activations while a function is traced. Outside it they
  do nothing (single-device runs need no mesh). Use around the first call of a jitted function.
  """
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    yield mesh
