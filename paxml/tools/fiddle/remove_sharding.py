"""Removes the sharding annotations from a config of Pax layers (for graphs and generated code).

A sharding annotation is a layer's `weight_split_dims_mapping` / `activation_split_dims_mapping`
field, or any config of a `BaseLayer.WeightSharding` / `ActivationSharding` class.
"""

from typing import Any, TypeVar

import fiddle as fdl
from fiddle import daglish

from praxis import base_layer
from praxis import pax_fiddle

_T = TypeVar("_T")

BASE_LAYER_SHARDING_FIELDS = {"weight_split_dims_mapping", "activation_split_dims_mapping"}
SHARDING_TYPES = (base_layer.BaseLayer.WeightSharding, base_layer.BaseLayer.ActivationSharding)


def _is_sharding_annotation(value: Any, path: daglish.Path) -> bool:
  """Whether `value`, found at `path`, is a sharding annotation (by its field or its class)."""
  if path and isinstance(path[-1], daglish.Attr) and path[-1].name in BASE_LAYER_SHARDING_FIELDS:
    return True
  if isinstance(value, fdl.Buildable):
    target = fdl.get_callable(value)
    return isinstance(target, type) and issubclass(target, SHARDING_TYPES)
  return False


class _Removed:
  """Marks a child the parent config must drop."""


_REMOVED = _Removed()


def remove_sharding(config: _T, replace_with_default: bool = False) -> _T:
  """A copy of `config` without sharding annotations: the fields are unset, or, with
  `replace_with_default`, set to a fresh default of the layer's config."""

  def visit(value: Any, state: daglish.State) -> Any:
    value = state.map_children(value)
    if _is_sharding_annotation(value, state.current_path):
      return _REMOVED
    if isinstance(value, fdl.Buildable):
      for name, child in fdl.ordered_arguments(value).items():
        if child is _REMOVED:
          delattr(value, name)
          if replace_with_default:
            setattr(value, name, getattr(pax_fiddle.Config(fdl.get_callable(value)), name))
    return value

  return daglish.MemoizedTraversal.run(visit, config)
