"""Pax-style hyperparameters on Fiddle.

A configurable class (a layer, an input, an optimizer) is a dataclass whose fields are its typed,
documented hyperparameters. `Cls.HParams` makes Fiddle configs of it:

    cfg = Linear.HParams.config(input_dims=1, output_dims=1)   # a Config: nothing built yet
    cfg.input_dimz = 31337        # AttributeError at once, listing the valid names
    part = Linear.HParams.partial(input_dims=1)                # a Partial
    layer = cfg.Instantiate()     # or instantiate(cfg)

`Cls.HParams(...)` is the same as `Cls.HParams.config(...)`, as in Pax's older API.

Templates. A field declared with `template_field(Child)` holds a Config of a child. `instantiate`
does not build it: the parent receives the Config and builds its children itself (in Flax's
`setup`), after setting what it knows (for example the child's input size). Every other nested
Config is built, and one Config object reachable from two places is built once, so both places get
the same object: this is how two layers share one child (and, for Flax layers, its weights).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import functools
import typing
from typing import Any, Callable, TypeVar

import fiddle as fdl
import numpy as np

_T = TypeVar("_T")
_TEMPLATE = "praxis_template"
_INSTANCE = "praxis_instance_factory"


class _CloneAndSet:
  """`.clone()` and chained `.set(...)`, as Pax's configs have."""

  def __init__(self, fn_or_cls, *args, **kwargs):
    super().__init__(fn_or_cls, *args, **kwargs)
    # Fiddle cannot read a dataclass default made by a default_factory, and templates are exactly
    # such defaults: put a fresh value into the config so `cfg.linear_tpl.output_dims = 4` works.
    # An instance field (Pax's instance_field) gets a Config of its class, built with the parent.
    if dataclasses.is_dataclass(fn_or_cls):
      for field in dataclasses.fields(fn_or_cls):
        if (
          field.init
          and field.default_factory is not dataclasses.MISSING
          and field.name not in self.__arguments__
        ):
          setattr(self, field.name, _default_for_config(field))

  def clone(self):
    return copy.deepcopy(self)

  def set(self, **kwargs):
    for name, value in kwargs.items():
      setattr(self, name, value)
    return self

  Set = set  # pylint: disable=invalid-name

  @property
  def cls(self):
    """The class (or function) this config builds (Pax's `PaxConfig.cls`)."""
    return self.__fn_or_cls__

  def Instantiate(self, **overrides):  # pylint: disable=invalid-name
    """Builds this config (Pax's name for `instantiate`)."""
    return instantiate(self.clone().set(**overrides) if overrides else self)

  @property
  def mesh_shape(self):
    """ici_mesh_shape x dcn_mesh_shape (elementwise) of a layer config, as Pax's PaxConfig."""
    ici, dcn = getattr(self, "ici_mesh_shape"), getattr(self, "dcn_mesh_shape")
    if dcn is None or ici is None:
      return ici
    return [i * d for i, d in zip(ici, dcn)]

  def copy_fields_from(self, source: Any, missing_fields_in_self: Any = ()) -> None:
    """Copies every field `source` sets or defaults onto self (Pax's copy_fields_from)."""
    source = source.clone()
    own = {f.name for f in dataclasses.fields(self.__fn_or_cls__) if f.init}
    for field in dataclasses.fields(source.__fn_or_cls__):
      if not field.init or field.name in ("parent", "name"):
        continue
      if field.name not in own:
        if field.name in missing_fields_in_self:
          continue
        raise ValueError(f"Copying incompatible HParams: {field.name!r} not in self.")
      if field.name in source.__arguments__:
        setattr(self, field.name, getattr(source, field.name))
      elif field.default is not dataclasses.MISSING:
        setattr(self, field.name, field.default)


def _default_for_config(field: dataclasses.Field) -> Any:
  factory = field.metadata.get(_INSTANCE)
  if factory is not None:
    as_buildable = getattr(factory, "as_buildable", None)
    if as_buildable is not None:  # an auto_config function
      return as_buildable()
    if isinstance(factory, type):
      return Config(factory)
  return field.default_factory()


class Config(_CloneAndSet, fdl.Config):
  """A Fiddle Config with Pax's conveniences (Pax's `pax_fiddle.Config` / `PaxConfig`)."""


class Partial(_CloneAndSet, fdl.Partial):
  """A Fiddle Partial with Pax's conveniences; building it gives a functools.partial."""


def template_field(cls: Any = dataclasses.MISSING, **defaults) -> Any:
  """A dataclass field holding a Config of `cls` that the parent builds itself.

  `cls=None` declares a template that defaults to None; no argument at all declares a required
  template. As in Pax, a field whose type annotation is a Config (e.g. `pax_fiddle.Config[Linear]`)
  is a template too, whatever its default.
  """
  if cls is dataclasses.MISSING:
    return dataclasses.field(metadata={_TEMPLATE: True})
  if cls is None:
    return dataclasses.field(default=None, metadata={_TEMPLATE: True})

  def factory():
    return Config(cls, **defaults)

  return dataclasses.field(default_factory=factory, metadata={_TEMPLATE: True})


# Pax's older name for the same thing.
sub_config_field = template_field


def instance_field(default_factory: Any, tags: Any = ()) -> Any:
  """A field whose default is an object built from `default_factory` (Pax's instance_field).

  Built directly (`Layer()`), the field holds `default_factory()`; in a config it holds
  `Config(default_factory)` (or the auto_config'd factory's buildable), so the object's own fields
  can be configured before it is built together with its parent.
  """
  del tags
  if default_factory is None:
    return dataclasses.field(default=None)
  return dataclasses.field(default_factory=default_factory, metadata={_INSTANCE: default_factory})


def _annotation_is_config(annotation: Any) -> bool:
  """True for Config, Config[X], and containers / unions of them."""
  if isinstance(annotation, str):
    return (
      "Config" in annotation
      and "Callable" not in annotation
      and (
        "fiddle.Config" in annotation
        or "pax_fiddle.Config" in annotation
        or annotation.startswith("Config")
        or "LayerTpl" in annotation
        or "Tpl" in annotation
      )
    )
  origin = typing.get_origin(annotation)
  if isinstance(annotation, type) and issubclass(annotation, fdl.Buildable):
    return True
  if isinstance(origin, type) and issubclass(origin, fdl.Buildable):
    return True
  if origin is not None:
    return any(
      _annotation_is_config(arg) for arg in typing.get_args(annotation) if arg is not type(None)
    )
  return False


_TEMPLATE_CACHE: dict[Any, frozenset[str]] = {}


def template_field_names(cls: Any) -> frozenset[str]:
  """The names of `cls`'s fields that hold templates (by metadata or by Config annotation)."""
  if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
    return frozenset()
  cached = _TEMPLATE_CACHE.get(cls)
  if cached is not None:
    return cached
  try:
    hints = typing.get_type_hints(cls)
  except Exception:  # pylint: disable=broad-except
    hints = {}
  names = set()
  for field in dataclasses.fields(cls):
    if field.metadata.get(_TEMPLATE):
      names.add(field.name)
      continue
    annotation = hints.get(field.name, field.type)
    if _annotation_is_config(annotation):
      names.add(field.name)
  result = frozenset(names)
  _TEMPLATE_CACHE[cls] = result
  return result


def is_template_field(cls: type, name: str) -> bool:
  return name in template_field_names(cls)


class _HParamsFactory:
  """What `Cls.HParams` returns: builds configs of `Cls`."""

  def __init__(self, cls: type):
    self._cls = cls

  def config(self, **kwargs) -> Config:
    return Config(self._cls, **kwargs)

  def partial(self, **kwargs) -> Partial:
    return Partial(self._cls, **kwargs)

  def __call__(self, **kwargs) -> Config:
    return self.config(**kwargs)

  def __repr__(self):
    return f"{self._cls.__name__}.HParams"


class _HParamsDescriptor:
  def __get__(self, instance, owner) -> _HParamsFactory:
    return _HParamsFactory(owner)


class HParamsMixin:
  """Gives a dataclass (or Flax module) the `Cls.HParams.config(...)` entry point."""

  HParams = _HParamsDescriptor()


class FiddleBaseParameterizable(HParamsMixin):
  """Pax's base for configurable non-layer classes (tasks, learners, early-stopping functions).

  Every subclass becomes a keyword-only dataclass when it is defined, so its annotated class
  attributes are its fields, as in Pax: `class Stop(FiddleBaseParameterizable): target: float =
  1.0` is configured with `pax_fiddle.Config(Stop, target=2.0)`. All have a `name` field.
  """

  name: str = ""

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    dataclasses.dataclass(kw_only=True)(cls)

  @classmethod
  def config(cls, **kwargs) -> Config:
    return Config(cls, **kwargs)


dataclasses.dataclass(kw_only=True)(FiddleBaseParameterizable)


@contextlib.contextmanager
def _empty_flax_module_stack():
  """Builds objects outside any Flax module, as Pax does.

  A Flax module constructed while another module's `setup` runs is attached to it at once. Pax
  builds every layer unattached and lets the parent adopt it by attribute (`self.x = child`) or
  by field, so a config's nested layers never attach to whichever module happens to be running.
  """
  try:
    from flax.linen import module as flax_module  # pylint: disable=import-outside-toplevel
  except ImportError:
    yield
    return
  stack = flax_module._context.module_stack  # pylint: disable=protected-access
  saved = list(stack)
  stack[:] = [None]
  try:
    yield
  finally:
    stack[:] = saved


def instantiate(cfg: Any, **overrides) -> Any:
  """Builds a Config/Partial tree; template fields stay Configs (see module docstring).

  As in Pax, a layer config's inheritable fields (dtype, fprop_dtype, mesh shapes, params_init,
  ...: the class's `copy_base_hparams`) flow to the layer configs nested below it unless they set
  their own, and layers are built outside any running Flax module.
  """
  if overrides:
    cfg = cfg.clone().set(**overrides)
  with _empty_flax_module_stack():
    return _build(cfg, memo={}, parent=None)


# Pax's name.
build = instantiate


def _inherit(parent: Any, cfg: Any) -> Any:
  """A copy of layer config `cfg` with what it inherits from layer config `parent` filled in."""
  if parent is None or not isinstance(cfg, fdl.Buildable):
    return cfg
  target = cfg.__fn_or_cls__
  copier = getattr(target, "copy_base_hparams", None) if isinstance(target, type) else None
  if copier is None:
    return cfg
  cfg = copy.copy(cfg)
  copier(parent, cfg)
  return cfg


def _is_layer_config(value: Any) -> bool:
  return (
    isinstance(value, fdl.Buildable)
    and isinstance(value.__fn_or_cls__, type)
    and hasattr(value.__fn_or_cls__, "copy_base_hparams")
  )


def _build(value: Any, memo: dict[int, Any], parent: Any) -> Any:
  if isinstance(value, fdl.Buildable):
    if id(value) in memo:
      return memo[id(value)]
    key = id(value)
    value = _inherit(parent, value)
    target = value.__fn_or_cls__
    here = value if _is_layer_config(value) else parent
    templates = template_field_names(target) if isinstance(target, type) else frozenset()
    kwargs = {}
    for name, arg in value.__arguments__.items():
      if name in templates:
        kwargs[name] = _copy_template(arg, here)
      else:
        kwargs[name] = _build(arg, memo, here)
    if isinstance(value, fdl.Partial):
      built = functools.partial(target, **kwargs)
    else:
      built = target(**kwargs)
    memo[key] = built
    return built
  if isinstance(value, (list, tuple)):
    items = [_build(v, memo, parent) for v in value]
    return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
  if isinstance(value, dict):
    return type(value)((k, _build(v, memo, parent)) for k, v in value.items())
  return value


def _copy_template(value: Any, parent: Any) -> Any:
  """A template stays a Config (deep-copied); it inherits its parent layer's fields first."""
  if isinstance(value, fdl.Buildable):
    return _inherit(parent, copy.deepcopy(value))
  if isinstance(value, (list, tuple)):
    return type(value)(_copy_template(v, parent) for v in value)
  if isinstance(value, dict):
    return type(value)((k, _copy_template(v, parent)) for k, v in value.items())
  return copy.deepcopy(value)


# A class names in this attribute the fields its child templates take from it when it builds them
# (BaseLayer: dtype and fprop_dtype, which `create_child` copies onto every child layer).
INHERITED_BY_CHILDREN = "hparams_inherited_by_children"


def nested_struct_to_text(root: Any, prefix: str = "") -> str:
  """One `path : value` line per leaf of a config tree, sorted; the text of model_params.txt.

  Configs show their class as `path : type/module.Class`, then their arguments (defaults included,
  so the file records every value the run used). A child template of a class that passes fields
  down (its INHERITED_BY_CHILDREN attribute) shows the values it will be built with, the
  parent's: a layer's `fprop_dtype : bfloat16` is repeated on every child layer below it, where
  the template itself holds None.
  """
  lines: list[str] = []
  _to_lines(root, prefix, lines, {})
  return "\n".join(lines) + "\n"


def _inherited_names(target: Any) -> tuple[str, ...]:
  return tuple(getattr(target, INHERITED_BY_CHILDREN, ())) if isinstance(target, type) else ()


def _to_lines(value: Any, path: str, lines: list[str], inherited: dict[str, Any]) -> None:
  """`inherited`: the values the enclosing class passes down to a child that takes them."""
  if isinstance(value, fdl.Buildable):
    target = value.__fn_or_cls__
    kind = "partial" if isinstance(value, fdl.Partial) else "cls"
    lines.append(f"{path or '(root)'} : {kind}/{_qualname(target)}")
    args = _arguments_with_defaults(value)
    names = _inherited_names(target)
    # Only a class that passes the fields down also takes them, and only where it keeps the
    # field's default (Pax's copy_base_hparams: a child's own setting wins).
    defaults = _field_defaults(target)
    args.update(
      {
        name: inherited[name]
        for name in names
        if name in inherited and _same(args.get(name), defaults.get(name))
      }
    )
    passed_down = {name: args[name] for name in names if name in args}
    for name, arg in sorted(args.items()):
      if _is_flax_bookkeeping(target, name):
        continue
      _to_lines(arg, f"{path}.{name}" if path else name, lines, passed_down)
  elif dataclasses.is_dataclass(value) and not isinstance(value, type):
    lines.append(f"{path} : {_qualname(type(value))}")
    # A built object already holds what it was given: it only passes its values down.
    passed_down = {
      name: getattr(value, name) for name in _inherited_names(type(value)) if hasattr(value, name)
    }
    for field in dataclasses.fields(value):
      if _is_flax_bookkeeping(type(value), field.name):
        continue
      _to_lines(getattr(value, field.name), f"{path}.{field.name}", lines, passed_down)
  elif isinstance(value, dict) and value:
    # Containers are not classes: their items are the enclosing class's children.
    for key in sorted(value, key=str):
      _to_lines(value[key], f"{path}[{key!r}]", lines, inherited)
  elif isinstance(value, (list, tuple)) and any(isinstance(v, fdl.Buildable) for v in value):
    for index, item in enumerate(value):
      _to_lines(item, f"{path}[{index}]", lines, inherited)
  else:
    lines.append(f"{path} : {_leaf_text(value)}")


def _field_defaults(target: Any) -> dict[str, Any]:
  if not dataclasses.is_dataclass(target):
    return {}
  return {
    f.name: f.default for f in dataclasses.fields(target) if f.default is not dataclasses.MISSING
  }


def _same(a: Any, b: Any) -> bool:
  try:
    return a is b or bool(a == b)
  except Exception:  # pylint: disable=broad-except
    return False


def _is_flax_bookkeeping(target: Any, name: str) -> bool:
  """Flax modules' `parent` and `name` fields are wiring, not hyperparameters; other classes'
  `name` (an input's, say) is a real setting and is printed."""
  return (
    name in ("parent", "name")
    and isinstance(target, type)
    and any(c.__module__.startswith("flax.") and c.__name__ == "Module" for c in target.__mro__)
  )


def _arguments_with_defaults(cfg: fdl.Buildable) -> dict[str, Any]:
  args = {}
  target = cfg.__fn_or_cls__
  if dataclasses.is_dataclass(target):
    for field in dataclasses.fields(target):
      if not field.init:
        continue
      if field.default is not dataclasses.MISSING:
        args[field.name] = field.default
      elif field.default_factory is not dataclasses.MISSING:
        args[field.name] = field.default_factory()
  args.update(cfg.__arguments__)
  return args


def _qualname(target: Callable[..., Any]) -> str:
  return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"


def _leaf_text(value: Any) -> str:
  if isinstance(value, enum.Enum):
    return f"{type(value).__name__}.{value.name}"
  # Dtypes before callables: np.float32 and jnp.float32 are callable too, and "float32" reads
  # better in model_params.txt than "jax.numpy.float32".
  if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
    return str(np.dtype(value))
  if callable(value) and isinstance(getattr(value, "dtype", None), np.dtype):
    return str(value.dtype)  # jnp.float32, jnp.bfloat16, ... (jax's scalar types)
  if isinstance(value, type) or callable(value) and hasattr(value, "__qualname__"):
    return _qualname(value)
  if isinstance(value, str):
    return repr(value)
  return repr(value)
