"""Replaces SeqIO Task objects in a config by `pax_fiddle.Config(seqio.get_mixture_or_task,
"<name>")`, which builds the same registered task, so the config holds no SeqIO objects.

The replacement's argument is `task_or_mixture_name` (get_mixture_or_task's), not the Task's
own `name`: a config that sets the name must use that field.
"""

from typing import Any, TypeVar

from fiddle import daglish
import seqio

from praxis import pax_fiddle

_T = TypeVar("_T")


def convert_seqio_tasks(config: _T) -> _T:
  """A copy of `config` (any structure of configs) with every `seqio.Task` named instead."""

  def visit(value: Any, state: daglish.State) -> Any:
    if isinstance(value, seqio.Task):
      return pax_fiddle.Config(seqio.get_mixture_or_task, value.name)
    return state.map_children(value)

  return daglish.MemoizedTraversal.run(visit, config)
