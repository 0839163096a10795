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

import copy
import dataclasses
import enum
from typing import Any, Callable, TypeVar

import fiddle as fdl
import numpy as np

_T = TypeVar("_T")
_TEMPLATE = "praxis_template"


class _CloneAndSet:
  """`.clone()` and chained `.set(...)`, as Pax's configs have."""

  def __init__(self, fn_or_cls, *args, **kwargs):
    super().__init__(fn_or_cls, *args, **kwargs)
    # Fiddle cannot read a dataclass default made by a default_factory, and templates are exactly
    # such defaults: put a fresh value into the config so `cfg.linear_tpl.output_dims = 4` works.
    if dataclasses.is_dataclass(fn_or_cls):
      for field in dataclasses.fields(fn_or_cls):
        if (field.init and field.default_factory is not dataclasses.MISSING and
            field.name not in self.__arguments__):
          setattr(self, field.name, field.default_factory())

  def clone(self):
    return copy.deepcopy(self)

  def set(self, **kwargs):
    for name, value in kwargs.items():
      setattr(self, name, value)
    return self

  def Instantiate(self, **overrides):  # pylint: disable=invalid-name
    """Builds this config (Pax's name for `instantiate`)."""
    return instantiate(self.clone().set(**overrides) if overrides else self)


class Config(_CloneAndSet, fdl.Config):
  """A Fiddle Config with Pax's conveniences."""


class Partial(_CloneAndSet, fdl.Partial):
  """A Fiddle Partial with Pax's conveniences; building it gives a functools.partial."""


def template_field(cls: type | None = None, **defaults) -> Any:
  """A dataclass field holding a Config of `cls` that the parent builds itself.

  `cls=None` declares a template that has no default (the user must set one).
  """
  def factory():
    return None if cls is None else Config(cls, **defaults)

  return dataclasses.field(default_factory=factory, metadata={_TEMPLATE: True})


# Pax's older name for the same thing.
sub_config_field = template_field


def is_template_field(cls: type, name: str) -> bool:
  if not dataclasses.is_dataclass(cls):
    return False
  for field in dataclasses.fields(cls):
    if field.name == name:
      return bool(field.metadata.get(_TEMPLATE))
  return False


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


def instantiate(cfg: Any) -> Any:
  """Builds a Config/Partial tree; template fields stay Configs (see module docstring)."""
  return _build(cfg, memo={})


def _build(value: Any, memo: dict[int, Any]) -> Any:
  if isinstance(value, fdl.Buildable):
    if id(value) in memo:
      return memo[id(value)]
    target = value.__fn_or_cls__
    kwargs = {}
    for name, arg in value.__arguments__.items():
      if isinstance(target, type) and is_template_field(target, name):
        kwargs[name] = copy.deepcopy(arg)
      else:
        kwargs[name] = _build(arg, memo)
    if isinstance(value, fdl.Partial):
      import functools  # pylint: disable=import-outside-toplevel
      built = functools.partial(target, **kwargs)
    else:
      built = target(**kwargs)
    memo[id(value)] = built
    return built
  if isinstance(value, (list, tuple)):
    items = [_build(v, memo) for v in value]
    return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
  if isinstance(value, dict):
    return type(value)((k, _build(v, memo)) for k, v in value.items())
  return value


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
    # Only a class that passes the fields down also takes them (create_child's rule).
    args.update({name: inherited[name] for name in names if name in inherited})
    passed_down = {name: args[name] for name in names if name in args}
    for name, arg in sorted(args.items()):
      if _is_flax_bookkeeping(target, name):
        continue
      _to_lines(arg, f"{path}.{name}" if path else name, lines, passed_down)
  elif dataclasses.is_dataclass(value) and not isinstance(value, type):
    lines.append(f"{path} : {_qualname(type(value))}")
    # A built object already holds what it was given: it only passes its values down.
    passed_down = {name: getattr(value, name) for name in _inherited_names(type(value))
                   if hasattr(value, name)}
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


def _is_flax_bookkeeping(target: Any, name: str) -> bool:
  """Flax modules' `parent` and `name` fields are wiring, not hyperparameters; other classes'
  `name` (an input's, say) is a real setting and is printed."""
  return (name in ("parent", "name") and isinstance(target, type) and
          any(c.__module__.startswith("flax.") and c.__name__ == "Module" for c in target.__mro__))


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
