"""Variable-tree utilities: paths, JSON I/O, shapes and sizes (bobbin's `var_util`).

Paths follow flax's state-dict view of a tree, so they are the same whatever
the container type: `/params/Dense_0/kernel`; tuple and list items (e.g. the
tuples that `nn.Module.sow` appends to) get their index as a component
(`/tensorboard/Block_0/loss/0`), so two sown values never share a path.

JSON files use bobbin's format, so files written by bobbin are read here and
the other way round: the nested state dict, with every non-scalar array as
`{"__array__": true, "dtype": "<name>", "data": [...]}` and 0-d arrays as
plain numbers. Paths may be anything `etils.epath.Path` takes (local or
`gs://...`).
"""

from collections.abc import Callable, Iterator
import json
import os
from typing import Any

from etils import epath
import flax.serialization
import jax
import numpy as np

from paxml.toolkit import array_util

IsLeafFn = Callable[[Any], bool]

# bobbin keeps these two in var_util as well as array_util.
split_leading_axis = array_util.split_leading_axis
flatten_leading_axes = array_util.flatten_leading_axes


def _is_dict(node: Any) -> bool:
  return isinstance(node, (dict, flax.core.FrozenDict))


def _dict_paths(node: Any, prefix: str, sep: str) -> Any:
  if _is_dict(node):
    return type(node)(**{k: _dict_paths(v, prefix + sep + str(k), sep) for k, v in node.items()})
  return prefix


def nested_vars_to_paths(node: Any, *, pathsep: str = "/", is_leaf: IsLeafFn | None = None) -> Any:
  """Returns a tree shaped like `node` whose leaves are their path strings.

  Args:
    node: any tree flax can serialise (dicts, dataclasses, tuples, ...).
    pathsep: the separator between path components.
    is_leaf: nodes for which this is true are leaves (their insides get no
      paths), as in `jax.tree_util`.
  """
  if is_leaf is not None:
    # Stand-ins so the state dict stops at the nodes `is_leaf` picks.
    node = jax.tree.map(lambda x: -1 if is_leaf(x) else x, node, is_leaf=is_leaf)
  paths = _dict_paths(flax.serialization.to_state_dict(node), "", pathsep)
  return flax.serialization.from_state_dict(node, paths)


def flatten_with_paths(node: Any, *, is_leaf: IsLeafFn | None = None) -> Iterator[tuple[str, Any]]:
  """Yields `(path, leaf)` for every leaf, in `jax.tree.leaves` order."""
  paths = jax.tree.leaves(nested_vars_to_paths(node, is_leaf=is_leaf))
  leaves = jax.tree.leaves(node, is_leaf=is_leaf)
  yield from zip(paths, leaves)


def _decode_arrays(d: dict[str, Any]) -> Any:
  if d.get("__array__"):
    return np.array(d["data"], dtype=np.dtype(d.get("dtype", "float32")))
  return d


class _ArrayEncoder(json.JSONEncoder):
  """Encodes arrays as bobbin does: 0-d as numbers, others tagged dicts."""

  def default(self, o: Any) -> Any:
    if isinstance(o, (np.ndarray, jax.Array, np.generic)):
      o = np.asarray(o)
      if o.shape == ():
        return o.tolist()
      return {"__array__": True, "dtype": o.dtype.name, "data": o.tolist()}
    return super().default(o)


def dump_pytree_json(tree: Any) -> str:
  """Returns `tree` (its flax state dict) as a JSON string."""
  return json.dumps(flax.serialization.to_state_dict(tree), cls=_ArrayEncoder)


def parse_pytree_json(json_str: str | bytes, template: Any) -> Any:
  """Returns `template` filled with the values of a `dump_pytree_json` string."""
  state = json.loads(json_str, object_hook=_decode_arrays)
  return flax.serialization.from_state_dict(template, state)


def write_pytree_json_file(path: str | os.PathLike[str], tree: Any) -> None:
  """Writes `dump_pytree_json(tree)` to `path` (local or remote)."""
  epath.Path(path).write_text(dump_pytree_json(tree))


def read_pytree_json_file(path: str | os.PathLike[str], template: Any) -> Any:
  """Reads a `write_pytree_json_file` file into `template`'s structure."""
  return parse_pytree_json(epath.Path(path).read_text(), template)


def total_dimensionality(tree: Any) -> int:
  """Returns the number of scalars in `tree`; None leaves count as zero."""
  return int(sum(int(np.prod(np.shape(x))) for x in jax.tree.leaves(tree)))


def _shape_str(x: Any) -> str:
  return f"{tuple(x.shape)} dtype={x.dtype}"


def summarize_shape(tree: Any) -> str:
  """Returns an indented listing `name: (shape) dtype=...`, one line per leaf."""
  if tree is None:
    return "None"
  if hasattr(tree, "shape") and hasattr(tree, "dtype"):
    return _shape_str(tree)
  lines = []

  def visit(node: dict[str, Any], depth: int) -> None:
    for key, value in node.items():
      head = "  " * depth + f"{key}:"
      if value is None:
        lines.append(head + " None")
      elif hasattr(value, "shape") and hasattr(value, "dtype"):
        lines.append(head + " " + _shape_str(value))
      else:
        lines.append(head)
        visit(value, depth + 1)

  visit(flax.serialization.to_state_dict(jax.tree.map(np.asarray, tree)), 0)
  return "".join(line + "\n" for line in lines)
