"""Pax's checkpoint metadata (`paxml.checkpoint_metadata`): per array of the train state, its
unpadded shape and dtype and whether it is an optax `MaskedNode` (an array a learner does not
train), saved as JSON beside a checkpoint so a restore can check it reads the right model.

`PaxMetadata.to_dict()` is the JSON form: `{"version": v, "train_state_metadata": tree}`, each
array as `{"is_optax_masked_node": b, "_array_metadata_tag": True, "unpadded_shape": [...],
"dtype": "float32"}` (shape and dtype left out for a masked node).
"""

import dataclasses
import functools
from typing import Any, Callable, Mapping

from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from paxml import checkpoint_version
from paxml import train_states
from praxis import py_utils

PAX_METADATA_ITEM_NAME = "pax_metadata"
METADATA_ITEM_NAME = "metadata"
ARRAY_METADATA_TAG = "_array_metadata_tag"
IS_OPTAX_MASKED_NODE = "is_optax_masked_node"
UNPADDED_SHAPE = "unpadded_shape"
DTYPE = "dtype"
TRAIN_STATE_METADATA = "train_state_metadata"

get_version_key = checkpoint_version.get_version_key
get_version = checkpoint_version.get_version


def _trees_are_equal(
  a_tree: Any,
  b_tree: Any,
  equal_fn: Callable[[Any, Any], bool] | None = None,
  treedef: bool = False,
) -> bool:
  """Whether the leaves of two trees pair up equal under `equal_fn` (default `==`); with
  `treedef`, their structures must match too."""
  a_leaves, a_def = jax.tree_util.tree_flatten(a_tree)
  b_leaves, b_def = jax.tree_util.tree_flatten(b_tree)
  if treedef and a_def != b_def:
    return False
  same = equal_fn or (lambda a, b: a == b)
  return all(same(a, b) for a, b in zip(a_leaves, b_leaves))


@dataclasses.dataclass
class ArrayMetadata:
  """What a checkpoint records about one array."""

  unpadded_shape_dtype_struct: jax.ShapeDtypeStruct | None
  is_optax_masked_node: bool

  def to_dict(self) -> dict[str, Any]:
    out: dict[str, Any] = {
      IS_OPTAX_MASKED_NODE: self.is_optax_masked_node,
      ARRAY_METADATA_TAG: True,
    }
    struct = self.unpadded_shape_dtype_struct
    if struct is not None:
      out[UNPADDED_SHAPE] = struct.shape
      out[DTYPE] = str(struct.dtype)
    return out

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> "ArrayMetadata":
    struct = None
    if UNPADDED_SHAPE in d and DTYPE in d:
      struct = jax.ShapeDtypeStruct(tuple(d[UNPADDED_SHAPE]), jnp.dtype(d[DTYPE]))
    return cls(unpadded_shape_dtype_struct=struct, is_optax_masked_node=d[IS_OPTAX_MASKED_NODE])

  def equals(self, other: "ArrayMetadata") -> bool:
    return (
      self.is_optax_masked_node == other.is_optax_masked_node
      and self.unpadded_shape_dtype_struct == other.unpadded_shape_dtype_struct
    )

  def is_compatible(self, other: "ArrayMetadata") -> bool:
    """Equal, or both masked (a masked node's shape does not matter)."""
    both_masked = self.is_optax_masked_node and other.is_optax_masked_node
    return both_masked or self.equals(other)


def _is_array_metadata_dict(x: Any) -> bool:
  return isinstance(x, dict) and bool(x.get(ARRAY_METADATA_TAG))


@dataclasses.dataclass
class PaxMetadata:
  """A checkpoint's version and its train state's `ArrayMetadata` tree (versions > 1)."""

  version: float
  train_state_metadata: Any

  def to_dict(self) -> dict[str, Any]:
    tree = jax.tree.map(lambda m: m.to_dict(), self.train_state_metadata)
    if dataclasses.is_dataclass(tree):
      tree = dataclasses.asdict(tree)
    # Custom pytree nodes (flax structs) become plain dicts, empty containers kept.
    tree = ocp.utils.serialize_tree(tree, keep_empty_nodes=True)
    return {get_version_key(): self.version, TRAIN_STATE_METADATA: tree}

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> "PaxMetadata":
    tree = d[TRAIN_STATE_METADATA]
    if tree is None:
      raise ValueError(
        f"{TRAIN_STATE_METADATA} is None; metadata of checkpoint versions > 1 must have it"
      )
    tree = jax.tree.map(ArrayMetadata.from_dict, tree, is_leaf=_is_array_metadata_dict)
    return cls(version=d[get_version_key()], train_state_metadata=tree)

  @classmethod
  def from_padded_and_unpadded(
    cls,
    padded: train_states.TrainState,
    unpadded: train_states.TrainState | None,
    version: float,
    mdl_vars_only: bool = True,
  ) -> "PaxMetadata":
    """The metadata of `padded` (arrays or structs as saved), with shapes from `unpadded` (None:
    no shapes recorded). `mdl_vars_only` records only `mdl_vars` (Pax's default)."""

    def fields(state: train_states.TrainState) -> dict[str, Any]:
      if mdl_vars_only:
        return {"mdl_vars": state.mdl_vars}
      return {
        "step": state.step,
        "mdl_vars": state.mdl_vars,
        "opt_states": state.opt_states,
        "extra_state": state.extra_state,
      }

    def array_metadata(padded_leaf: Any, unpadded_leaf: Any) -> ArrayMetadata:
      masked = py_utils.is_optax_masked_node(unpadded_leaf)
      return ArrayMetadata(
        unpadded_shape_dtype_struct=None if masked else unpadded_leaf,
        is_optax_masked_node=py_utils.is_optax_masked_node(padded_leaf),
      )

    is_leaf = py_utils.is_optax_masked_node
    if unpadded is None:
      tree = jax.tree.map(
        functools.partial(array_metadata, unpadded_leaf=None), fields(padded), is_leaf=is_leaf
      )
    else:
      tree = jax.tree.map(array_metadata, fields(padded), fields(unpadded), is_leaf=is_leaf)
    return cls(version=version, train_state_metadata=tree)

  def equals(self, other: "PaxMetadata") -> bool:
    return self.version == other.version and _trees_are_equal(
      self.train_state_metadata, other.train_state_metadata, lambda a, b: a.equals(b)
    )

  def is_compatible(self, other: "PaxMetadata") -> bool:
    """Every array equal or both masked; versions may differ."""
    return _trees_are_equal(
      self.train_state_metadata, other.train_state_metadata, lambda a, b: a.is_compatible(b)
    )


def make_metadata(
  version: float | None = None,
  train_state: train_states.TrainState | None = None,
  train_state_unpadded_shape_dtype_struct: train_states.TrainState | None = None,
  tensorstore_use_ocdbt: bool | None = None,
) -> Mapping[str, Any]:
  """The metadata dict a save writes: `{"version": v}` for version 1, else `PaxMetadata`'s."""
  if version is None:
    version = get_version(tensorstore_use_ocdbt=tensorstore_use_ocdbt)
  if version <= 1:
    return {get_version_key(): version}
  if train_state is None:
    raise ValueError(
      f"checkpoint version {version} records the train state's unpadded shapes; pass train_state"
    )
  unpadded = train_state_unpadded_shape_dtype_struct
  if unpadded is None:  # Nothing is padded: the state's own shapes.
    unpadded = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x)), train_state
    )
  return PaxMetadata.from_padded_and_unpadded(train_state, unpadded, version=version).to_dict()


def metadata_exists(directory: epath.PathLike) -> bool:
  return (epath.Path(directory) / METADATA_ITEM_NAME).is_dir()


def save_metadata(directory: epath.PathLike, metadata: Mapping[str, Any]) -> None:
  """Writes `metadata` as JSON in `<directory>/metadata`."""
  with ocp.Checkpointer(ocp.JsonCheckpointHandler()) as checkpointer:
    checkpointer.save(epath.Path(directory) / METADATA_ITEM_NAME, metadata)


def restore_metadata(directory: epath.PathLike) -> Mapping[str, Any]:
  with ocp.Checkpointer(ocp.JsonCheckpointHandler()) as checkpointer:
    return checkpointer.restore(epath.Path(directory) / METADATA_ITEM_NAME)
