"""Tracers for Pax's experiment code generation: values that remember which high-level setting
(experiment attribute) they were read from.

`make_subclass_mixin(MyExperiment)()` returns an experiment whose attribute reads of plain values
(bool, int, float, str, list, tuple) come back wrapped: they compare, hash and compute like the
value, and carry `__highlevel_name__`. A code generator can then write `FOO_SETTING` (or a derived
property's name) where the config holds 4123. `remove_tracers` unwraps a whole config.
"""

import dataclasses
import enum
from typing import Any, TypeVar

from fiddle import daglish
from paxml import base_experiment

_TRACEABLE = (bool, int, float, str, list, tuple)


@dataclasses.dataclass(frozen=True)
class BoolTracer:
  """A traced bool (bool cannot be subclassed): truthiness and `== True/False` as the value."""

  name: str
  value: bool

  @property
  def __highlevel_name__(self):
    return self.name

  def __bool__(self):
    return self.value

  def __eq__(self, other):
    if isinstance(other, bool):
      return self.value == other
    return super().__eq__(other)


def make_tracer(name: str, value: Any, allowed_types=_TRACEABLE) -> Any:
  """`value` wrapped as a subclass instance of its type with `__highlevel_name__ = name`."""
  typ = type(value)
  if not issubclass(typ, allowed_types):
    raise ValueError(
      f"Type {typ} is not allowed. If it works as a subclassed tracer, add it to "
      "`allowed_types` and cover it with a unit test."
    )
  if typ is bool:
    return BoolTracer(name, value)
  traced_type = type(f"Wrapped{typ.__name__}_{name}", (typ,), {"__highlevel_name__": name})
  return traced_type(value)


class TracerMixin:
  """Wraps the plain values read from an instance's attributes (enums are left alone)."""

  __trace_names__: set[str]

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    object.__setattr__(self, "__trace_names__", set())

  def __getattribute__(self, name):
    value = super().__getattribute__(name)
    if name == "__trace_names__" or isinstance(value, enum.Enum):
      return value
    if isinstance(value, _TRACEABLE):
      self.__trace_names__.add(name)
      return make_tracer(name, value)
    return value


def make_subclass_mixin(experiment_cls: type[base_experiment.BaseExperiment]) -> type:
  """`<Name>Traced`: `experiment_cls` whose attribute reads are traced."""
  if not (
    isinstance(experiment_cls, type) and issubclass(experiment_cls, base_experiment.BaseExperiment)
  ):
    raise TypeError(f"Please pass a subclass of BaseExperiment, got {experiment_cls!r}.")
  return type(f"{experiment_cls.__name__}Traced", (experiment_cls, TracerMixin), {})


_T = TypeVar("_T")


def remove_tracers(root: _T) -> _T:
  """`root` with every tracer (also nested ones) replaced by its plain value."""

  def untrace(value, state: daglish.State):
    if isinstance(value, BoolTracer):
      value = bool(value)
    elif hasattr(value, "__highlevel_name__"):
      value = type(value).__bases__[0](value)  # The traced type's one base is the plain type.
    return state.map_children(value)

  return daglish.MemoizedTraversal.run(untrace, root)
