"""pmap helpers (bobbin's `pmap_util`): a transparent pmap and replica tools.

  tpmap(f, axis_name, argtypes): `jax.pmap(f)` that keeps f's caller-side
    signature; each positional argument is converted by its `ArgType`:
      "static"    hashable, the same on every device (static_broadcasted);
      "thru"      already has a leading device axis (a replicated state);
      "broadcast" replicated to every device;
      "shard"     [N, ...] split to [devices, N / devices, ...];
      "rng"       one PRNG key split into one key per device.
  unshard(tree): a list with one tree per device.
  gather_from_jax_processes(tree): a list with every process's tree, by
    process index (a collective: every process must call it).
  assert_replica_integrity(tree): all replicas, on every device and process,
    hold the same values.

bobbin placed the per-device keys with `jax.device_put_sharded`, which JAX
removed; here they go through praxis.sharding.put_stacked (the one
replacement, which JAXline's face uses too).
"""

import abc
from collections.abc import Callable, Mapping, Sequence
import functools
from typing import Any

import flax.jax_utils
import jax
import numpy as np

from praxis import sharding
from paxml.toolkit import array_util
from paxml.toolkit import pytypes
from paxml.toolkit import var_util

ArrayTree = pytypes.ArrayTree
Device = pytypes.Device


def pmap_shard_tree(x: ArrayTree, ndevices: int) -> ArrayTree:
  """Reshapes every [N, ...] leaf to [ndevices, N // ndevices, ...]."""
  return array_util.split_leading_axis(
    ndevices, x, leading_axis_name="batch size", split_group_name="# of devices"
  )


class ArgType(abc.ABC):
  """How `tpmap` converts one argument before the pmapped call."""

  @abc.abstractmethod
  def transform(self, x: ArrayTree, devices: Sequence[Device]) -> ArrayTree:
    """Returns `x` laid out for `jax.pmap` over `devices`."""

  def is_static(self) -> bool:
    return False


class StaticArg(ArgType):
  """A hashable argument passed as is to every device."""

  def transform(self, x, devices):
    return x

  def is_static(self) -> bool:
    return True


class ThruArg(ArgType):
  """An argument that already has the leading device axis."""

  def transform(self, x, devices):
    return x


class BroadcastArg(ArgType):
  """An argument copied to every device."""

  def transform(self, x, devices):
    return flax.jax_utils.replicate(x, devices)


class ShardArg(ArgType):
  """An argument whose leading axis is split across devices."""

  def transform(self, x, devices):
    return pmap_shard_tree(x, len(devices))


class RngArg(ArgType):
  """A PRNG key split into one distinct key per device."""

  def transform(self, x, devices):
    return sharding.put_stacked(jax.random.split(x, len(devices)), devices)


_ARGTYPES_BY_NAME = {
  "static": StaticArg(),
  "thru": ThruArg(),
  "broadcast": BroadcastArg(),
  "shard": ShardArg(),
  "rng": RngArg(),
}


def resolve_argtype_str(ty: str | ArgType) -> ArgType:
  """Returns the `ArgType` named by `ty` ("static", "thru", ...), or `ty`."""
  if not isinstance(ty, str):
    return ty
  if ty.lower() not in _ARGTYPES_BY_NAME:
    raise ValueError(
      f'Unknown argtype name "{ty}" is specified; use one of {list(_ARGTYPES_BY_NAME)}.'
    )
  return _ARGTYPES_BY_NAME[ty.lower()]


def tpmap(
  f: Callable[..., Any],
  axis_name: str,
  argtypes: Sequence[str | ArgType],
  kwargtypes: Mapping[str, str | ArgType] | None = None,
  *,
  devices: Sequence[Device] | None = None,
  backend: str | None = None,
  wrap_return: Callable[[ArrayTree], ArrayTree] | None = None,
  **pmap_kwargs: Any,
) -> Callable[..., Any]:
  """Transparent pmap: `f` run on every local device, called like `f`.

  Args:
    f: the function to run per device.
    axis_name: the pmap axis name (for collectives inside `f`).
    argtypes: one `ArgType` (or its name) per positional argument.
    kwargtypes: `ArgType`s of keyword arguments ("static" is not allowed).
    devices: the devices; default all local devices of `backend`.
    backend: the backend; default JAX's default backend.
    wrap_return: applied to the per-device result (e.g.
      `EvalResults.unshard_and_reduce`); default returns it with its leading
      device axis.
    **pmap_kwargs: passed to `jax.pmap` (e.g. donate_argnums).

  Returns:
    The wrapped function. No JAX call happens until it is called, so this is
    safe before `jax.distributed.initialize()`.
  """
  argtypes = [resolve_argtype_str(t) for t in argtypes]
  kwargtypes = {k: resolve_argtype_str(t) for k, t in (kwargtypes or {}).items()}
  if any(t.is_static() for t in kwargtypes.values()):
    raise ValueError("`Static`-argument are only allowed as positional arguments.")
  static = tuple(i for i, t in enumerate(argtypes) if t.is_static())

  @functools.cache
  def pmapped():
    return jax.pmap(
      f,
      axis_name,
      static_broadcasted_argnums=static,
      devices=devices,
      backend=backend,
      **pmap_kwargs,
    )

  @functools.wraps(f)
  def wrapped(*args, **kwargs):
    local = jax.local_devices(backend=backend) if devices is None else devices
    if len(args) != len(argtypes):
      raise ValueError(
        "The number of positional args passed to the target function does not match "
        f"with the `argtypes` specified in `tpmap` ({len(args)} != {len(argtypes)})"
      )
    for k in kwargs:
      if k not in kwargtypes:
        raise ValueError(
          f"`kwargtypes` specified to `tpmap` does not contain specification of kwarg with key={k}"
        )
    args = [t.transform(x, local) for x, t in zip(args, argtypes)]
    kwargs = {k: kwargtypes[k].transform(x, local) for k, x in kwargs.items()}
    out = pmapped()(*args, **kwargs)
    return out if wrap_return is None else wrap_return(out)

  return wrapped


def _first_entry(x: Any) -> Any:
  if np.ndim(x) == 0:
    return x  # Nothing to unreplicate (flax's behaviour).
  if isinstance(x, jax.Array) and not x.sharding.is_fully_replicated:
    # A pmap output: device 0's shard is row 0, without a gather.
    for shard in x.addressable_shards:
      if shard.index and shard.index[0].start in (0, None) and shard.data.shape[0] == 1:
        return shard.data.squeeze(0)
  return x[0]


def unreplicate(tree: ArrayTree) -> ArrayTree:
  """Row 0 of every leaf: device 0's copy of a pmap-replicated tree.

  flax's `unreplicate` returns a fully replicated array whole, so a state
  whose device axis is not sharded over devices (the output of chex's
  fake pmap, or of a jit) kept that axis; here row 0 is always taken.
  """
  return jax.tree.map(_first_entry, tree)


def unshard(tree: ArrayTree) -> list[ArrayTree]:
  """Returns one tree per entry of the leading (device) axis."""
  leaves = jax.tree.leaves(tree)
  if not leaves:
    raise ValueError("PyTree to be unsharded is empty.")
  if np.ndim(leaves[0]) < 1:
    raise ValueError("Tree to be unsharded do not have a leading axis.")
  return [jax.tree.map(lambda x, i=i: x[i], tree) for i in range(np.shape(leaves[0])[0])]


def _all_gather_over_devices(tree: ArrayTree, backend: str | None = None) -> ArrayTree:
  """all_gather of a [local_devices, ...] tree over every device of every process."""
  return unreplicate(jax.pmap(lambda t: jax.lax.all_gather(t, "b"), "b", backend=backend)(tree))


def gather_from_jax_processes(tree: ArrayTree) -> list[ArrayTree]:
  """Returns every process's `tree` as a list indexed by process.

  Each copy is tagged with its process and device index, so the result does
  not depend on the order all_gather concatenates devices in.
  """
  n = jax.local_device_count()
  tagged = (np.full((n,), jax.process_index()), np.arange(n), flax.jax_utils.replicate(tree))
  missing = object()
  out = [missing] * jax.process_count()
  for process, device, value in unshard(_all_gather_over_devices(tagged)):
    if int(device) == 0:
      out[int(process)] = value
  assert all(v is not missing for v in out), "a process is missing from the gather"
  return out


def assert_replica_integrity(
  tree: ArrayTree,
  *,
  is_device_replicated: bool = True,
  atol: float = 1e-5,
  rtol: float = 1e-5,
  backend: str = "cpu",
) -> None:
  """Raises AssertionError naming the path where some replica differs from replica 0.

  Args:
    tree: the values to check.
    is_device_replicated: True when leaves have a leading local-device axis.
    atol: absolute tolerance of `np.testing.assert_allclose`.
    rtol: relative tolerance.
    backend: where the gather runs; "cpu" (default) costs no accelerator memory.
  """
  if not is_device_replicated:
    tree = flax.jax_utils.replicate(tree)
  gathered = _all_gather_over_devices(tree, backend=backend)
  for path, x in var_util.flatten_with_paths(gathered):
    x = np.asarray(x)
    for i in range(1, x.shape[0]):
      np.testing.assert_allclose(
        x[i],
        x[0],
        atol=atol,
        rtol=rtol,
        err_msg=f"Inconsistency found in {i}-th replica of {path} [shape={x.shape}]",
      )
