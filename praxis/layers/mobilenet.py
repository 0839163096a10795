"""Pax's `praxis.layers.mobilenet` names; the MobileNet layers are not implemented here.

Pax's MobileNet (V2) needs depthwise convolutions, BatchNorm in conv stacks and spatial pooling
layers that this praxis does not have yet. The module exists so that code importing it loads;
building a MobileNet raises with this explanation.
"""

from __future__ import annotations

from praxis import base_layer

_MISSING = (
  "praxis.layers.mobilenet: Pax's MobileNet / InvertedResidualBlock are not implemented in "
  "this praxis (they need depthwise convolutions and pooling layers); see docs/praxis.md."
)


class InvertedResidualBlock(base_layer.BaseLayer):
  """Pax's MobileNetV2 block: not implemented (building it raises)."""

  def setup(self) -> None:
    raise NotImplementedError(_MISSING)


class MobileNet(base_layer.BaseLayer):
  """Pax's MobileNet: not implemented (building it raises)."""

  def setup(self) -> None:
    raise NotImplementedError(_MISSING)
