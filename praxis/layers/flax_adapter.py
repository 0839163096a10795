"""Flax modules as praxis layers (Pax's flax_adapter).

    adapter = pax_fiddle.Config(FlaxModuleAdapter, module_factory_method=MyFlaxModule)
    direct = DirectFlaxModuleAdapter(cld=MyFlaxModule())      # e.g. inside pax_fiddle.auto_config

The wrapped module is the child `cld`. At init its variables are boxed with WeightHParams
(praxis.flax_utils.convert_to_boxed_params): `params` trainable, every other collection (e.g.
BatchNorm's `batch_stats`) non-trainable and averaged across replicas, and Flaxformer-style
axis annotations turned into mesh shardings by `logical_axes_rules`. Outside init the module
runs as is, under those axis rules.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
import dataclasses
import functools
from typing import Any

import flax.linen as nn
from flax.linen import partitioning as flax_partitioning

from praxis import base_layer
from praxis import flax_utils
from praxis import pax_fiddle
from praxis import pytypes


class _InternalBaseFlaxAdapter(base_layer.BaseLayer):
  """Runs methods of the Flax child `cld`, boxing its variables at init.

  Attributes:
    logical_axes_rules: [(logical axis, mesh axis), ...] for the module's axis annotations
      (weights and activations), e.g. [('input', 'mdl'), ('output', 'data')].
    var_collection_map: {collection: [WeightHParamsCollection, ...]} for collections other than
      params whose weights are not the default non-trainable, mean-synced ones.
  """

  logical_axes_rules: Any = None
  var_collection_map: dict[str, list[str]] = dataclasses.field(default_factory=dict)

  def setup(self) -> None:
    if not isinstance(self.cld, nn.Module):
      raise TypeError(
        f"{type(self).__name__} needs a Flax module as `cld`, got {type(self.cld).__name__}."
      )

  def _call_with_boxed_params_init(self, unbound_method, *args, **kwargs):
    """unbound_method(cld, *args, **kwargs) under the axis rules; at init, boxing its variables."""

    def call(module, *a, **k):
      # Maps the module's activation axis names to mesh axes (with_sharding_constraint).
      with flax_partitioning.axis_rules(self.logical_axes_rules or ()):
        return unbound_method(module, *a, **k)

    if not self.is_initializing():
      return call(self.cld, *args, **kwargs)
    boxed_call = nn.map_variables(
      call,
      mapped_collections=True,
      mutable=True,
      # A module called twice during init reads back the raw values it created.
      trans_in_fn=base_layer.maybe_unbox_value,
      trans_out_fn=functools.partial(
        flax_utils.convert_to_boxed_params,
        logical_axes_rules=self.logical_axes_rules,
        mesh_shape=self.mesh_shape,
        var_collection_map=self.var_collection_map,
      ),
    )
    return boxed_call(self.cld, *args, **kwargs)

  def __call__(self, *args, **kwargs):
    return self._call_with_boxed_params_init(type(self.cld).__call__, *args, **kwargs)

  def call_method(self, method_name: str, *args, **kwargs):
    """Runs the wrapped module's method `method_name` (e.g. 'classify')."""
    return self._call_with_boxed_params_init(getattr(type(self.cld), method_name), *args, **kwargs)


class DirectFlaxModuleAdapter(_InternalBaseFlaxAdapter):
  """Wraps the Flax module given as the field `cld` (Pax's preferred adapter).

  Attributes:
    cld: the Flax module.
  """

  cld: nn.Module | None = pax_fiddle.instance_field(None)


class FlaxModuleAdapterBase(_InternalBaseFlaxAdapter, metaclass=abc.ABCMeta):
  """Wraps the Flax module that `_build_wrapped_module()` returns (built in setup as `cld`)."""

  def setup(self) -> None:
    self.cld = self._build_wrapped_module()
    super().setup()

  @abc.abstractmethod
  def _build_wrapped_module(self) -> nn.Module:
    """The Flax module to wrap."""


class FlaxModuleAdapter(FlaxModuleAdapterBase):
  """Wraps the Flax module made by `module_factory_method()`.

  Attributes:
    module_factory_method: a callable (class, function, fdl.Partial) returning the module.
  """

  module_factory_method: Callable[[], nn.Module] | None = None

  def _build_wrapped_module(self) -> nn.Module:
    if self.module_factory_method is None:
      raise ValueError(
        "FlaxModuleAdapter needs module_factory_method, a callable returning the module."
      )
    return self.module_factory_method()


class EncoderDecoderFlaxModuleAdaptor(FlaxModuleAdapter):
  """FlaxModuleAdapter that also forwards `encode`, `decode` and `compute_logits`."""

  def encode(self, *args, **kwargs):
    return self.call_method("encode", *args, **kwargs)

  def decode(self, *args, **kwargs):
    return self.call_method("decode", *args, **kwargs)

  def compute_logits(self, *args, **kwargs):
    return self.call_method("compute_logits", *args, **kwargs)


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
LogicalAxisRules = pytypes.LogicalAxisRules
