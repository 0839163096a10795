"""Pax's `praxis.layers.sequential.Sequential`: layers applied in a chain.

    seq = pax_fiddle.Config(Sequential, layers=[conv_cfg, pool_cfg, ...])

The layers are built with the Sequential and named `layers_0`, `layers_1`, ... in the variable
tree. A layer's tuple output is passed on as positional arguments, a dict output as keywords.
"""

from __future__ import annotations

from typing import Any, Sequence

from praxis import base_layer


class Sequential(base_layer.BaseLayer):
  """Applies `layers` in order (module docstring).

  Attributes:
    layers: the layers (configs in a config, built with it).
  """

  layers: Sequence[Any] | None = None

  def __call__(self, *args, **kwargs) -> Any:
    if not self.layers:
      raise ValueError(f"Sequential {self.name} has no layers; set `layers` on its config.")
    out = self.layers[0](*args, **kwargs)
    for layer in self.layers[1:]:
      if isinstance(out, tuple):
        out = layer(*out)
      elif isinstance(out, dict):
        out = layer(**out)
      else:
        out = layer(out)
    return out
