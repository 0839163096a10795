"""Pax's Fiddle tags: names for groups of config values that are usually set together.

Tag a field (`pax_fiddle.field(tags=fiddle_tags.ParamsDType)`) or an argument
(`fdl.add_tag(cfg, 'dtype', fiddle_tags.ParamsDType)`), then set every tagged value of a config
tree at once with `pax_fiddle.set_tagged(cfg, tag=fiddle_tags.ParamsDType, value=jnp.bfloat16)`.
`BaseDType` covers both dtype tags.
"""

import fiddle as fdl


class BaseDType(fdl.Tag):
  """Any JAX dtype of a layer (parameters or activations)."""


class ParamsDType(BaseDType):
  """The dtype of parameters."""


class ActivationDType(BaseDType):
  """The dtype of activations."""


class WeightInit(fdl.Tag):
  """A weight initialiser (a base_layer.WeightInit)."""


class ParamsSplitDimsMapping(fdl.Tag):
  """How parameters are split over the mesh."""


class ActivationSplitDimsMapping(fdl.Tag):
  """How activations are split over the mesh."""


class DropoutRate(fdl.Tag):
  """A dropout rate."""
