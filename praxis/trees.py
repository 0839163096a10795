"""Pax's tree helpers: path strings for every leaf, subset tests between nested structures.

`to_path_tree` names each leaf by its path, Pax-style: dict keys and attribute names joined by
'/', sequence indices as `[i]` glued to their parent (`{'a': [1, (2, 3)]}` ->
`{'a': ['a[0]', ('a[1][0]', 'a[1][1]')]}`). `fullmatch_path` matches those names against regular
expressions. `is_subset` / `extract_elements_matching_subset_structure` compare a nested
structure with a larger one from the root (dict-like nodes may lack keys, sequences may lack a
suffix).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Union

import jax
from jax import tree_util as jtu

from praxis import pytypes

KeyType = Union[jtu.DictKey, jtu.SequenceKey, jtu.GetAttrKey, jtu.FlattenedIndexKey]
Patterns = Union[str, re.Pattern, Iterable[Union[re.Pattern, str]]]
PyTree = Any


def _key_text(key: KeyType) -> str:
  if isinstance(key, jtu.SequenceKey):
    return f"[{key.idx}]"
  if isinstance(key, jtu.DictKey):
    return str(key.key)
  if isinstance(key, jtu.GetAttrKey):
    return key.name
  if isinstance(key, jtu.FlattenedIndexKey):
    return str(key.key)
  raise ValueError(
    f"to_path_tree: a key of unknown kind {key!r} ({type(key).__name__}); "
    "expected a dict key, sequence index, attribute or flattened index."
  )


def _path_text(path: tuple[KeyType, ...]) -> str:
  text = "/".join(_key_text(k) for k in path)
  return text.replace("/[", "[")  # an index sticks to what it indexes: 'a[0]', not 'a/[0]'


def to_path_tree(tree: PyTree, is_leaf: Callable[..., bool] | None = None) -> PyTree:
  """A tree shaped like `tree` whose leaves are their path names (None where `is_leaf` holds)."""

  def name(path, value):
    if is_leaf is not None and is_leaf(value):
      return None
    return _path_text(path)

  # As Pax, `is_leaf` only blanks leaves: containers are always walked into.
  return jtu.tree_map_with_path(name, tree)


def fullmatch_path(
  tree: PyTree, patterns: Patterns, is_leaf: Callable[..., bool] | None = None
) -> PyTree:
  """A tree of bools: whether each leaf's path name fully matches any of `patterns`."""
  if isinstance(patterns, (str, re.Pattern)):
    patterns = [patterns]
  compiled = [re.compile(p) for p in patterns]
  return jtu.tree_map(
    lambda path: any(p.fullmatch(path) for p in compiled),
    to_path_tree(tree, is_leaf=is_leaf),
    is_leaf=is_leaf,
  )


def _is_sequence(x: Any) -> bool:
  return type(x) in (tuple, list)  # exactly: a NamedTuple or PartitionSpec is not a plain tuple


def is_subset(subset: pytypes.Nested, superset: pytypes.Nested) -> bool:
  """Whether `subset` sits inside `superset` from the root.

  Dict-like nodes (dict, NestedMap, either way round) may miss keys; a list or tuple may miss a
  suffix of the other's elements (`[1, 2]` is in `[1, 2, 3]`, `[1, 3]` is not); other nodes must
  have the same type; leaves must be equal.
  """
  if isinstance(subset, dict) and isinstance(superset, dict):
    return set(subset) <= set(superset) and all(is_subset(subset[k], superset[k]) for k in subset)
  if type(subset) is not type(superset):
    return False
  if _is_sequence(subset):
    return len(subset) <= len(superset) and all(is_subset(a, b) for a, b in zip(subset, superset))
  return subset == superset


def _is_single_leaf(x: Any) -> bool:
  treedef = jax.tree_util.tree_structure(x)
  return treedef.num_nodes == 1 and treedef.num_leaves == 1


def extract_elements_matching_subset_structure(
  subset: pytypes.Nested, superset: pytypes.Nested
) -> pytypes.Nested:
  """`superset`'s elements at the places `subset` has, in `subset`'s container types.

  Raises ValueError where `subset` has a key, element or container that `superset` lacks.
  Leaves may differ in type (a ShapeDtypeStruct against an array, say): the superset's is taken.
  """
  if isinstance(subset, dict) and isinstance(superset, dict):
    missing = [k for k in subset if k not in superset]
    if missing:
      raise ValueError(
        f"extract_elements_matching_subset_structure: keys {missing} of the subset "
        f"are not in the superset (its keys: {sorted(superset, key=str)})."
      )
    return type(subset)(
      **{k: extract_elements_matching_subset_structure(subset[k], superset[k]) for k in subset}
    )
  if type(subset) is not type(superset):
    if _is_single_leaf(subset):
      return superset
    raise ValueError(
      "extract_elements_matching_subset_structure: the subset has a "
      f"{type(subset).__name__} where the superset has a {type(superset).__name__}; both "
      "must be the same kind of container there."
    )
  if _is_sequence(subset):
    if len(subset) > len(superset):
      raise ValueError(
        f"extract_elements_matching_subset_structure: the subset has {len(subset)} elements "
        f"where the superset has only {len(superset)}."
      )
    return type(subset)(
      extract_elements_matching_subset_structure(a, b) for a, b in zip(subset, superset)
    )
  return superset


def get_shape_dtype(nested_obj: pytypes.NestedShapeDtypeLike) -> pytypes.NestedShapeDtypeStruct:
  """The same tree with each array replaced by a `jax.ShapeDtypeStruct` of its shape and dtype."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(shape=x.shape, dtype=x.dtype), nested_obj)


def copy(pytree: PyTree) -> PyTree:
  """A new tree of the same structure holding the same leaf objects (containers are new)."""
  return jax.tree.map(lambda x: x, pytree)
