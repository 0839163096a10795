"""Pax's `praxis.pax_fiddle`: Fiddle configs for praxis layers, with Pax's names.

    from praxis import pax_fiddle
    cfg = pax_fiddle.Config(linears.Linear, name='l', input_dims=2, output_dims=3)
    layer = pax_fiddle.instantiate(cfg)      # or base_layer.instantiate(cfg), cfg.Instantiate()

What building does, as in Pax:
  * template fields (declared with `template_field`, or annotated with a Config type such as
    `pax_fiddle.Config[Linear]`) are not built: the layer receives the Config and builds its
    children in `setup` with `create_child`;
  * `instance_field` fields hold a Config of their class inside a config, and are built with it;
  * layer configs nested in a layer config inherit its dtype, fprop_dtype, mesh shapes, mesh axis
    names, skip_lp_regularization and (when left at the default) params_init
    (`BaseLayer.copy_base_hparams`), unless they set their own;
  * layers are built outside any running Flax module, so a parent adopts them by name.

`PaxConfig` is `Config`; `Cls.HParams.config(...)` (the seed's style) makes the same Config.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, TypeVar, Union

import fiddle as fdl
from fiddle import daglish
from fiddle.experimental import auto_config as _fdl_auto_config

from praxis import base_hyperparams

Config = base_hyperparams.Config
PaxConfig = base_hyperparams.Config
Partial = base_hyperparams.Partial
PaxPartial = base_hyperparams.Partial
instantiate = base_hyperparams.instantiate
build = base_hyperparams.instantiate
template_field = base_hyperparams.template_field
instance_field = base_hyperparams.instance_field
field = base_hyperparams.field
fdl_field = base_hyperparams.field  # Pax's older name
FieldMetadata = base_hyperparams.FieldMetadata
field_metadata = base_hyperparams.field_metadata
field_has_tag = base_hyperparams.field_has_tag
ArgFactory = base_hyperparams.ArgFactory
PaxArgFactory = base_hyperparams.ArgFactory
update_callable = base_hyperparams.update_callable
CloneAndSetMixin = base_hyperparams.CloneAndSetMixin
empty_flax_module_stack = base_hyperparams.empty_flax_module_stack
TagOrTags = Union[type[fdl.Tag], Collection[type[fdl.Tag]]]
_T = TypeVar("_T")
TypeOrCallableProducingT = Union[Callable[..., _T], type[_T]]

# Fiddle's own names, as Pax re-exports them.
Buildable = fdl.Buildable
Tag = fdl.Tag
TaggedValue = fdl.TaggedValue
add_tag = fdl.add_tag
set_tags = fdl.set_tags
get_tags = fdl.get_tags
clear_tags = fdl.clear_tags
remove_tag = fdl.remove_tag
get_callable = fdl.get_callable
ordered_arguments = fdl.ordered_arguments
copy_with = fdl.copy_with
deepcopy_with = fdl.deepcopy_with
assign = fdl.assign
cast = fdl.cast
NO_VALUE = fdl.NO_VALUE
materialize_defaults = fdl.materialize_defaults
set_tagged = fdl.set_tagged
# Fiddle's traversals over config trees (Pax registers its HParams classes in its own registry;
# configs here are Fiddle's own, which daglish's default registry already walks).
BasicTraversal = daglish.BasicTraversal
MemoizedTraversal = daglish.MemoizedTraversal
iterate = daglish.iterate


class DoNotBuild(fdl.Tag):
  """Tag for an argument that building leaves as a Config (what template fields are)."""


def auto_config(fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
  """Fiddle's auto_config producing this module's Config and Partial (Pax's auto_config).

  `make_model.as_buildable()` returns a Config tree; calling `make_model()` builds directly.
  Applied to a class, it configures a call of the class with no arguments.
  """
  user_policy = kwargs.pop(
    "experimental_exemption_policy", _fdl_auto_config.auto_config_policy.latest
  )

  def exempt(fn_or_cls):
    return (
      fn_or_cls is Config
      or getattr(fn_or_cls, "__func__", None) is _fdl_auto_config.AutoConfig.as_buildable
      or user_policy(fn_or_cls)
    )

  kwargs["experimental_exemption_policy"] = exempt
  kwargs["experimental_allow_control_flow"] = True
  kwargs["experimental_config_types"] = _fdl_auto_config.ConfigTypes(
    config_cls=Config, partial_cls=Partial
  )
  kwargs["experimental_result_must_contain_buildable"] = False

  def wrap(target):
    if isinstance(target, type):
      cls = target

      def call_constructor():
        return cls()

      target = call_constructor
    if _fdl_auto_config.is_auto_config(target):
      return target
    return _fdl_auto_config.auto_config(target, **kwargs)

  return wrap if fn is None else wrap(fn)
