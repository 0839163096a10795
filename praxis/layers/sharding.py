"""Sharding annotations derived by einsum-like equations (Pax's praxis.layers.sharding).

A sharding is one mesh-axis entry per tensor dim (None, an axis name, or a list of names).
`derive(s, 'ab->cba')` renames dims by letter; `shard(x, s, eqn)` annotates `x` with the
derived sharding, where a `?` dim is left unconstrained and one `[...]` group of dims may be
absent from `x`. Annotations are no-ops outside a mesh, as everywhere in praxis.
"""

from __future__ import annotations

from collections.abc import Sequence
import math
import re

import jax

from praxis import base_layer
from praxis import py_utils

DimSharding = str | Sequence[str] | None
Sharding = Sequence[DimSharding] | None


def derive(s: Sharding, eqn: str) -> Sharding:
  """The sharding of `derived` dims, matched by letter to `original` (eqn 'original->derived').

  E.g. derive(('x', 'y'), 'ab->cbda') == (None, 'y', None, 'x'); letters not in original get None.
  """
  if s is None:
    return None
  try:
    original, derived = eqn.split("->")
  except ValueError:
    raise ValueError(f"sharding eqn must read 'original->derived', got {eqn!r}.") from None
  return tuple(s[original.index(d)] if d in original else None for d in derived)


def _transpose_axis(axis: str, mapping: dict[str, str] | None) -> str:
  return mapping.get(axis, axis) if mapping else axis


def _mesh_axes_transpose() -> dict[str, str] | None:
  top = base_layer.JaxContext.top()
  return top.hparams.mesh_axes_transpose if top is not None else None


def _transpose_spec(spec: jax.sharding.PartitionSpec) -> jax.sharding.PartitionSpec:
  """The JaxContext's mesh_axes_transpose applied to every axis name of `spec`."""
  mapping = _mesh_axes_transpose()
  if not mapping:
    return spec

  def one(entry):
    if entry is None or entry is jax.sharding.PartitionSpec.UNCONSTRAINED:
      return entry
    if isinstance(entry, str):
      return _transpose_axis(entry, mapping)
    return tuple(_transpose_axis(a, mapping) for a in entry)

  return jax.sharding.PartitionSpec(*(one(e) for e in spec))


def shard(x: jax.Array, s: Sharding, eqn: str | None = None) -> jax.Array:
  """x annotated with sharding `s`, or with the sharding `eqn` derives from it.

  In eqn's derived side, '?' leaves a dim unconstrained and one '[..]' group of consecutive
  dims is optional: used when x has them, dropped when x's rank says it lacks them. E.g.
  s=('x', 'y', 'z'), eqn 'abc->[ab]c' gives ('x', 'y', 'z') for a 3-D x and ('z',) for a 1-D x.
  """
  if s is None or not py_utils.global_mesh_defined():
    return x
  if eqn is not None:
    original, derived = eqn.split("->")
    if "[" in derived:
      left, optional, right = re.split(r"\[|\]", derived)
      if x.ndim == len(left) + len(right):
        derived = left + right
      elif x.ndim == len(left) + len(optional) + len(right):
        derived = left + optional + right
      else:
        raise ValueError(f"sharding eqn {eqn!r} does not fit a tensor of shape {x.shape}.")
    s = list(derive(s, f"{original}->{derived}"))
    for i, letter in enumerate(derived):
      if letter == "?":
        s[i] = jax.sharding.PartitionSpec.UNCONSTRAINED
  spec = _transpose_spec(jax.sharding.PartitionSpec(*s))
  return jax.lax.with_sharding_constraint(x, spec)


def get_dim_sharding(s: Sharding, dim: int) -> DimSharding:
  """The sharding of one dim (None when s is None)."""
  return None if s is None else s[dim]


def shard_one_dim(x: jax.Array, s: DimSharding, dim: int) -> jax.Array:
  """x annotated with `s` on dim `dim`, every other dim unconstrained."""
  derived = "?" * dim + "d" + "?" * (x.ndim - dim - 1)
  return shard(x, (s,), "d->" + derived)


def num_shards_on_dim(dim_sharding: DimSharding) -> int:
  """How many shards a dim with this sharding has on the active mesh (1 outside a mesh)."""
  if dim_sharding is None:
    return 1
  mesh = jax.sharding.get_abstract_mesh()
  if mesh is None or mesh.empty:
    from jax.interpreters import pxla  # pylint: disable=import-outside-toplevel

    mesh = pxla.thread_resources.env.physical_mesh
  sizes = dict(
    zip(mesh.axis_names, mesh.axis_sizes if hasattr(mesh, "axis_sizes") else mesh.devices.shape)
  )
  mapping = _mesh_axes_transpose()
  axes = [dim_sharding] if isinstance(dim_sharding, str) else list(dim_sharding)
  return math.prod(sizes.get(_transpose_axis(a, mapping), 1) for a in axes)
