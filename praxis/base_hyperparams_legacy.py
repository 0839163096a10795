"""Pax's older configuration style: `BaseParameterizable` with a nested `HParams` dataclass.

Before Fiddle, a Pax class declared its hyperparameters in a nested dataclass and received an
instance of it:

    class Scaler(base_hyperparams.BaseParameterizable):
      _USE_DEPRECATED_HPARAMS_BASE_PARAMETERIZABLE = True   # Pax requires this opt-in

      class HParams(base_hyperparams.BaseHyperParams):
        factor: float = 2.0

      def __init__(self, hparams):
        super().__init__(hparams)

    p = Scaler.HParams(factor=3.0)        # a dataclass; p.cls is Scaler
    s = p.Instantiate()                   # Scaler(p); s.hparams is a frozen copy of p
    cfg = Scaler.config(factor=3.0)       # a Config of Scaler.make (Fiddle)

`sub_config_field(Other.HParams)` declares a field whose default is a fresh `Other.HParams()`
(a Config of it inside a Config). New code uses FiddleBaseParameterizable / BaseLayer fields.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import sys
from typing import Any, Callable, Sequence, TypeVar

from absl import logging
import fiddle as fdl

from praxis import base_hyperparams as _bh

BaseHyperParamsSelf = TypeVar("BaseHyperParamsSelf", bound="BaseHyperParams")
BaseParameterizableSelf = TypeVar("BaseParameterizableSelf", bound="BaseParameterizable")


@dataclasses.dataclass(frozen=True)
class SubConfigFactory:
  """The default_factory of a `sub_config_field`: makes a fresh HParams of the class that
  `_get_class()` returns (a function, so the class may be defined later)."""

  _get_class: Callable[[], type]

  def get_class(self) -> type:
    cls = self._get_class()
    if not (isinstance(cls, type) and issubclass(cls, BaseHyperParams)):
      raise TypeError(
        f"SubConfigFactory: {cls!r} is not a BaseHyperParams subclass; "
        "sub_config_field takes an HParams class (or lazy_ref returning one)."
      )
    return cls

  def __call__(self):
    return self.get_class()()


class OverrideSubConfigFieldProtocol:
  """An object `x` with `__to_sub_config_field__()`: `sub_config_field(x)` returns that field
  (how a Fiddle-configured class's `HParams` stands in for an HParams class)."""

  def __to_sub_config_field__(self):
    raise NotImplementedError(f"{type(self).__name__} must define __to_sub_config_field__.")


def sub_config_field(
  sub_config_cls: Any = None, *, lazy_ref: Callable[[], type] | None = None
) -> Any:
  """A dataclass field defaulting to a fresh `sub_config_cls()` (an HParams class).

  None (and no lazy_ref): a template defaulting to None. An object with
  `__to_sub_config_field__` (e.g. `SomeLayer.HParams` of a Fiddle-configured layer): its field,
  a template of the layer. `lazy_ref`: a function returning the class, for one defined later.
  """
  if sub_config_cls is not None and lazy_ref is not None:
    raise TypeError("sub_config_field: give sub_config_cls or lazy_ref, not both.")
  if sub_config_cls is None and lazy_ref is None:
    return _bh.template_field(None)
  if sub_config_cls is not None:
    if hasattr(sub_config_cls, "__to_sub_config_field__"):
      return sub_config_cls.__to_sub_config_field__()
    if not (isinstance(sub_config_cls, type) and issubclass(sub_config_cls, BaseHyperParams)):
      # A Fiddle-configured class itself: a template of it.
      return _bh.template_field(sub_config_cls)
    lazy_ref = lambda: sub_config_cls  # pylint: disable=unnecessary-lambda-assignment
  return dataclasses.field(default_factory=SubConfigFactory(_get_class=lazy_ref))


def _fill_sub_configs(cfg: fdl.Buildable, fields: Sequence[dataclasses.Field]) -> None:
  """Unset sub_config_field arguments of `cfg` become Configs of their HParams classes."""
  for dc_field in fields:
    if dc_field.name in cfg.__arguments__:
      continue
    if isinstance(dc_field.default_factory, SubConfigFactory):
      setattr(cfg, dc_field.name, dc_field.default_factory.get_class().config())


class BaseHyperParams:
  """Base of the nested `HParams` dataclasses. Every subclass becomes a dataclass; it may
  re-declare an inherited field only when the field is listed in `_attribute_overrides`.
  Assigning a field that does not exist raises; so does assigning to a frozen instance."""

  _attribute_overrides: tuple[str, ...] = ()

  @classmethod
  def config(cls: type[BaseHyperParamsSelf], **kwargs: Any) -> Any:
    """A Config building this HParams class (sub-configs filled in)."""
    cfg = _bh.Config(cls, **kwargs)
    _fill_sub_configs(cfg, dataclasses.fields(cls))
    return cfg

  @classmethod
  def partial(cls: type[BaseHyperParamsSelf], **kwargs: Any) -> Any:
    return fdl.cast(_bh.Partial, cls.config(**kwargs))

  def __init_subclass__(cls, **kwargs: Any) -> None:
    super().__init_subclass__(**kwargs)
    allowed = cls._attribute_overrides
    if not isinstance(allowed, tuple):
      raise TypeError(f"{cls.__qualname__}._attribute_overrides must be a tuple of names.")
    annotations = dict(cls.__dict__.get("__annotations__", {}))
    annotations.pop("_attribute_overrides", None)
    if annotations or "__annotations__" in cls.__dict__:
      cls.__annotations__ = annotations
    inherited = {}
    for base in cls.__mro__[1:]:
      for name in getattr(base, "__dataclass_fields__", {}):
        inherited.setdefault(name, base)
    dataclasses.dataclass(cls)
    for name in annotations:
      if name in inherited and name not in allowed:
        raise AttributeError(
          f"Attribute {name} was overridden while it is not explicitly listed in the "
          f"_attribute_overrides list of {cls.__qualname__} (add {name!r} there to re-declare "
          "it)."
        )

  def __setattr__(self, name: str, value: Any) -> None:
    if getattr(self, "_internal_frozen", False):
      raise AttributeError(f"This HParam object is frozen: {self}")
    if name not in {f.name for f in dataclasses.fields(self)}:
      raise AttributeError(f"Attribute {name} doesn't exist on {type(self).__qualname__}.")
    if isinstance(value, fdl.Buildable) and not isinstance(value, _bh.Config):
      logging.warning(
        "A Fiddle %s put into %s.%s: build the HParams from a Config instead.",
        type(value).__name__,
        type(self).__qualname__,
        name,
      )
    super().__setattr__(name, value)

  def __post_init__(self) -> None:
    object.__setattr__(self, "_internal_frozen", False)
    for dc_field in dataclasses.fields(self):
      value = getattr(self, dc_field.name)
      if isinstance(value, BaseHyperParams):  # own copy: no sharing with the caller's object
        setattr(self, dc_field.name, value.clone())

  def _set_frozen(self, frozen: bool) -> None:
    object.__setattr__(self, "_internal_frozen", frozen)
    for name in self.__dataclass_fields__:  # pylint: disable=no-member
      value = getattr(self, name)
      if isinstance(value, BaseHyperParams):
        value._set_frozen(frozen)  # pylint: disable=protected-access

  def freeze(self) -> None:
    """Makes this and nested HParams read-only."""
    self._set_frozen(True)

  def unfreeze(self) -> None:
    self._set_frozen(False)

  def clone(self) -> BaseHyperParams:
    """A deep, mutable copy."""
    cloned = copy.deepcopy(self)
    cloned.unfreeze()
    return cloned

  def copy_fields_from(
    self, source: BaseHyperParams, missing_fields_in_self: Sequence[str] | None = None
  ) -> None:
    """Copies every field of `source` but `cls` (nested HParams cloned). Fields of `source`
    that self lacks raise unless listed in `missing_fields_in_self`."""
    if not isinstance(source, BaseHyperParams):
      raise TypeError(
        f"copy_fields_from: the source must be a BaseHyperParams too, got {type(source).__name__}."
      )
    for name in self.__dataclass_fields__:  # pylint: disable=no-member
      if name == "cls" or not hasattr(source, name):
        continue
      value = getattr(source, name)
      setattr(self, name, value.clone() if isinstance(value, BaseHyperParams) else value)
    for name in source.__dataclass_fields__:  # pylint: disable=no-member
      if not hasattr(self, name) and name not in (missing_fields_in_self or ()):
        raise ValueError(f"Copying incompatible HParams: {name} not in self")

  def set(self, **kwargs) -> BaseHyperParams:
    for name, value in kwargs.items():
      setattr(self, name, value)
    return self

  def to_text(self, include_types: bool = False, separator: str = ":") -> str:
    del include_types, separator
    return _bh.nested_struct_to_text(self)


def _bind_hparams_to(cls: type) -> None:
  """Replaces `cls.HParams` by a subclass whose `cls` field defaults to `cls`."""
  base = cls.HParams
  bound = type(
    base.__name__,
    (base,),
    {
      "cls": cls,
      "_attribute_overrides": ("cls",),
      "__annotations__": {"cls": type},
      "__doc__": base.__doc__,
      "__module__": cls.__module__,
      "__qualname__": f"{cls.__qualname__}.{base.__name__}",
    },
  )
  cls.HParams = bound


class BaseParameterizable:
  """A class built from an instance of its nested `HParams` (Pax's pre-Fiddle style).

  Subclasses must set `_USE_DEPRECATED_HPARAMS_BASE_PARAMETERIZABLE = True` (as in Pax). Their
  `__init__` takes the HParams as `hparams` (or the name given by `init_params_arg_name=` in
  the class statement); any other `__init__` arguments must not repeat an HParams field.
  """

  class HParams(BaseHyperParams):
    """The class's hyperparameters (`cls` is filled in with the class)."""

    cls: type
    name: str = ""

    def Instantiate(self, **kwargs) -> Any:  # pylint: disable=invalid-name
      return self.cls(self, **kwargs)

  _config_init_name_for_params_object: str = "hparams"
  _nonconfigurable_init_args: tuple[str, ...] = ()

  def __init__(self, hparams: BaseParameterizable.HParams) -> None:
    self._hparams = hparams.clone()
    self._hparams.freeze()

  @property
  def hparams(self) -> BaseParameterizable.HParams:
    """The (frozen) hyperparameters this object was built with."""
    return self._hparams

  @classmethod
  def make(cls: type[BaseParameterizableSelf], **kwargs) -> BaseParameterizableSelf:
    """`cls(HParams(<HParams fields of kwargs>), <other kwargs>)`: what `config` builds."""
    hparams_args = {}
    missing = []
    for name, param in inspect.signature(cls.HParams).parameters.items():
      if name in kwargs:
        hparams_args[name] = kwargs.pop(name)
      elif param.default is param.empty:
        missing.append(name)
    if missing:
      raise ValueError(f"Missing required arguments: {set(missing)} when instantiating {cls}.")
    kwargs[cls._config_init_name_for_params_object] = cls.HParams(**hparams_args)
    return cls(**kwargs)

  @classmethod
  def config(cls: type[BaseParameterizableSelf], **kwargs) -> Any:
    """A Config of `cls.make`: the HParams fields and other `__init__` arguments."""
    cfg = _bh.Config(cls.make, **kwargs)
    _fill_sub_configs(cfg, dataclasses.fields(cls.HParams))
    return cfg

  @classmethod
  def partial(cls: type[BaseParameterizableSelf], **kwargs) -> Any:
    return fdl.cast(_bh.Partial, cls.config(**kwargs))

  def __init_subclass__(
    cls,
    init_params_arg_name: str | None = None,
    nonconfigurable_init_arg_names: tuple[str, ...] | None = None,
    **kwargs: Any,
  ) -> None:
    if not (
      hasattr(cls, "_USE_DEPRECATED_HPARAMS_BASE_PARAMETERIZABLE") or "google.colab" in sys.modules
    ):
      raise ValueError(
        f"{cls.__module__}.{cls.__qualname__}: new classes should subclass "
        "FiddleBaseParameterizable. To keep the HParams style, add "
        "_USE_DEPRECATED_HPARAMS_BASE_PARAMETERIZABLE = True to the class."
      )
    super().__init_subclass__(**kwargs)
    _bind_hparams_to(cls)
    if init_params_arg_name is not None:
      cls._config_init_name_for_params_object = init_params_arg_name
    if nonconfigurable_init_arg_names is not None:
      cls._nonconfigurable_init_args = cls._nonconfigurable_init_args + tuple(
        nonconfigurable_init_arg_names
      )
    _give_make_a_signature(cls)


def _give_make_a_signature(cls: type) -> None:
  """`cls.make`'s signature: the HParams fields (but `cls`) and `__init__`'s other arguments,
  so a Config of it checks names eagerly. Also checks `__init__`'s hparams argument."""
  init_params = inspect.signature(cls).parameters
  hparams_name = cls._config_init_name_for_params_object
  if hparams_name not in init_params:
    raise TypeError(
      f"{cls.__qualname__}.__init__ must have a parameter named {hparams_name}; "
      f"its signature is ({', '.join(init_params)})."
    )
  skip = set(cls._nonconfigurable_init_args) | {hparams_name}
  init_args = [p for p in init_params.values() if p.name not in skip]
  hparams_args = [p for p in inspect.signature(cls.HParams).parameters.values() if p.name != "cls"]
  duplicated = {p.name for p in init_args} & {p.name for p in hparams_args}
  if duplicated:
    raise TypeError(f"Duplicated parameter between `{cls}` and `{cls}.HParams`: {duplicated}.")
  params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in hparams_args + init_args]
  params.sort(key=lambda p: p.default is not inspect.Parameter.empty)

  def make(**kwargs):
    return BaseParameterizable.make.__func__(cls, **kwargs)

  make.__signature__ = inspect.Signature(params)
  make.__name__ = "make"
  make.__qualname__ = f"{cls.__qualname__}.make"
  make.__module__ = cls.__module__
  cls.make = staticmethod(make)
