"""A Fiddle-friendly way to put a NestedMap in a config (Pax's `nested_map_config_helper`).

Fiddle's tools (serialization, codegen, graphviz) handle configs, lists, dicts and primitives;
a NestedMap inside a config is a custom object to them. `pax_fiddle.Config(make_nested_map,
base={...})` keeps a plain dict in the config and builds the NestedMap.
"""

from typing import Any

from praxis import pytypes


def make_nested_map(base: dict[str, Any]) -> pytypes.NestedMap:
  """A NestedMap with the items of `base` (nested dicts stay dicts)."""
  return pytypes.NestedMap(base)
