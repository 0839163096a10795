"""AutoMLSelect: one of several same-shaped branches, picked by a stored AutoML decision."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flax import linen as nn
import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes

template_field = base_layer.template_field


class AutoMLSelect(base_layer.BaseLayer):
  """Runs branch `decision` of `search_options` (children search_options_0, _1, ...).

  The decision is the non-trainable uint8 scalar `decision` (initialised to 0), which an AutoML
  controller writes into the variables. At init every branch runs once so all of their weights
  exist; afterwards only the chosen branch is computed (`nn.switch`).

  Attributes:
    search_options_tpl: the branch templates; each maps the input to outputs of one shape.
  """

  search_options_tpl: Sequence[base_layer.LayerTpl] | None = template_field(None)

  def setup(self) -> None:
    if not self.search_options_tpl:
      raise AttributeError(
        "AutoMLSelect needs at least one branch: set search_options_tpl to a list of layer configs."
      )
    self.create_children("search_options", self.search_options_tpl)
    self.create_variable(
      "decision",
      base_layer.WeightHParams(
        shape=[],
        init=base_layer.WeightInit.Constant(0),
        dtype=jnp.uint8,
        mesh_shape=self.mesh_shape,
      ),
      trainable=False,
    )

  def __call__(self, x: jax.Array, *args: Any, **kwargs: Any) -> Any:
    """x -> the chosen branch's output on x."""
    branches = [
      (lambda mdl, v, i=i: mdl.search_options[i](v)) for i in range(len(self.search_options))
    ]
    if self.is_mutable_collection(base_layer.PARAMS):
      for branch in branches:  # create every branch's weights
        branch(self, x)
    return nn.switch(self.get_var("decision"), branches, self, x)


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
NestedJTensor = pytypes.NestedJTensor
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
