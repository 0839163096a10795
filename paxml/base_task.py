"""Pax's `paxml.base_task.BaseTask`: the base of task configs (`tasks_lib.SingleTask`).

A model is the network alone; a task adds how it is trained, evaluated and decoded. As in Pax,
a task is a keyword-only dataclass (`FiddleBaseParameterizable`) configured with
`pax_fiddle.Config(tasks_lib.SingleTask, name=...)`, and must have a name.
"""

from praxis import base_hyperparams


class BaseTask(base_hyperparams.FiddleBaseParameterizable):
  """Abstract base of tasks; building one without a `name` is an error, as in Pax."""

  def __post_init__(self):
    if not self.name:
      raise ValueError(
        f"{type(self).__name__} needs a name: pax_fiddle.Config({type(self).__name__}, "
        "name='my_task', ...)"
      )
