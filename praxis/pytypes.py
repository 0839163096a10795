"""Types shared by layers, inputs and the trainer.

`NestedMap` is Pax's dict with attribute access. Inputs return one per batch (`batch.ids`,
`batch.labels`), layers return them from `compute_predictions`, and it is a JAX pytree so a batch
passes through `jax.jit`, `jax.tree.map` and `jax.device_put` unchanged in shape.
"""

from __future__ import annotations

from collections.abc import Sequence
import re
import sys
from typing import Any, Callable, TypeVar, Union

import jax
import numpy as np

JTensor = jax.Array


class InvalidKeyError(KeyError, ValueError):
  """A key NestedMap refuses (Pax raises ValueError; a KeyError too, as a dict would)."""


# Pax's rule: a key starts like an identifier; the rest is free ('p#2#i-1' is one of Pax's own).
_KEY_START = re.compile(r"[A-Za-z_]")


class NestedMap(dict):
  """A dict whose string keys are also attributes: `m.ids` is `m["ids"]`.

  Keys are strings that start with a letter or '_' (Pax's rule) and do not shadow dict methods,
  so attribute access is never ambiguous; keys that are identifiers are also attributes. Values
  may be NestedMaps, lists, tuples or leaves.
  """

  _RESERVED = frozenset(dir(dict))

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    for key in self:
      self._check_key(key)

  @classmethod
  def _check_key(cls, key: Any) -> None:
    if not isinstance(key, str) or not _KEY_START.match(key):
      raise InvalidKeyError(
        f"NestedMap keys must be strings starting with a letter or '_' (like identifiers); "
        f"got {key!r}."
      )
    if key in cls._RESERVED:
      raise InvalidKeyError(
        f"NestedMap key {key!r} would shadow the dict method of that name; choose another name."
      )

  def __setitem__(self, key, value):
    self._check_key(key)
    super().__setitem__(key, value)

  def __getattr__(self, name):
    try:
      return self[name]
    except KeyError:
      raise AttributeError(f"NestedMap has no key {name!r}; keys are {sorted(self)}.") from None

  def __setattr__(self, name, value):
    self[name] = value

  def __delattr__(self, name):
    try:
      del self[name]
    except KeyError:
      raise AttributeError(f"NestedMap has no key {name!r}.") from None

  def __dir__(self):
    return list(self.keys()) + dir(dict)

  def copy(self) -> NestedMap:
    """A shallow copy that is still a NestedMap (dict.copy would return a dict)."""
    return NestedMap(self)

  def DeepCopy(self) -> NestedMap:  # pylint: disable=invalid-name
    """Copies the structure; leaves are shared (arrays are immutable in JAX)."""
    return jax.tree.map(lambda x: x, self)

  def Flatten(self) -> list[Any]:  # pylint: disable=invalid-name
    """The leaves in a fixed order (keys sorted at each level, as jax.tree does)."""
    return jax.tree.leaves(self)

  def FlattenItems(self) -> list[tuple[str, Any]]:  # pylint: disable=invalid-name
    """(dotted path, leaf) pairs, for example ('decoder.ids', array)."""
    return [
      (path_name(path, "."), leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(self)
    ]

  def Transform(self, fn: Callable[[Any], Any]) -> NestedMap:  # pylint: disable=invalid-name
    """A NestedMap of the same structure with `fn` applied to every leaf."""
    return jax.tree.map(fn, self)

  def Filter(self, fn: Callable[[Any], bool]) -> NestedMap:  # pylint: disable=invalid-name
    """Keeps the leaves for which `fn` is true, dropping sub-maps that become empty."""
    return self.FilterKeyVal(lambda _, value: fn(value))

  def FilterKeyVal(self, fn: Callable[[str, Any], bool]) -> NestedMap:  # pylint: disable=invalid-name
    """Keeps the leaves for which `fn(dotted_key, leaf)` is true (Pax's FilterKeyVal)."""

    def keep(prefix: str, value: Any) -> Any:
      if isinstance(value, NestedMap):
        out = NestedMap()
        for key, sub in value.items():
          kept = keep(f"{prefix}.{key}" if prefix else key, sub)
          if kept is not _DROPPED:
            out[key] = kept
        return out if out or not prefix else _DROPPED
      return value if fn(prefix, value) else _DROPPED

    return keep("", self)

  # Pax's (lingvo's) NestedMap API, used by Pax layers and tests.

  @staticmethod
  def FromNestedDict(x: Any) -> Any:  # pylint: disable=invalid-name
    """Converts every dict inside `x` (e.g. Flax variables) into a NestedMap."""
    if isinstance(x, dict):
      return NestedMap({k: NestedMap.FromNestedDict(v) for k, v in x.items()})
    if isinstance(x, (list, tuple)):
      return type(x)(NestedMap.FromNestedDict(v) for v in x)
    return x

  @staticmethod
  def CheckKey(key: Any) -> None:  # pylint: disable=invalid-name
    NestedMap._check_key(key)

  def ToNestedDict(self) -> dict[str, Any]:  # pylint: disable=invalid-name
    """The same tree with plain dicts in place of NestedMaps."""

    def convert(x):
      if isinstance(x, dict):
        return {k: convert(v) for k, v in x.items()}
      if isinstance(x, tuple) and hasattr(x, "_fields"):  # A NamedTuple (optax.MaskedNode, ...).
        return type(x)(*(convert(v) for v in x))
      if isinstance(x, (list, tuple)):
        return type(x)(convert(v) for v in x)
      return x

    return convert(self)

  def GetItem(self, key: str) -> Any:  # pylint: disable=invalid-name
    """The value at dotted `key` ('a.b.c'); KeyError when absent."""
    current: Any = self
    for part in key.split("."):
      if isinstance(current, (list, tuple)):
        current = current[int(part)]
      else:
        current = current[part]
    return current

  def Get(self, key: str, default: Any = None) -> Any:  # pylint: disable=invalid-name
    """The value at dotted `key`, or `default` when any part is absent."""
    try:
      return self.GetItem(key)
    except (KeyError, IndexError, ValueError, TypeError):
      return default

  def Set(self, key: str, value: Any) -> NestedMap:  # pylint: disable=invalid-name
    """Sets the value at dotted `key`, creating NestedMaps on the way; returns self."""
    parts = key.split(".")
    current = self
    for part in parts[:-1]:
      if part not in current:
        current[part] = NestedMap()
      current = current[part]
    current[parts[-1]] = value
    return self

  def Pack(self, flat: Sequence[Any]) -> NestedMap:  # pylint: disable=invalid-name
    """A NestedMap of this structure holding `flat` (in Flatten's order) as its leaves."""
    return jax.tree.unflatten(jax.tree.structure(self), list(flat))

  def IsCompatible(self, other: Any) -> bool:  # pylint: disable=invalid-name
    """True when `other` has the same structure (keys and nesting)."""
    try:
      return jax.tree.structure(self) == jax.tree.structure(other)
    except Exception:  # pylint: disable=broad-except
      return False

  def DebugString(self) -> str:  # pylint: disable=invalid-name
    """One 'dotted.key  value' line per leaf."""
    return "\n".join(f"{k:<40} {v}" for k, v in self.FlattenItems())


_DROPPED = object()


def path_name(path: Sequence[Any], sep: str = "/") -> str:
  """A key path from `jax.tree_util` as text: dict keys, sequence indices and attribute names
  joined by `sep`, e.g. 'params/lm/softmax/w' or 'opt_state/1/0/mu/lm/softmax/w'."""
  parts = []
  for entry in path:
    for attr in ("key", "name", "idx"):  # DictKey, GetAttrKey, SequenceKey / FlattenedIndexKey.
      if hasattr(entry, attr):
        parts.append(str(getattr(entry, attr)))
        break
    else:
      parts.append(str(entry))
  return sep.join(parts)


def _flatten_with_keys(m: NestedMap):
  keys = sorted(m)
  return [(jax.tree_util.DictKey(k), m[k]) for k in keys], tuple(keys)


def _flatten(m: NestedMap):
  keys = sorted(m)
  return [m[k] for k in keys], tuple(keys)


def _unflatten(keys, values) -> NestedMap:
  out = NestedMap()
  for key, value in zip(keys, values):
    dict.__setitem__(out, key, value)  # keys were checked when the map was first built
  return out


jax.tree_util.register_pytree_with_keys(NestedMap, _flatten_with_keys, _unflatten, _flatten)


# Pax's other aliases (praxis.pytypes), for code written against Pax. `Nested[X]` is generic, as in
# Pax: `Nested[JTensor]` is a JTensor or any dict / list / tuple / NestedMap nesting of them.
PRNGKey = JTensor
NpTensor = np.ndarray
JTensorOrPartitionSpec = JTensor | jax.sharding.PartitionSpec
PyTreeDef = jax.tree_util.PyTreeDef
T = TypeVar("T")
Nested = Union[T, tuple[Any, ...], list[Any], dict[str, Any], NestedMap]
NestedJTensor = Nested[JTensor]
NestedNpTensor = Nested[NpTensor]
NestedBool = Nested[bool]
NestedInt = Nested[int]
NestedHParams = Nested[Any]  # Pax: nested lingvo-style HParams; here Fiddle configs
NestedShape = Nested[Sequence[int]]
NestedPartitionSpec = Nested[jax.sharding.PartitionSpec]
NestedJTensorOrPartitionSpec = Nested[JTensorOrPartitionSpec]
NestedShapeDtypeStruct = Nested[jax.ShapeDtypeStruct]
NestedShapedArray = Nested[jax.core.ShapedArray]
NestedShapeDtypeLike = Union[
  NestedJTensor, NestedNpTensor, NestedShapeDtypeStruct, NestedShapedArray
]
# A tensor's sharding in Pax's notation: one entry per dim, a mesh axis name (or index, or a
# tuple of them) or None / -1 for a replicated dim.
DimShardingAnnotation = Union[Sequence[Union[int, str]], int, str, None]
SplitDimsMapping = Union[Sequence[DimShardingAnnotation], None]
DotGeneral = Callable[..., jax.Array]
DotGeneralT = DotGeneral
LogicalAxisRules = Sequence[tuple[str, Union[str, None]]]
# A metric as Pax reports it: (value, weight), so that metrics from several batches or hosts can be
# combined as sum(value * weight) / sum(weight).
WeightedScalar = tuple[JTensor, JTensor]
WeightedScalars = Union[dict[str, WeightedScalar], NestedMap]
WeightedScalarsList = Union[dict[str, Sequence[WeightedScalar]], NestedMap]
# Pax's `Metrics`: clu metric objects by name.
Metrics = Union[NestedMap, dict[str, Any]]
SummaryDict = Union[NestedMap, dict[str, JTensor]]


def _register_lingvo_nested_map() -> None:
  """Makes lingvo's NestedMap a pytree too, when lingvo is already loaded.

  Pax's NestedMap *is* lingvo's class, so code written for Pax (Pax's own tests among it) hands
  lingvo NestedMaps to jax.tree.map and to layers. Ours is a separate class; lingvo's (only if
  the process already imported it: praxis never imports lingvo) flattens the same way.
  """
  lingvo_module = sys.modules.get("lingvo.core.nested_map")
  cls = getattr(lingvo_module, "NestedMap", None)
  if cls is None:
    return

  def unflatten(keys, values):
    return cls(zip(keys, values))

  try:
    jax.tree_util.register_pytree_with_keys(cls, _flatten_with_keys, unflatten, _flatten)
  except ValueError:
    pass  # registered already (e.g. by lingvo-on-JAX code)


_register_lingvo_nested_map()
