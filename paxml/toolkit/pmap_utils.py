"""pmap helpers (bobbin's pmap_util): a transparent pmap and replica tools.

  tpmap(f, axis_name, argtypes): pmaps `f` but keeps its caller-side
    signature; each positional argument is converted by its argtype:
      "static"    hashable Python value, the same on every device;
      "thru"      already has a leading device axis (e.g. a replicated state);
      "broadcast" replicated to every device;
      "shard"     [N, ...] split to [devices, N / devices, ...];
      "rng"       one PRNG key split into one key per device.
  replicate / unreplicate: add / take device 0 of a leading device axis.
  unshard(tree): a list with one tree per device.
  gather_from_jax_processes(tree): stacks every process's tree on a new
    leading axis (a collective: every process must call it).
  assert_replica_integrity(tree): every device holds the same values.
"""

from collections.abc import Callable, Sequence
import functools
from typing import Any

import flax.jax_utils
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import numpy as np

from paxml.toolkit import var_utils

ARG_TYPES = ("static", "thru", "broadcast", "shard", "rng")

replicate = flax.jax_utils.replicate
unreplicate = flax.jax_utils.unreplicate


def _check_argtype(argtype: str, where: str) -> str:
  if argtype not in ARG_TYPES:
    raise ValueError(f"Unknown argtype {argtype!r} for {where}; use one of {ARG_TYPES}.")
  return argtype


def _convert(argtype: str, value: Any, num_devices: int, where: str) -> Any:
  if argtype in ("static", "thru"):
    return value
  if argtype == "broadcast":
    return jax.tree.map(
        lambda x: jnp.broadcast_to(jnp.asarray(x), (num_devices,) + jnp.shape(x)), value)
  if argtype == "shard":
    try:
      return var_utils.split_leading_axis(
          num_devices, value, leading_axis_name="batch", split_group_name="devices")
    except ValueError as e:
      raise ValueError(f"{where}: {e} (batch size must be a multiple of # of devices)") from e
  return jax.random.split(value, num_devices)  # "rng"


def tpmap(f: Callable[..., Any], axis_name: str, argtypes: Sequence[str],
          kwargtypes: dict[str, str] | None = None, *, devices=None, backend=None,
          wrap_return: Callable[[Any], Any] | None = None, **pmap_kwargs) -> Callable:
  """Returns `f` pmapped over `axis_name` with arguments converted by type.

  No JAX call happens here (only when the result is called), so this is safe
  to use at import time, before `jax.distributed.initialize()`.
  """
  argtypes = tuple(_check_argtype(a, f"positional argument {i} of {f.__name__}")
                   for i, a in enumerate(argtypes))
  kwargtypes = dict(kwargtypes or {})
  for name, a in kwargtypes.items():
    if _check_argtype(a, f"keyword argument {name!r}") == "static":
      raise ValueError(
          f"Keyword argument {name!r} of {f.__name__} is 'static'; pmap supports static "
          "arguments only positionally. Pass it positionally.")
  static = tuple(i for i, a in enumerate(argtypes) if a == "static")

  @functools.cache
  def pmapped():
    return jax.pmap(f, axis_name, static_broadcasted_argnums=static,
                    devices=devices, backend=backend, **pmap_kwargs)

  @functools.wraps(f)
  def call(*args, **kwargs):
    if len(args) != len(argtypes):
      raise TypeError(
          f"{f.__name__} was tpmapped with {len(argtypes)} argtypes {list(argtypes)} but "
          f"called with {len(args)} positional arguments; give one argtype per "
          "positional argument.")
    unknown = sorted(set(kwargs) - set(kwargtypes))
    if unknown:
      raise TypeError(
          f"{f.__name__} got keyword arguments {unknown} with no kwargtypes entry; add "
          f"them to kwargtypes= (known: {sorted(kwargtypes)}).")
    n = len(devices) if devices is not None else jax.local_device_count(backend)
    args = [_convert(a, x, n, f"argument {i} of {f.__name__}")
            for i, (a, x) in enumerate(zip(argtypes, args))]
    kwargs = {k: _convert(kwargtypes[k], v, n, f"keyword {k!r} of {f.__name__}")
              for k, v in kwargs.items()}
    out = pmapped()(*args, **kwargs)
    return wrap_return(out) if wrap_return is not None else out

  return call


def unshard(tree: Any) -> list[Any]:
  """Returns one tree per entry of the leading (device) axis."""
  leaves, treedef = jax.tree.flatten(tree)
  if not leaves:
    return []
  n = np.shape(leaves[0])[0]
  return [jax.tree.unflatten(treedef, [x[i] for x in leaves]) for i in range(n)]


def gather_from_jax_processes(tree: Any) -> Any:
  """Returns `tree` with a new leading axis of size process_count, by process index."""
  if jax.process_count() == 1:
    return jax.tree.map(lambda x: np.asarray(x)[None], tree)
  return multihost_utils.process_allgather(tree)


def assert_replica_integrity(tree: Any, *, is_device_replicated: bool = True,
                             atol: float = 0.0, rtol: float = 0.0) -> None:
  """Raises AssertionError naming the path where a replica differs from replica 0.

  With `is_device_replicated`, the leaves have a leading device axis; they
  are compared on the host so no extra device memory is used. Across
  processes, every process's copy is gathered and compared as well.
  """
  host = jax.device_get(tree)
  if not is_device_replicated:
    host = jax.tree.map(lambda x: np.asarray(x)[None], host)
  host = jax.tree.map(
      lambda x: np.asarray(x).reshape((-1,) + np.shape(x)[1:]),
      gather_from_jax_processes(host) if jax.process_count() > 1 else host)
  for path, x in var_utils.flatten_with_paths(host):
    for i in range(1, x.shape[0]):
      try:
        np.testing.assert_allclose(x[i], x[0], atol=atol, rtol=rtol)
      except AssertionError as e:
        raise AssertionError(
            f"Replica {i} of {path} differs from replica 0; replicas drifted apart "
            f"(was a mutable collection updated without a cross-device reduction?)\n{e}"
        ) from None
