"""Helpers between plain Flax variable trees and praxis's boxed weights (Pax's flax_utils).

convert_to_boxed_params turns the variables a plain Flax module created into praxis weights with
WeightHParams metadata, so `abstract_init_with_metadata` and the partitioner see them like any
praxis layer's: `params` stay trainable, every other collection is non-trainable and averaged
across replicas (unless `var_collection_map` says otherwise), and Flaxformer-style `*_axes`
collections (flax.linen.partitioning.param_with_axes) become tensor_split_dims_mapping through
the logical axis rules.
"""

from __future__ import annotations

import copy
from typing import Any

from flax import traverse_util
from flax.core import frozen_dict
from flax.linen import partitioning as flax_partitioning
import jax
import jax.numpy as jnp

from praxis import base_layer


def maybe_unpack_summary(tree: Any, unpack_summaries: bool, x_times: int) -> Any:
  """With unpack_summaries, each [x_times, ...] leaf becomes a list of x_times [1, ...] slices."""
  if not unpack_summaries:
    return tree

  def unpack(value):
    if value.shape[0] != x_times:
      raise ValueError(f"A repeated summary has leading dim {value.shape[0]}, expected {x_times}.")
    return jnp.split(value, x_times)

  return jax.tree.map(unpack, tree)


def maybe_repack_summary(tree: Any, unpack_summaries: bool, x_times: int) -> Any:
  """Inverse of maybe_unpack_summary: lists of x_times slices are stacked back."""
  if not unpack_summaries:
    return tree

  def repack(value):
    if not isinstance(value, list):
      return value
    if len(value) != x_times:
      raise ValueError(f"A repeated summary has {len(value)} values, expected {x_times}.")
    return jnp.stack(value)

  return jax.tree.map(repack, tree, is_leaf=lambda x: isinstance(x, list))


def _is_boxed(x: Any) -> bool:
  return isinstance(x, (base_layer.WeightBox, base_layer.MeshWeightBox))


def convert_to_boxed_params(
  var_tree: Any,
  logical_axes_rules: Any = None,
  mesh_shape: Any = None,
  var_collection_map: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
  """Boxes every raw variable of a Flax collection tree with its WeightHParams.

  Args:
    var_tree: {collection: nested dict of arrays}, possibly with `<collection>_axes` trees of
      logical axis names (which are consumed and dropped).
    logical_axes_rules: [(logical name, mesh axis), ...] turning those names into the weights'
      tensor_split_dims_mapping; None leaves the mappings unset.
    mesh_shape: recorded in each WeightHParams.
    var_collection_map: {collection: WeightHParamsCollection list} for collections other than
      params; unlisted ones get [NON_TRAINABLE, REQUIRES_MEAN_SYNC].

  Returns:
    {collection: the same tree with boxed leaves}; already boxed leaves (praxis layers inside
    the Flax module) are kept as they are.
  """
  var_collection_map = var_collection_map or {}
  var_tree = dict(frozen_dict.unfreeze(var_tree))
  # Flaxformer's axis annotations, as PartitionSpecs of logical names.
  axes_tree = {
    key: flax_partitioning.get_axis_names(var_tree.pop(key))
    for key in list(var_tree)
    if key.endswith("_axes")
  }

  def box(value: Any, collection: str, logical_axes: Any) -> Any:
    if _is_boxed(value):
      return value
    mapping = None
    if logical_axes is not None and logical_axes_rules is not None:
      mapping = list(
        flax_partitioning.logical_to_mesh_axes(tuple(logical_axes), logical_axes_rules)
      )
    elif logical_axes is not None:
      mapping = list(logical_axes)
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
      shape=value.shape,
      init=None,
      dtype=value.dtype,
      collections=collections,
      mesh_shape=mesh_shape,
      tensor_split_dims_mapping=mapping,
    )
    return base_layer.WeightBox(value, (None,) * value.ndim, meta=meta)

  boxed = {}
  for collection, tree in var_tree.items():
    if f"{collection}_axes" in axes_tree:
      # Weights without an annotation (plain Flax modules mixed with Flaxformer ones) get
      # PartitionSpec(None), so the axes tree has the variables' structure.
      flat_vars = traverse_util.flatten_dict(frozen_dict.unfreeze(tree), sep="/")
      flat_axes = traverse_util.flatten_dict(
        frozen_dict.unfreeze(axes_tree[f"{collection}_axes"]), sep="/"
      )
      full_axes = traverse_util.unflatten_dict(
        {k: flat_axes.get(k, jax.sharding.PartitionSpec(None)) for k in flat_vars}, sep="/"
      )
      boxed[collection] = jax.tree.map(
        lambda v, a, c=collection: box(v, c, a), tree, full_axes, is_leaf=_is_boxed
      )
    else:
      boxed[collection] = jax.tree.map(
        lambda v, c=collection: box(v, c, None), tree, is_leaf=_is_boxed
      )
  return boxed
