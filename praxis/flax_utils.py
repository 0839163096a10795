"""Pax's helpers for plain Flax modules inside praxis models.

`convert_to_boxed_params` turns the variables of a Flax (or Flaxformer) module into
`base_layer.BoxedParam`s carrying WeightHParams, so the trainer can treat them as praxis
weights: a Flaxformer `<collection>_axes` entry gives each variable its logical axes, mapped to
mesh axes by `logical_axes_rules`; `params` are trainable, other collections get the
WeightHParams collections `var_collection_map` names, else non-trainable + mean-synced.
`maybe_unpack_summary` / `maybe_repack_summary` split a scanned layer's stacked summaries into
one per layer and back.
"""

from __future__ import annotations

import copy
from typing import Any

from flax import linen as nn
from flax import traverse_util
from flax.core import frozen_dict
from flax.linen import partitioning as flax_partitioning
import jax
import jax.numpy as jnp

from praxis import base_layer


def maybe_unpack_summary(tree: Any, unpack_summaries: bool, x_times: int) -> Any:
  """With `unpack_summaries`, each [x_times, ...] leaf becomes a list of x_times [1, ...]."""
  if not unpack_summaries:
    return tree

  def unpack(value):
    if value.shape[0] != x_times:
      raise ValueError(
        f"maybe_unpack_summary: a summary of shape {value.shape} has no leading "
        f"dim of {x_times} layers."
      )
    return jnp.split(value, x_times)

  return jax.tree.map(unpack, tree)


def maybe_repack_summary(tree: Any, unpack_summaries: bool, x_times: int) -> Any:
  """Undoes maybe_unpack_summary: lists of x_times arrays are stacked back."""
  if not unpack_summaries:
    return tree

  def repack(value):
    if not isinstance(value, list):
      return value
    if len(value) != x_times:
      raise ValueError(f"maybe_repack_summary: {len(value)} summaries for {x_times} layers.")
    return jnp.stack(value)

  return jax.tree.map(repack, tree, is_leaf=lambda x: isinstance(x, list))


def convert_to_boxed_params(
  var_tree: Any,
  logical_axes_rules: Any = None,
  mesh_shape: Any = None,
  var_collection_map: dict[str, list[str]] | None = None,
) -> Any:
  """{collection: tree of BoxedParam} for a Flax module's variables (see the module docstring)."""
  if logical_axes_rules is not None and mesh_shape is None:
    raise ValueError("convert_to_boxed_params: logical_axes_rules needs mesh_shape too.")
  var_collection_map = var_collection_map or {}
  var_tree = frozen_dict.unfreeze(var_tree)
  axes = {
    k: flax_partitioning.get_axis_names(var_tree.pop(k))
    for k in list(var_tree)
    if k.endswith("_axes")
  }

  def box(value, collection: str, logical_axes):
    if is_boxed(value):  # a praxis layer inside (BoxedParam or WeightBox): boxed already
      return value
    mapping = None
    if logical_axes is not None:
      mapping = list(
        flax_partitioning.logical_to_mesh_axes(tuple(logical_axes), logical_axes_rules)
      )
    if collection == base_layer.PARAMS:
      collections = []
    elif collection in var_collection_map:
      collections = copy.copy(var_collection_map[collection])
    else:
      collections = [
        base_layer.WeightHParamsCollection.NON_TRAINABLE,
        base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC,
      ]
    meta = base_layer.WeightHParams(
      value.shape,
      None,
      value.dtype,
      collections=collections,
      mesh_shape=mesh_shape,
      tensor_split_dims_mapping=mapping,
    )
    return base_layer.BoxedParam(value, meta)

  def is_boxed(x):
    return isinstance(x, (base_layer.BoxedParam, nn.Partitioned))

  boxed = {}
  for collection, tree in var_tree.items():
    annotated = axes.get(f"{collection}_axes")
    if annotated is None:
      boxed[collection] = jax.tree.map(
        lambda x, c=collection: box(x, c, None), tree, is_leaf=is_boxed
      )
      continue
    # Variables the axes tree does not annotate (plain Flax modules) are replicated.
    flat = {k: jax.sharding.PartitionSpec(None) for k in traverse_util.flatten_dict(tree, sep="/")}
    flat.update(traverse_util.flatten_dict(frozen_dict.unfreeze(annotated), sep="/"))
    full_axes = traverse_util.unflatten_dict(flat, sep="/")
    boxed[collection] = jax.tree.map(
      lambda x, a, c=collection: box(x, c, a), tree, full_axes, is_leaf=is_boxed
    )
  return boxed
