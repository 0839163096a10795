"""Pax's `get_cls_vars_summary`: which class variables an experiment class ends up with, and
which class in its MRO set each one (the most derived definition owns it).

The summary lists the classes from `BaseExperiment` down to the class itself, each followed by
the variables it owns, one `    NAME: str(value)` line each; classes that own none are left
out. Methods, properties and dunder names are not variables; `BaseExperiment`'s own variables
are listed only under `BaseExperiment`. `experiment_vars_summary_parser.parse` reads it back.
"""

from typing import Any

from paxml import base_experiment

BaseExperiment = base_experiment.BaseExperiment


def _full_cls_name(cls: type) -> str:
  if cls.__module__ == "builtins":
    return cls.__qualname__
  return f"{cls.__module__}.{cls.__qualname__}"


def _is_variable(name: str, value: Any) -> bool:
  is_dunder = name.startswith("__") and name.endswith("__")
  return not (callable(value) or isinstance(value, property) or is_dunder)


def _own_vars(cls: type) -> dict[str, Any]:
  """Variables defined in `cls`'s own body, without those BaseExperiment also defines."""
  own = {k: v for k, v in vars(cls).items() if _is_variable(k, v)}
  if cls is BaseExperiment:
    return own
  base_names = {k for k, v in vars(BaseExperiment).items() if _is_variable(k, v)}
  return {k: v for k, v in own.items() if k not in base_names}


def _owned_vars(cls: type) -> dict[type, dict[str, Any]]:
  """{owning class: {name: value}}; a name belongs to the most derived class defining it."""
  owned: dict[type, dict[str, Any]] = {}
  seen = set()
  for klass in cls.__mro__[:-1]:  # Without `object`.
    for name, value in _own_vars(klass).items():
      if name not in seen:
        seen.add(name)
        owned.setdefault(klass, {})[name] = value
  return owned


def get_cls_vars_summary(cls: type) -> str:
  """The text summary of `cls`'s class variables by owning class (module docstring)."""
  owned = _owned_vars(cls)
  blocks = []
  for klass in reversed(cls.__mro__[:-1]):
    if klass in owned:
      lines = [f"    {name}: {value}" for name, value in owned[klass].items()]
      blocks.append(f"{_full_cls_name(klass)}:\n" + "\n".join(lines) + "\n")
  return "\n".join(blocks)
