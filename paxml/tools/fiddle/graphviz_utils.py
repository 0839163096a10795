"""`render`: a graphviz drawing of a (normalized) experiment config, as Pax's Fiddle tools give.

Pax configs carry large expanded defaults and shared sharding lists; normalizing first
(config_normalization) keeps the drawing to what the experiment actually sets.
"""

from fiddle import graphviz as fiddle_graphviz
import graphviz
from paxml.tools.fiddle import config_normalization


def render(
  config,
  *,
  max_depth: int | None = 4,
  max_str_length: int | None = 100,
  remove_defaults: bool = True,
  convert_dataclasses: bool = True,
  remove_sharding_annotations: bool = False,
  unshare_sharding_config: bool = True,
) -> graphviz.Graph:
  """Normalizes `config` with the given switches (see ConfigNormalizer) and draws it, nested
  configs below `max_depth` collapsed, strings cut at `max_str_length`."""
  normalizer = config_normalization.ConfigNormalizer(
    remove_defaults=remove_defaults,
    convert_dataclasses=convert_dataclasses,
    remove_sharding_annotations=remove_sharding_annotations,
    unshare_sharding_config=unshare_sharding_config,
  )
  return fiddle_graphviz.render(
    config=normalizer(config), max_depth=max_depth, max_str_length=max_str_length
  )
