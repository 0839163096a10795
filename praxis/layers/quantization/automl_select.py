"""Pax's AutoMLSelect: a layer that runs one of several branches, chosen by a `decision` variable.

The non-trainable `decision` (uint8 scalar, 0 at init) indexes
`search_options_{i}`; `rl_variables` [num options] holds an AutoML controller's
state. AutoMLSelect's branches are TensorQuantizers: it quantizes with the
chosen one (flax's nn.switch, so the choice can be traced).
"""

from __future__ import annotations

from typing import Sequence

from flax import linen as nn
import jax.numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes

JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = pax_fiddle.template_field
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams


class BaseAutoMLSelect(base_layer.BaseLayer):
  """Holds the branches `search_options_{i}` and the `decision` / `rl_variables` state.

  Attributes:
    search_options_tpl: one layer config per branch; all branches take and
      return the same shapes.
  """

  search_options_tpl: Sequence[LayerTpl] | None = template_field(None)

  def setup(self) -> None:
    if not self.search_options_tpl:
      raise AttributeError(
        f"{type(self).__name__}: search_options_tpl is empty; give at least one branch config."
      )
    self.create_children("search_options", self.search_options_tpl)
    self.create_variable(
      "decision",
      WeightHParams(
        shape=[], init=WeightInit.Constant(0), dtype=jnp.uint8, mesh_shape=self.mesh_shape
      ),
      trainable=False,
    )
    self.create_variable(
      "rl_variables",
      WeightHParams(
        shape=[len(self.search_options_tpl)],
        init=WeightInit.Constant(0),
        dtype=jnp.float32,
        mesh_shape=self.mesh_shape,
      ),
      trainable=False,
    )


class AutoMLSelect(BaseAutoMLSelect):
  """Quantizes with the TensorQuantizer branch that `decision` selects."""

  def __call__(
    self,
    x: JTensor,
    contract_dims: int | Sequence[int],
    squeeze_scale=True,
    quantized_dtype: jnp.dtype | None = None,
  ) -> tuple[JTensor, JTensor, JTensor | None]:
    def branch(i):
      def run(module, inputs):
        return module.search_options[i].quantize(
          inputs, contract_dims, squeeze_scale, quantized_dtype
        )

      return run

    branches = [branch(i) for i in range(len(self.search_options))]
    return nn.switch(self.get_var("decision"), branches, self, x)

  def quantize(
    self,
    x: JTensor,
    contract_dims: int | Sequence[int],
    squeeze_scale=True,
    quantized_dtype: jnp.dtype | None = None,
  ) -> tuple[JTensor, JTensor, JTensor | None]:
    return self.__call__(x, contract_dims, squeeze_scale, quantized_dtype)
