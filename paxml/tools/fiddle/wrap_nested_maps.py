"""Replaces every NestedMap in a config by `pax_fiddle.Config(make_nested_map, base=dict(...))`,
which builds an equal NestedMap, so Fiddle's tools see only configs and dicts."""

from typing import Any

from fiddle import daglish

from paxml.experimental import nested_map_config_helper
from praxis import pax_fiddle
from praxis import pytypes


def wrap_nested_maps(config: Any) -> Any:
  """A copy of `config` (any structure of configs) with its NestedMaps wrapped; a NestedMap
  shared by several places stays one (shared) config."""

  def visit(value: Any, state: daglish.State) -> Any:
    if isinstance(value, pytypes.NestedMap):
      value = pax_fiddle.Config(nested_map_config_helper.make_nested_map, base=dict(value))
    return state.map_children(value)  # Also wraps NestedMaps nested inside this one.

  return daglish.MemoizedTraversal.run(visit, config)
