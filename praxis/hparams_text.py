"""Pax's text form of a config tree: one `path : value` line per leaf, sorted by path.

It is what the trainer writes to model_params.txt. Paths: `a.b` into configs, dataclasses and
dicts (a config also shows its class as `a.cls : type/<module>/<Class>`, except the
`*_split_dims_mapping` ones), `a[0]` into lists / tuples of configs, `a[name]` into NamedTuples.
Values: strings quoted, numbers and bools as Python prints them, classes as
`type/<module>/<qualname>`, functions as `callable/<module>/<qualname>`, None and other objects
as their type's name (`NoneType`), arrays with numpy's array2string. A list or tuple that mixes
configs with other values is printed whole on one line.

`visit_nested_struct` is the walk itself, with hooks; `nested_struct_to_text` prints.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import inspect
from typing import Any, Callable

import fiddle as fdl
from flax.core import frozen_dict
import flax.linen as nn
import numpy as np


class StrOverride(abc.ABC):
  """A value whose `str()` is what the text shows for it."""

  @abc.abstractmethod
  def __str__(self) -> str: ...


def _is_named_tuple(x: Any) -> bool:
  return isinstance(x, tuple) and hasattr(x, "_fields")


def _is_hparams(x: Any) -> bool:
  from praxis import base_hyperparams_legacy  # pylint: disable=import-outside-toplevel

  return isinstance(x, base_hyperparams_legacy.BaseHyperParams)


def _sub_key(key: str, sub: Any) -> str:
  return f"{key}.{sub}" if key else f"{sub}"


def visit_nested_struct(
  obj_to_visit: Any,
  visit_fn: Callable[[str, Any], None],
  enter_fn: Callable[[str, Any], bool] | None = None,
  exit_fn: Callable[[str, Any], None] | None = None,
  prefix: str = "",
) -> None:
  """Walks a config tree: `visit_fn(key, value)` on each value it does not (or may not) enter.

  Dicts, dataclass instances, NamedTuples, lists / tuples / ranges and Fiddle configs are
  entered when `enter_fn(key, value)` (default: always) says so, with `exit_fn` called after.
  Raises ValueError on a value that contains itself.
  """
  enter_fn = enter_fn or (lambda key, val: True)
  exit_fn = exit_fn or (lambda key, val: None)
  on_path = set()

  def children(val: Any, key: str):
    """(key, child) pairs of an enterable value, or None for a leaf."""
    if isinstance(val, (dict, frozen_dict.FrozenDict)):
      return [(_sub_key(key, k), v) for k, v in val.items()]
    if dataclasses.is_dataclass(val) and not isinstance(val, type):
      fields = [
        f
        for f in dataclasses.fields(val)
        if not (isinstance(val, nn.Module) and f.name == "parent")
      ]
      return [(_sub_key(key, f.name), getattr(val, f.name)) for f in fields]
    if _is_named_tuple(val):
      return [(f"{key}[{k}]", v) for k, v in val._asdict().items()]
    if isinstance(val, (list, tuple, range)):
      return [(f"{key}[{i}]", v) for i, v in enumerate(val)]
    if isinstance(val, fdl.Buildable):
      args = fdl.ordered_arguments(val, include_defaults=True)
      if "parent" in args and type(args["parent"]).__name__ == "_Sentinel":
        args.pop("parent")  # a Flax module's unset parent
      items = (
        []
        if key.endswith("_split_dims_mapping")
        else [(_sub_key(key, "cls"), fdl.get_callable(val))]
      )
      return items + [(_sub_key(key, k), v) for k, v in args.items()]
    return None

  def visit(key: str, val: Any) -> None:
    if id(val) in on_path:
      raise ValueError(f"A circular reference chain is detected. Current key: {key}")
    on_path.add(id(val))
    items = children(val, key)
    if items is None or not enter_fn(key, val):
      visit_fn(key, val)
    else:
      for sub_key, sub_val in items:
        visit(sub_key, sub_val)
      exit_fn(key, val)
    on_path.discard(id(val))

  visit(prefix, obj_to_visit)


class _SortedDict(dict):
  """Prints its items sorted by key."""

  def __repr__(self):
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in sorted(self.items())) + "}"


def _module_name(x: Any) -> str:
  module = inspect.getmodule(x)
  return module.__name__ if module is not None else getattr(x, "__module__", "?")


def _value_repr(val: Any) -> Any:
  """What a leaf prints as (a str, or a container whose str() is printed)."""
  if isinstance(val, (dict, frozen_dict.FrozenDict)):
    return _SortedDict({k: _value_repr(v) for k, v in val.items()})
  if isinstance(val, np.ndarray):
    return np.array2string(val, separator=", ")
  if _is_hparams(val):
    return _SortedDict(
      {
        f.name: _value_repr(getattr(val, f.name))
        for f in dataclasses.fields(val)
        if hasattr(val, f.name)
      }
    )
  if dataclasses.is_dataclass(val) and not isinstance(val, type):
    return str(val)
  if _is_named_tuple(val):
    return _SortedDict({k: _value_repr(v) for k, v in val._asdict().items()})
  if isinstance(val, (list, tuple)):
    return type(val)([_value_repr(v) for v in val])
  if isinstance(val, (int, float, bool, str, enum.Enum)):
    return val
  if type(val).__name__ == "DType" and type(val).__module__.startswith("tensorflow"):
    return val.name  # a TensorFlow dtype
  if isinstance(val, StrOverride):
    return str(val)
  if isinstance(val, type):
    return f"type/{_module_name(val)}/{val.__qualname__}"
  if callable(val) and hasattr(val, "__qualname__"):
    return f"callable/{_module_name(val)}/{val.__qualname__}"
  if isinstance(val, fdl.Buildable):
    return repr(val)
  return type(val).__name__


def _enters(key: str, val: Any) -> bool:
  """Which values get a line per leaf (the rest print on one line)."""
  del key
  if _is_hparams(val) or _is_named_tuple(val) or isinstance(val, StrOverride):
    return True
  if dataclasses.is_dataclass(val) and not isinstance(val, type):
    return True
  if isinstance(val, (list, tuple)):
    return all(_is_hparams(x) for x in val) or all(isinstance(x, fdl.Buildable) for x in val)
  return isinstance(val, (dict, frozen_dict.FrozenDict, fdl.Buildable))


def _quote_string(s: str) -> str:
  """`s` in the quotes that need less escaping (single on a tie), that quote and backslashes
  escaped."""
  quote = "'" if s.count("'") <= s.count('"') else '"'
  return quote + s.replace("\\", "\\\\").replace(quote, "\\" + quote) + quote


def nested_struct_to_text(
  obj_to_visit: Any, include_types: bool = False, separator: str = ":", prefix: str = ""
) -> Any:
  """The `path : value` lines of `obj_to_visit`, sorted (see the module docstring).

  include_types: also return {path: type name of the value}. separator: what stands between
  path and value. prefix: put in front of every path (ours: the trainer writes 'task.…').
  """
  lines, types = {}, {}

  def leaf(key: str, val: Any) -> None:
    lines[key] = _quote_string(val) if isinstance(val, str) else str(_value_repr(val))
    types[key] = type(val).__name__

  visit_nested_struct(obj_to_visit, leaf, enter_fn=_enters, prefix=prefix)
  text = "".join(f"{k} {separator} {v}\n" for k, v in sorted(lines.items()))
  return (text, types) if include_types else text
