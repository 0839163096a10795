"""Pax's `praxis.layers.resnets` names; the ResNet layers are not implemented here.

Pax's ResNet needs 2-D convolutions with padding modes, BatchNorm in conv stacks and spatial
pooling layers that this praxis does not have yet (convolutions has only Conv2D). The module
exists so that code importing it loads; building a ResNet, or asking for one of Pax's preset
configs, raises with this explanation.
"""

from __future__ import annotations

from praxis import base_layer

_MISSING = (
  "praxis.layers.resnets: Pax's ResNet / ResNetBlock / ResNetBasicBlock are not implemented in "
  "this praxis (they need Pax's conv stack and pooling layers); see docs/praxis.md."
)


class ResNetBlock(base_layer.BaseLayer):
  """Pax's ResNet bottleneck block: not implemented (building it raises)."""

  def setup(self) -> None:
    raise NotImplementedError(_MISSING)


class ResNetBasicBlock(ResNetBlock):
  """Pax's ResNet basic block: not implemented (building it raises)."""


class ResNet(base_layer.BaseLayer):
  """Pax's ResNet: not implemented; building it, or a preset config, raises."""

  def setup(self) -> None:
    raise NotImplementedError(_MISSING)

  @classmethod
  def _preset(cls, depth: int):
    raise NotImplementedError(f"ResNet.HParamsResNet{depth}: {_MISSING}")

  @classmethod
  def HParamsResNet5(cls):  # noqa: N802 (Pax's name)
    return cls._preset(5)

  @classmethod
  def HParamsResNet18(cls):  # noqa: N802
    return cls._preset(18)

  @classmethod
  def HParamsResNet34(cls):  # noqa: N802
    return cls._preset(34)

  @classmethod
  def HParamsResNet50(cls):  # noqa: N802
    return cls._preset(50)

  @classmethod
  def HParamsResNet101(cls):  # noqa: N802
    return cls._preset(101)

  @classmethod
  def HParamsResNet152(cls):  # noqa: N802
    return cls._preset(152)
