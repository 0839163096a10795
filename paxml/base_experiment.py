"""`BaseExperiment`: what an experiment class provides to the trainer (Pax's methods).

An experiment is a small class, registered with `@experiment_registry.register`, whose methods
return configurations: which inputs to read (`datasets`) and what to train (`task`: Pax's
`pax_fiddle.Config(tasks_lib.SingleTask)` or the seed's `tasks_lib.TaskConfig`, see
tasks_lib.py). Nothing is built until the trainer asks, so listing or validating experiments
stays cheap.
"""

import abc
import sys
import typing
from typing import Any

import fiddle as fdl

if typing.TYPE_CHECKING:
  from paxml import partitioning  # For the annotation only; it imports JAX.


class BaseExperiment(abc.ABC):
  """Inputs and task of one experiment. Subclasses override `datasets` and `task`."""

  @abc.abstractmethod
  def datasets(self) -> list[fdl.Config]:
    """Returns input configs (`pax_fiddle.Config` of `praxis.base_input.BaseInput`s).

    Each has `is_training`; exactly one is the training input (`is_training=True`).
    """

  @abc.abstractmethod
  def task(self) -> Any:
    """Returns the task: a `pax_fiddle.Config(tasks_lib.SingleTask)` or a `TaskConfig`."""

  def train_datasets(self) -> list[fdl.Config]:
    """The configs in `datasets()` with `is_training=True` (Pax's)."""
    return [config for config in self.datasets() if config.is_training]

  def eval_datasets(self) -> list[fdl.Config]:
    """The configs in `datasets()` with `is_training=False` (Pax's)."""
    return [config for config in self.datasets() if not config.is_training]

  def decode_datasets(self) -> list[fdl.Config]:
    """Configs of the inputs `--mode=decode` and `--decode_during_train` decode; by default
    `decoder_datasets()` (Pax's older name, which experiments may override instead)."""
    return self.decoder_datasets()

  def decoder_datasets(self) -> list[fdl.Config]:
    """Pax's older name for `decode_datasets()`; none by default."""
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

  # Pax's deprecated name for the same.
  training_dataset = train_dataset

  def get_input_specs_provider_params(self) -> Any:
    """Config of the input specs provider that model initialization reads (Pax's).

    By default the training input's specs (`base_input.DatasetInputSpecsProvider`); experiments
    without a training input override it to return a provider of fixed specs.
    """
    from praxis import base_input  # pylint: disable=import-outside-toplevel
    from praxis import pax_fiddle  # pylint: disable=import-outside-toplevel

    return pax_fiddle.Config(base_input.DatasetInputSpecsProvider, input_p=self.train_dataset())

  def search(self) -> Any:
    """Returns the `automl.SearchHParams` of a tuning experiment (Pax's); experiments that are
    tuned override it."""
    raise NotImplementedError(
      f"{type(self).__name__} has no `search` method: implement it (returning "
      "automl.SearchHParams, e.g. automl.hyperparameter_tuning(...)) to tune this experiment."
    )

  def sub_experiments(self) -> dict[str, type["BaseExperiment"]]:
    """The experiments one tuning trial runs in turn, by id (Pax's); by default only this one,
    with id ''."""
    return {"": self.__class__}

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    # Pax lets an experiment declare decision points as class attributes (`LR = pg.oneof(...)`);
    # they become properties that build a fresh primitive on each read. Such an attribute can
    # only exist once pyglove was imported, so experiments that never tune don't import it.
    if "pyglove" in sys.modules:
      from paxml import automl_interfaces  # pylint: disable=import-outside-toplevel

      automl_interfaces.enable_class_level_hyper_primitives(cls)
