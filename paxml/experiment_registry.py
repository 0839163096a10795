"""Finds experiment classes by name, following Pax's `--exp` lookup rules.

An experiment registers itself with `@register`. Its canonical name is
`<module>.<Class>` with the leading `paxml.` dropped, so the class
`paxml.tasks.lm.params.demo.DemoLm` is `tasks.lm.params.demo.DemoLm`. It can
also be found by shorter names:
  * every dotted suffix that keeps at least one module segment:
    `lm.params.demo.DemoLm`, `params.demo.DemoLm`, `demo.DemoLm`;
  * the same names with the `params` segment left out:
    `tasks.lm.demo.DemoLm`, `lm.demo.DemoLm`.
A short name that fits two different experiments is ambiguous: `get` refuses it
and lists both canonical names, so the user can pick one.

This module imports neither JAX nor TensorFlow: it runs before `main` knows
whether the experiment exists, and a typo should fail in well under a second.
"""

import collections
import difflib
import functools
import importlib
import sys
from typing import Any, TypeVar

_PACKAGE_PREFIX = "paxml."
# Pax's convention for the package that holds experiment modules; names may
# leave it out.
_PARAMS_SEGMENT = "params"
# Error messages list at most this many names.
_MAX_LISTED = 8

_T = TypeVar("_T", bound=type)


class Error(LookupError):
  """A name that does not identify exactly one registered experiment."""


class NotFoundError(Error):
  """No registered experiment has this name."""


class AmbiguousNameError(Error):
  """More than one registered experiment has this name."""


def canonical_name(cls: type) -> str:
  """Returns `module.Class` for `cls`, relative to the `paxml` package."""
  module = cls.__module__
  if module.startswith(_PACKAGE_PREFIX):
    module = module[len(_PACKAGE_PREFIX) :]
  return f"{module}.{cls.__name__}"


def lookup_keys(canonical: str) -> list[str]:
  """Returns every name under which the experiment `canonical` is found.

  The first entry is `canonical` itself. For `tasks.lm.params.demo.DemoLm`:
  the suffixes `lm.params.demo.DemoLm`, `params.demo.DemoLm`, `demo.DemoLm`,
  and, without `params`, `tasks.lm.demo.DemoLm` and `lm.demo.DemoLm`.
  """
  parts = canonical.split(".")
  spellings = [parts]
  if _PARAMS_SEGMENT in parts[:-1]:
    spellings.append([p for p in parts[:-1] if p != _PARAMS_SEGMENT] + parts[-1:])
  keys = []
  for spelling in spellings:
    # Stop before the bare class name: it would clash across modules.
    for start in range(len(spelling) - 1):
      key = ".".join(spelling[start:])
      if key not in keys:
        keys.append(key)
  return keys


class Registry:
  """Maps experiment names to classes.

  The module-level `register`, `get` and `get_experiment` use one shared
  instance; tests make their own so they do not see each other's classes.
  """

  def __init__(self):
    self._classes: dict[str, type] = {}  # canonical name -> class
    self._keys: dict[str, set[str]] = collections.defaultdict(set)  # key -> canonical names
    self._tags: dict[str, list[str]] = {}  # canonical name -> Pax's registry tags

  def tags(self, canonical: str) -> list[str]:
    """The tags `canonical` was registered with (Pax's `get_registry_tags`); [] if none."""
    return list(self._tags.get(canonical, []))

  def all_classes(self) -> dict[str, type]:
    """{canonical name: class} of every registered experiment (Pax's `get_all`)."""
    return dict(self._classes)

  def register(self, cls: _T, tags: list[str] | None = None) -> _T:
    """Adds `cls` under its canonical name and all short names; returns it.

    Registering a class whose canonical name is taken replaces the old class:
    that happens when a module is reloaded (notebooks, `importlib.reload`), and
    Python itself already lets the newer definition win.
    """
    canonical = canonical_name(cls)
    self._classes[canonical] = cls
    self._tags[canonical] = list(tags or [])
    for key in lookup_keys(canonical):
      self._keys[key].add(canonical)
    return cls

  def canonical_names(self) -> list[str]:
    """Returns the canonical names of all registered experiments, sorted."""
    return sorted(self._classes)

  def get(self, name: str) -> type:
    """Returns the experiment class called `name`.

    Raises:
      AmbiguousNameError: `name` is a short name of several experiments.
      NotFoundError: nothing registered has that name.
    """
    key = name
    # The Python path of the class works too.
    if key.startswith(_PACKAGE_PREFIX):
      key = key[len(_PACKAGE_PREFIX) :]
    # A full canonical name always wins, even if it is also another
    # experiment's suffix: the user could not have been more specific.
    if key in self._classes:
      return self._classes[key]
    matches = sorted(self._keys.get(key, ()))
    if len(matches) == 1:
      return self._classes[matches[0]]
    if matches:
      raise AmbiguousNameError(
        f"experiment name {name!r} is ambiguous; use one of the full names: " + ", ".join(matches)
      )
    raise NotFoundError(self.not_found_message(name))

  def not_found_message(self, name: str, detail: str = "") -> str:
    """One sentence saying `name` is unknown, with the closest registered names.

    `detail`, if given, goes in parentheses after the name: why it was not
    found (for example, which modules were tried).
    """
    unknown = f"no experiment named {name!r}" + (f" ({detail})" if detail else "")
    if not self._classes:
      return (
        f"{unknown}, and no experiment is registered; pass the full name "
        "(module.Class) so its module can be imported"
      )
    key = name[len(_PACKAGE_PREFIX) :] if name.startswith(_PACKAGE_PREFIX) else name
    keys, n = list(self._keys), 4 * _MAX_LISTED
    # Names that look alike if there are any (difflib's default cutoff);
    # otherwise the nearest ones, best first, so a wild guess still gets help.
    close_keys = difflib.get_close_matches(key, keys, n=n) or difflib.get_close_matches(
      key, keys, n=n, cutoff=0.0
    )
    # Report canonical names: a suffix the user typed wrongly is best fixed
    # with the one name that always works.
    candidates = []
    for close_key in close_keys:
      for canonical in sorted(self._keys[close_key]):
        if canonical not in candidates:
          candidates.append(canonical)
    return f"{unknown}; did you mean: " + ", ".join(candidates[:_MAX_LISTED])


_REGISTRY = Registry()


def _being_reloaded() -> bool:
  """Whether a module is being re-executed by importlib.reload (a notebook's edit loop)."""
  frame = sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None:
    if frame.f_code.co_name == "reload" and frame.f_globals.get("__name__") == "importlib":
      return True
    frame = frame.f_back
  return False


class _RegistryView(type):
  """Pax's `_ExperimentRegistryHelper._registry` as the shared registry's {name: class}; assigning
  a dict (Pax's tests reset it with `= {}`) replaces what is registered."""

  @property
  def _registry(cls) -> dict[str, type]:
    return _REGISTRY._classes  # pylint: disable=protected-access

  @_registry.setter
  def _registry(cls, classes: dict[str, type]) -> None:
    tags = _REGISTRY._tags  # pylint: disable=protected-access
    _REGISTRY.__init__()
    for c in dict(classes).values():
      _REGISTRY.register(c)
    _REGISTRY._tags.update(tags)  # pylint: disable=protected-access  (Pax keeps the tags too)


class _ExperimentRegistryHelper(metaclass=_RegistryView):
  """Pax's registry class: its classmethods over the shared registry (module functions below).

  `_allow_overwrite = True` (Pax's notebook switch) lets `register` replace any class.
  """

  _allow_overwrite = False

  @classmethod
  def register(
    cls,
    experiment_class: _T | None = None,
    *,
    tags: list[str] | None = None,
    allow_overwrite: bool = False,
  ) -> Any:
    if experiment_class is None:
      return functools.partial(cls.register, tags=tags, allow_overwrite=allow_overwrite)
    canonical = canonical_name(experiment_class)
    existing = _REGISTRY._classes.get(canonical)  # pylint: disable=protected-access
    if (
      existing is not None
      and existing is not experiment_class
      # The same file imported as `x` and as `paxml.x` shares a canonical name: the later wins.
      and existing.__module__ == experiment_class.__module__
      and not (allow_overwrite or cls._allow_overwrite or _being_reloaded())
    ):
      raise ValueError(
        f"Experiment already registered: {canonical}; pass allow_overwrite=True to replace it "
        "(a reloaded module replaces its classes by itself)"
      )
    return _REGISTRY.register(experiment_class, tags=tags)

  @classmethod
  def get(cls, key: str) -> type | None:
    """Pax's lookup: the class, None when nothing has that name, ValueError when several do.

    Besides the names of `Registry.get`, a bare class name works when it is unique.
    """
    try:
      return _REGISTRY.get(key)
    except AmbiguousNameError as e:
      raise ValueError(str(e)) from e
    except NotFoundError:
      pass
    if "." in key:
      return None
    found = [c for c in _REGISTRY._classes.values() if c.__name__ == key]  # pylint: disable=protected-access
    if len(found) > 1:
      names = ", ".join(sorted(canonical_name(c) for c in found))
      raise ValueError(f"key={key} does not uniquely identify an experiment; use one of: {names}")
    return found[0] if found else None

  @classmethod
  def get_all(cls) -> dict[str, type]:
    return _REGISTRY.all_classes()

  @classmethod
  def get_registry_tags(cls, key: str) -> list[str]:
    return _REGISTRY.tags(key)


def register(
  cls: _T | None = None, *, tags: list[str] | None = None, allow_overwrite: bool = False
) -> Any:
  """Class decorator: makes `cls` findable by `get` and `get_experiment` (Pax's).

  Pax's forms all work: `@register`, `@register()`, `@register(tags=[...],
  allow_overwrite=True)`. As in Pax, registering a different class under a taken name raises
  ValueError unless `allow_overwrite` (or `_ExperimentRegistryHelper._allow_overwrite`) is set
  or the module is being reloaded.
  """
  return _ExperimentRegistryHelper.register(cls, tags=tags, allow_overwrite=allow_overwrite)


def get_all() -> dict[str, type]:
  """{canonical name: class} of every experiment registered so far (Pax's `get_all`)."""
  return _REGISTRY.all_classes()


def get_registry_tags(key: str) -> list[str]:
  """The tags experiment `key` (a canonical name, as `get_all` gives) was registered with."""
  return _REGISTRY.tags(key)


def get(name: str) -> type | None:
  """Pax's `get`: the registered experiment `name`, or None; ValueError if ambiguous.

  `get_experiment` is the lookup that imports modules and explains a miss.
  """
  return _ExperimentRegistryHelper.get(name)


def canonical_names() -> list[str]:
  """Returns the canonical names of every experiment registered so far, sorted."""
  return _REGISTRY.canonical_names()


def _import_if_exists(module_name: str) -> bool:
  """Imports `module_name`; returns False if it (or a parent) does not exist.

  An ImportError raised from inside an existing module (a missing dependency,
  a typo in its imports) propagates: hiding it would turn a broken experiment
  file into a misleading "no experiment named ..." message.
  """
  try:
    importlib.import_module(module_name)
  except ModuleNotFoundError as e:
    parts = module_name.split(".")
    prefixes = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    if e.name in prefixes:
      return False
    raise
  return True


def get_experiment(name: str) -> type:
  """Returns the experiment class `name`, importing its module if needed.

  When `name` is not registered yet, imports its module part
  (`name.rsplit('.', 1)[0]`) as given and then under `paxml.`, and looks
  again; registration happens when a module with `@register` is imported.

  Raises:
    AmbiguousNameError: `name` is a short name of several experiments.
    NotFoundError: no module defines it; the message lists close names.
  """
  try:
    return _REGISTRY.get(name)
  except NotFoundError:
    if "." not in name:
      raise
  module_name = name.rsplit(".", 1)[0]
  tried = [module_name]
  if not module_name.startswith(_PACKAGE_PREFIX):
    tried.append(_PACKAGE_PREFIX + module_name)
  imported = [m for m in tried if _import_if_exists(m)]
  try:
    return _REGISTRY.get(name)
  except NotFoundError:
    if imported:
      raise
    detail = "there is no module " + " or ".join(repr(m) for m in tried) + " to import"
    raise NotFoundError(_REGISTRY.not_found_message(name, detail)) from None
