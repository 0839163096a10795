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
import functools
import inspect
import typing
import weakref
from typing import Any, Callable, TypeVar

import fiddle as fdl
from fiddle import daglish

_T = TypeVar("_T")
_TEMPLATE = "praxis_template"
_INSTANCE = "praxis_instance_factory"
_FIDDLE_FIELD = "praxis_fiddle_field"


@dataclasses.dataclass(frozen=True)
class FieldMetadata:
  """What Pax's `field` attaches to a dataclass field: Fiddle tags for the field's argument in
  a config, and a zero-argument function giving the argument's value in a config that leaves it
  unset (None: the field's own default)."""

  tags: tuple[Any, ...]
  buildable_initializer: Callable[[], Any] | None


def _as_tags(tags: Any) -> tuple[Any, ...]:
  if isinstance(tags, type) and issubclass(tags, fdl.Tag):
    return (tags,)
  return tuple(tags or ())


def field_metadata(dc_field: dataclasses.Field) -> FieldMetadata | None:
  """The FieldMetadata that `field` attached to `dc_field`, or None."""
  return dc_field.metadata.get(_FIDDLE_FIELD)


def field_has_tag(dc_field: dataclasses.Field, tag: Any) -> bool:
  """Whether configs give `dc_field`'s argument `tag`."""
  meta = field_metadata(dc_field)
  return meta is not None and tag in meta.tags


def field(
  *,
  default_factory: Any = dataclasses.MISSING,
  tags: Any = (),
  metadata: Any = None,
  configurable_factory: bool = False,
  **kwargs,
) -> Any:
  """`dataclasses.field` with Pax's Fiddle extras (Pax's `pax_fiddle.field`).

  tags: Fiddle tags put on the field's argument in every config of the class.
  default_factory: as in dataclasses; an `auto_config`'d factory puts its Config tree
    (`as_buildable()`) into configs of the class, so its inner values can be configured.
  configurable_factory: put `Config(default_factory)` into configs instead (the factory must
    be a class or function; not for auto_config'd ones).
  """
  from fiddle.experimental import auto_config as fdl_auto_config  # pylint: disable=import-outside-toplevel

  if fdl_auto_config.is_auto_config(default_factory):
    if configurable_factory:
      raise ValueError(
        "configurable_factory should not be used with auto_config'ed functions "
        "(field: the auto_config'd default_factory's Config tree is used already)."
      )
    initializer = default_factory.as_buildable
  elif configurable_factory:
    if default_factory is dataclasses.MISSING or not callable(default_factory):
      raise ValueError(
        "field: configurable_factory=True needs a default_factory that is a "
        "class or function with a signature."
      )
    initializer = functools.partial(Config, default_factory)
  else:
    initializer = None
  metadata = {
    **(metadata or {}),
    _FIDDLE_FIELD: FieldMetadata(tags=_as_tags(tags), buildable_initializer=initializer),
  }
  return dataclasses.field(default_factory=default_factory, metadata=metadata, **kwargs)


def _apply_field_metadata(cfg: Any, fields: Any) -> None:
  """Tags and initial values that `field` declared, put on a new config of a dataclass."""
  for dc_field in fields:
    meta = field_metadata(dc_field)
    if meta is None:
      continue
    for tag in meta.tags:
      fdl.add_tag(cfg, dc_field.name, tag)
    if meta.buildable_initializer is not None and dc_field.name not in cfg.__arguments__:
      value = meta.buildable_initializer()
      if _has_partial_holding_config(value):
        # A Config inside a Partial is shared by the Partial's calls; inside this field's
        # factory it must not be, and no Fiddle buildable says "once per outer call".
        raise ValueError(
          f"Unable to safely replace {getattr(cfg.__fn_or_cls__, '__qualname__', cfg)}."
          f"{dc_field.name} with a Pax Buildable: its default factory makes a Partial that "
          "holds a Config, whose sharing Fiddle cannot express. Give the field an explicit "
          "value in the config, or a factory without that nesting."
        )
      if isinstance(cfg, (fdl.Partial, fdl.ArgFactory)) and isinstance(value, fdl.Config):
        # A partial builds many objects: each must get its own value (and its own nested
        # values), made at call time.
        value = _configs_to_arg_factories(value)
      setattr(cfg, dc_field.name, value)


def _has_partial_holding_config(value: Any) -> bool:
  """Whether `value` holds a Partial / ArgFactory that (at any depth) holds a Config."""
  for sub, _ in daglish.iterate(value):
    if isinstance(sub, (fdl.Partial, fdl.ArgFactory)) and any(
      isinstance(inner, fdl.Config) for inner, _ in daglish.iterate(sub)
    ):
      return True
  return False


def _configs_to_arg_factories(value: Any) -> Any:
  """`value` with every Config (outside nested Partials) turned into an ArgFactory."""

  def convert(node, state):
    if not isinstance(node, fdl.Partial):
      node = state.map_children(node)
    if isinstance(node, fdl.Config):
      node = fdl.cast(ArgFactory, node)
    return node

  return daglish.MemoizedTraversal.run(convert, value)


class _CloneAndSet:
  """`.clone()` and chained `.set(...)`, as Pax's configs have."""

  def __init__(self, fn_or_cls, *args, **kwargs):
    super().__init__(fn_or_cls, *args, **kwargs)
    # Fiddle cannot read a dataclass default made by a default_factory, and templates are exactly
    # such defaults: put a fresh value into the config so `cfg.linear_tpl.output_dims = 4` works.
    # An instance field (Pax's instance_field) gets a Config of its class, built with the parent.
    if dataclasses.is_dataclass(fn_or_cls):
      self._fill_dataclass_defaults()

  def _fill_dataclass_defaults(self) -> None:
    fields = dataclasses.fields(self.__fn_or_cls__)
    _apply_field_metadata(self, fields)
    for dc_field in fields:
      if (
        dc_field.init
        and dc_field.default_factory is not dataclasses.MISSING
        and dc_field.name not in self.__arguments__
      ):
        setattr(self, dc_field.name, _default_for_config(dc_field))

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

  def __setattr__(self, name: str, value: Any) -> None:
    if name == "cls":  # Pax: `cfg.cls = Other` re-targets the config, keeping its arguments
      update_callable(self, value)
    else:
      super().__setattr__(name, value)

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
    """Copies every field `source` sets or defaults onto self (Pax's copy_fields_from).

    Fields of `source` that self lacks raise unless named in `missing_fields_in_self`; `parent`
    is never copied; a required field `source` leaves unset raises.
    """
    if not isinstance(source, _CloneAndSet) or not isinstance(source, fdl.Config):
      raise TypeError(
        f"copy_fields_from: the source must be a pax_fiddle.Config, got {type(source).__name__}."
      )
    source = source.clone()
    own = {f.name for f in dataclasses.fields(self.__fn_or_cls__) if f.init and f.name != "parent"}
    for field in dataclasses.fields(source.__fn_or_cls__):
      if not field.init or field.name == "parent":
        continue
      if field.name not in own:
        if field.name in missing_fields_in_self:
          continue
        raise ValueError(f"Copying incompatible HParams: {field.name!r} not in self")
      if field.name in source.__arguments__ and not _holds_factory_default(source, field):
        setattr(self, field.name, getattr(source, field.name))
      elif field.default_factory is not dataclasses.MISSING:
        # Pax: a default_factory default copies only where self's field has the same factory.
        target_field = {f.name: f for f in dataclasses.fields(self.__fn_or_cls__)}[field.name]
        if target_field.default_factory is not field.default_factory:
          raise ValueError(
            f"Can't copy from default_factory {source.__fn_or_cls__.__qualname__}.{field.name}: "
            f"{self.__fn_or_cls__.__qualname__}.{field.name} has another default; set the "
            "value explicitly in the source."
          )
        setattr(self, field.name, _default_for_config(field))
      elif field.default is not dataclasses.MISSING:
        setattr(self, field.name, field.default)
      elif field.default_factory is dataclasses.MISSING:
        raise ValueError(
          f"Can't copy from missing required value {source.__fn_or_cls__.__qualname__}.{field.name}"
        )


# Pax's name for the clone / set mixin.
CloneAndSetMixin = _CloneAndSet


def _default_for_config(field: dataclasses.Field) -> Any:
  """The value a new config gets for a field with a default_factory (Pax: instance fields get
  their factory's auto_config'd Config tree, so its values can be configured)."""
  factory = field.metadata.get(_INSTANCE)
  if factory is not None:
    as_buildable = getattr(factory, "as_buildable", None)
    if as_buildable is not None:  # an auto_config function
      return as_buildable()
    from praxis import pax_fiddle  # pylint: disable=import-outside-toplevel

    try:
      return pax_fiddle.auto_config(factory).as_buildable()
    except Exception:  # pylint: disable=broad-except
      # A factory auto_config cannot trace: a Config of a class, or the built value.
      if isinstance(factory, type):
        return Config(factory)
  return field.default_factory()


class PaxConfig(_CloneAndSet, fdl.Config):
  """A Fiddle Config with Pax's conveniences (Pax's `pax_fiddle.Config` / `PaxConfig`)."""


Config = PaxConfig


class PaxPartial(_CloneAndSet, fdl.Partial):
  """A Fiddle Partial with Pax's conveniences; building it gives a functools.partial."""


Partial = PaxPartial


class PaxArgFactory(_CloneAndSet, fdl.ArgFactory):
  """A Fiddle ArgFactory with Pax's conveniences: inside a Partial, makes a new value per call."""


ArgFactory = PaxArgFactory


def _holds_factory_default(cfg: Any, dc_field: dataclasses.Field) -> bool:
  """Whether `cfg`'s value for `dc_field` is the one a new config got from a plain
  default_factory (filled in by `_fill_dataclass_defaults`, not set by the user)."""
  if dc_field.default_factory is dataclasses.MISSING or dc_field.metadata.get(_INSTANCE):
    return False
  if dc_field.metadata.get(_TEMPLATE):
    return False
  meta = field_metadata(dc_field)
  if meta is not None and meta.buildable_initializer is not None:
    return False
  try:
    return bool(cfg.__arguments__.get(dc_field.name) == dc_field.default_factory())
  except Exception:  # pylint: disable=broad-except
    return False


def update_callable(buildable: Any, new_callable: Any, drop_invalid_args: bool = False) -> None:
  """Points `buildable` at another class or function (Fiddle's update_callable), then adds the
  new dataclass's field tags and default values as a new config of it would have them.

  Defaults the old dataclass's plain default_factories filled in (not set by the user) are
  dropped first when the new callable has no such argument, as Pax's configs never held them.
  """
  old = buildable.__fn_or_cls__
  if dataclasses.is_dataclass(old) and isinstance(buildable, _CloneAndSet):
    try:
      new_names = set(inspect.signature(new_callable).parameters)
    except (TypeError, ValueError):
      new_names = None
    if new_names is not None:
      for dc_field in dataclasses.fields(old):
        if (
          dc_field.name in buildable.__arguments__
          and dc_field.name not in new_names
          and _holds_factory_default(buildable, dc_field)
        ):
          delattr(buildable, dc_field.name)
  fdl.update_callable(buildable, new_callable, drop_invalid_args)
  if dataclasses.is_dataclass(buildable.__fn_or_cls__) and isinstance(buildable, _CloneAndSet):
    buildable._fill_dataclass_defaults()  # pylint: disable=protected-access


def template_field(cls: Any = dataclasses.MISSING, tags: Any = (), **defaults) -> Any:
  """A dataclass field holding a Config of `cls` that the parent builds itself.

  `cls=None` declares a template that defaults to None; no argument at all declares a required
  template. As in Pax, a field whose type annotation is a Config (e.g. `pax_fiddle.Config[Linear]`)
  is a template too, whatever its default.
  """
  meta = {
    _TEMPLATE: True,
    _FIDDLE_FIELD: FieldMetadata(tags=_as_tags(tags), buildable_initializer=None),
  }
  if cls is dataclasses.MISSING:
    return dataclasses.field(metadata=meta)
  if cls is None:
    return dataclasses.field(default=None, metadata=meta)
  if cls in (list, tuple, dict) and not defaults:
    # `template_field(list)`: an empty container of templates (Pax's auto_config of the type).
    return dataclasses.field(default_factory=cls, metadata=meta)

  def factory():
    if not isinstance(cls, type) and not defaults:
      # A function returning the template's object (e.g. `lambda: Wheel(color='red')`): its
      # auto_config'd Config, as in Pax.
      from praxis import pax_fiddle  # pylint: disable=import-outside-toplevel

      return pax_fiddle.auto_config(cls).as_buildable()
    return Config(cls, **defaults)

  return dataclasses.field(default_factory=factory, metadata=meta)


def instance_field(default_factory: Any, tags: Any = ()) -> Any:
  """A field whose default is an object built from `default_factory` (Pax's instance_field).

  Built directly (`Layer()`), the field holds `default_factory()`; in a config it holds
  `Config(default_factory)` (or the auto_config'd factory's buildable), so the object's own fields
  can be configured before it is built together with its parent.
  """
  meta = {_FIDDLE_FIELD: FieldMetadata(tags=_as_tags(tags), buildable_initializer=None)}
  if default_factory is None:
    return dataclasses.field(default=None, metadata=meta)
  return dataclasses.field(
    default_factory=default_factory, metadata={**meta, _INSTANCE: default_factory}
  )


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


_TEMPLATE_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _signature_hints(fn_or_cls: Any) -> dict[str, Any]:
  """The argument annotations of a function, a class's __init__, or a NamedTuple's fields."""
  target = fn_or_cls
  if isinstance(fn_or_cls, type) and not hasattr(fn_or_cls, "_fields"):
    target = fn_or_cls.__init__
  try:
    return typing.get_type_hints(target)
  except Exception:  # pylint: disable=broad-except
    return dict(getattr(target, "__annotations__", {}))


def _template_field_names_uncached(cls: Any) -> frozenset[str]:
  if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
    # A function or plain class: as Pax, arguments annotated with a Config type are templates.
    if not callable(cls):
      return frozenset()
    return frozenset(
      name
      for name, hint in _signature_hints(cls).items()
      if name != "return" and _annotation_is_config(hint)
    )
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
  return frozenset(names)


def template_field_names(cls: Any) -> frozenset[str]:
  """The names of `cls`'s fields (or a function's / plain class's arguments) that hold
  templates: by template_field metadata, or annotated with a Config type."""
  try:
    cached = _TEMPLATE_CACHE.get(cls)
  except TypeError:  # not weak-referenceable: no caching
    return _template_field_names_uncached(cls)
  if cached is None:
    cached = _TEMPLATE_CACHE[cls] = _template_field_names_uncached(cls)
  return cached


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

  def __to_sub_config_field__(self) -> Any:
    """`sub_config_field(Cls.HParams)`: a template field of Cls (Pax's HParams stub)."""
    return template_field(self._cls)

  def __instancecheck__(self, instance: Any) -> bool:
    return (
      isinstance(instance, Config)
      and isinstance(instance.__fn_or_cls__, type)
      and (issubclass(instance.__fn_or_cls__, self._cls))
    )

  @property
  def cls(self) -> type:
    return self._cls

  def __repr__(self):
    return f"{self._cls.__name__}.HParams"


class _HParamsDescriptor:
  def __get__(self, instance, owner) -> _HParamsFactory:
    return _HParamsFactory(owner)


class HParamsMixin:
  """Gives a dataclass (or Flax module) the `Cls.HParams.config(...)` entry point."""

  HParams = _HParamsDescriptor()


class _HParamsView:
  """`obj.hparams` of a FiddleBaseParameterizable: reads its fields, `clone()` gives a Config
  that builds a copy; assigning raises (Pax's frozen hparams stub)."""

  def __init__(self, instance: Any):
    object.__setattr__(self, "_instance", instance)

  def __getattr__(self, name: str) -> Any:
    instance = self.__dict__.get("_instance")
    fields = {f.name for f in dataclasses.fields(instance) if f.init} if instance else set()
    if name not in fields or name == "parent":
      raise AttributeError(f"{type(instance).__name__}.HParams has no attribute {name!r}")
    return getattr(instance, name)

  def __setattr__(self, name: str, value: Any) -> None:
    raise AttributeError(
      f"Attempt to modify frozen hparams stub: {type(self._instance).__name__}.{name}={value!r}"
    )

  @property
  def cls(self) -> type:
    return type(self._instance)

  def clone(self) -> Config:
    kwargs = {
      f.name: getattr(self._instance, f.name)
      for f in dataclasses.fields(self._instance)
      if f.init and f.name != "parent"
    }
    return Config(type(self._instance), **kwargs)

  def to_text(self, include_types: bool = False, separator: str = ":") -> str:
    del include_types, separator
    return nested_struct_to_text(self.clone())


def _keyword_only_init(cls: type) -> None:
  init = cls.__init__

  @functools.wraps(init)
  def wrapper(self, *args, **kwargs):
    if args:
      raise TypeError(
        f"Only keyword arguments are supported when constructing {cls}. Received {args} as "
        "positional arguments."
      )
    return init(self, **kwargs)

  cls.__init__ = wrapper


class FiddleBaseParameterizable(HParamsMixin):
  """Pax's base for configurable non-layer classes (tasks, learners, early-stopping functions).

  Every subclass becomes a keyword-only dataclass when it is defined, so its annotated class
  attributes are its fields, as in Pax: `class Stop(FiddleBaseParameterizable): target: float =
  1.0` is configured with `pax_fiddle.Config(Stop, target=2.0)`. All have a `name` field;
  `obj.hparams.<field>` reads a field (Pax's compatibility view, read-only).
  """

  name: str = ""

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    dataclasses.dataclass(kw_only=True)(cls)
    _keyword_only_init(cls)
    own_annotations = cls.__dict__.get("__annotations__", {})
    for dc_field in dataclasses.fields(cls):
      if dc_field.name in cls.__dict__ and dc_field.name not in own_annotations:
        raise TypeError(
          f"Class attribute `{cls.__qualname__}.{dc_field.name}` overrides a dataclass field "
          f"but has no type annotation; annotate it (`{dc_field.name}: {dc_field.type}`)."
        )

  @property
  def hparams(self) -> _HParamsView:
    return _HParamsView(self)

  @classmethod
  def config(cls, **kwargs) -> Config:
    return Config(cls, **kwargs)


dataclasses.dataclass(kw_only=True)(FiddleBaseParameterizable)
FiddleBaseParameterizableBase = FiddleBaseParameterizable
FiddleBaseParameterizableSelf = TypeVar(
  "FiddleBaseParameterizableSelf", bound=FiddleBaseParameterizable
)


@contextlib.contextmanager
def empty_flax_module_stack():
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
  return _build(cfg, memo={}, parent=None, top=True)


# Pax's name.
build = instantiate


class _FreshValue:
  """What an ArgFactory builds to: makes a new value (with new nested ArgFactory values) each
  time the Partial that holds it is called."""

  def __init__(self, target: Any, kwargs: dict[str, Any]):
    self.target, self.kwargs = target, kwargs

  def make(self) -> Any:
    return self.target(**_fresh_kwargs(self.kwargs))


def _fresh_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
  return {k: v.make() if isinstance(v, _FreshValue) else v for k, v in kwargs.items()}


class _PartialWithFreshArgs(functools.partial):
  """A functools.partial whose ArgFactory arguments are made anew on every call."""

  def __call__(self, *args, **kwargs):
    return self.func(*self.args, *args, **{**_fresh_kwargs(self.keywords), **kwargs})


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


def _build(value: Any, memo: dict[int, Any], parent: Any, top: bool = False) -> Any:
  """Builds `value`. As in Pax, only the outermost objects (`top`) are constructed under the
  running Flax module (so `cfg.Instantiate()` in a parent's setup / compact method makes a
  child of it, named by the config or by Flax); everything nested is built detached and
  adopted by the object that receives it."""
  if isinstance(value, fdl.Buildable):
    if id(value) in memo:
      return memo[id(value)]
    key = id(value)
    value = _inherit(parent, value)
    target = value.__fn_or_cls__
    here = value if _is_layer_config(value) else parent
    templates = template_field_names(target)
    kwargs = {}
    with empty_flax_module_stack() if top else contextlib.nullcontext():
      for name, arg in value.__arguments__.items():
        if name in templates:
          kwargs[name] = _copy_template(arg, here)
        else:
          kwargs[name] = _build(arg, memo, here)
    if isinstance(value, fdl.ArgFactory):
      built = _FreshValue(target, kwargs)
    elif isinstance(value, fdl.Partial):
      if any(isinstance(v, _FreshValue) for v in kwargs.values()):
        built = _PartialWithFreshArgs(target, **kwargs)
      else:
        built = functools.partial(target, **kwargs)
    elif type(value).__build__ is not fdl.Config.__build__:
      built = value.__build__(**kwargs)  # a Config subclass that builds its own way (Pax allows)
    else:
      built = target(**kwargs)
    memo[key] = built
    return built
  if isinstance(value, (list, tuple)):
    items = [_build(v, memo, parent, top) for v in value]
    return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
  if isinstance(value, dict):
    return type(value)((k, _build(v, memo, parent, top)) for k, v in value.items())
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

# Pax's text form of configs (model_params.txt).
from praxis.hparams_text import (  # noqa: E402, F401  pylint: disable=g-import-not-at-top
  StrOverride,
  nested_struct_to_text,
  visit_nested_struct,
)


# Pax's pre-Fiddle style (nested HParams dataclasses); imported last: it builds on the above.
from praxis.base_hyperparams_legacy import (  # noqa: E402, F401  pylint: disable=g-import-not-at-top
  BaseHyperParams,
  BaseHyperParamsSelf,
  BaseParameterizable,
  BaseParameterizableSelf,
  OverrideSubConfigFieldProtocol,
  SubConfigFactory,
  sub_config_field,
)
