"""Variable-tree utilities: paths, JSON I/O, shapes and sizes (bobbin's var_util).

  nested_vars_to_paths(tree): same-shaped tree of '/params/Dense_0/kernel' strings.
  flatten_with_paths(tree): yields (path, leaf); handy for path-based masks
    such as weight decay on `*kernel` only.
  dump_pytree_json / parse_pytree_json(text, template): JSON with arrays as
    {"__array__": true, "dtype": ..., "data": ...}; the template gives the
    tree structure (and non-leaf fields) back.
  write_pytree_json_file / read_pytree_json_file: the same, to a file
    (written atomically: a temporary file renamed over the old one).
  summarize_shape(tree): an indented 'name: (shape) dtype=...' listing.
  total_dimensionality(tree): number of scalars in the tree (None counts 0).
  split_leading_axis / flatten_leading_axes: micro-batch and pmap reshapes.
"""

from collections.abc import Callable, Iterator
import json
import os
import tempfile
from typing import Any

import jax
import numpy as np

from praxis import pytypes


def _path_string(path: tuple[Any, ...]) -> str:
  return "/" + pytypes.path_name(path)


def flatten_with_paths(tree: Any, is_leaf: Callable[[Any], bool] | None = None
                       ) -> Iterator[tuple[str, Any]]:
  """Yields `(path, leaf)` pairs, paths like '/params/Dense_0/kernel'."""
  leaves, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)
  for path, leaf in leaves:
    yield _path_string(path), leaf


def nested_vars_to_paths(tree: Any) -> Any:
  """Returns a tree shaped like `tree` whose leaves are their path strings."""
  return jax.tree_util.tree_map_with_path(lambda p, _: _path_string(p), tree)


def _leaf_to_json(x: Any) -> Any:
  if isinstance(x, (jax.Array, np.ndarray, np.generic)):
    x = np.asarray(x)
    return {"__array__": True, "dtype": x.dtype.str, "data": x.tolist()}
  return x


def _leaf_from_json(value: Any, like: Any) -> Any:
  if isinstance(value, dict) and value.get("__array__"):
    array = np.asarray(value["data"], dtype=np.dtype(value["dtype"]))
    return type(like)(array) if isinstance(like, np.generic) else array
  return value


def dump_pytree_json(tree: Any) -> str:
  """Returns the leaves of `tree` as JSON, keyed by their paths."""
  return json.dumps({path: _leaf_to_json(leaf) for path, leaf in flatten_with_paths(tree)},
                    indent=1, sort_keys=True)


def parse_pytree_json(text: str, template: Any) -> Any:
  """Returns `template` with each leaf replaced by the JSON value at its path.

  Raises:
    ValueError: if the JSON lacks a path of the template (saved from a
      different structure).
  """
  values = json.loads(text)
  paths = list(flatten_with_paths(template))
  missing = [p for p, _ in paths if p not in values]
  if missing:
    raise ValueError(
        f"JSON has no value for {missing[:5]}{'...' if len(missing) > 5 else ''}; it "
        f"holds {sorted(values)[:5]}... Was it written from a different tree structure?")
  leaves = [_leaf_from_json(values[p], like) for p, like in paths]
  return jax.tree.unflatten(jax.tree.structure(template), leaves)


def write_pytree_json_file(path: str, tree: Any) -> None:
  """Writes `dump_pytree_json(tree)` to `path` atomically."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp") as f:
    f.write(dump_pytree_json(tree))
  os.replace(f.name, path)


def read_pytree_json_file(path: str, template: Any) -> Any:
  """Reads a file written by `write_pytree_json_file` into `template`'s structure."""
  with open(path) as f:
    return parse_pytree_json(f.read(), template)


def total_dimensionality(tree: Any) -> int:
  """Returns the number of scalars in `tree`; None leaves count as zero."""
  return int(sum(np.size(x) for x in jax.tree.leaves(tree)))


def summarize_shape(tree: Any) -> str:
  """Returns one 'path: (shape) dtype=...' line per leaf."""
  lines = []
  for path, leaf in flatten_with_paths(tree):
    shape = tuple(np.shape(leaf))
    dtype = getattr(leaf, "dtype", type(leaf).__name__)
    lines.append(f"{path}: {shape} dtype={dtype}")
  return "\n".join(lines)


def split_leading_axis(n: int, tree: Any, *, leading_axis_name: str = "batch",
                       split_group_name: str = "groups") -> Any:
  """Reshapes every leaf [N, ...] to [n, N / n, ...]."""
  def split(x):
    if x.shape[0] % n:
      raise ValueError(
          f"The {leading_axis_name} size {x.shape[0]} is not a multiple of the number "
          f"of {split_group_name} {n}; make the {leading_axis_name} size divisible by {n}.")
    return x.reshape((n, x.shape[0] // n) + x.shape[1:])
  return jax.tree.map(split, tree)


def flatten_leading_axes(tree: Any, k: int = 2) -> Any:
  """Merges the first `k` axes of every leaf: [a, b, ...] -> [a * b, ...]."""
  return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[k:]), tree)
