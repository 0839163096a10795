"""`BaseExperiment`: what an experiment class provides to the trainer.

An experiment is a small class, registered with
`@experiment_registry.register`, whose methods return configurations: which
inputs to read (`datasets`) and what to train (`task`). Nothing is built until
the trainer asks, so listing or validating experiments stays cheap.
"""

import abc
import typing

import fiddle as fdl

from paxml import tasks_lib

if typing.TYPE_CHECKING:
  from paxml import partitioning  # For the annotation only; it imports JAX.


class BaseExperiment(abc.ABC):
  """Inputs and task of one experiment. Subclasses override both methods."""

  @abc.abstractmethod
  def datasets(self) -> list[fdl.Config]:
    """Returns input configs, built with `fdl.build`.

    Each built input has `is_training` and `get_next()`; exactly one is the
    training input (`is_training=True`).
    """

  @abc.abstractmethod
  def task(self) -> tasks_lib.TaskConfig:
    """Returns the model and training settings."""

  def decode_datasets(self) -> list[fdl.Config]:
    """Returns the configs of the inputs `--mode=decode` and `--decode_during_train` decode."""
    return []

  def partitioner(self) -> "partitioning.Partitioner | None":
    """Returns a custom partitioner; None (the default) builds one from the task's mesh shapes."""
    return None

  def validate(self) -> None:
    """Raises ValueError when the configuration cannot work; `main` calls it before any work."""

  def train_dataset(self) -> fdl.Config:
    """Returns the one config in `datasets()` with `is_training=True`."""
    configs = self.datasets()
    train = [c for c in configs if c.is_training]
    if len(train) != 1:
      raise ValueError(
        f"{type(self).__name__}.datasets() must return exactly one config with "
        f"is_training=True, got {len(train)} of {len(configs)}"
      )
    return train[0]
