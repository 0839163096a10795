"""Two trivial registered experiments Pax's tests look up by name (`paxml.tasks.test.synthetic`).

`SyntheticClassifier` has no inputs and an identity layer as its task; `SharedNameExperiment`
subclasses it, so a test that registers another class of that name finds the bare name ambiguous.
They are for registry lookups only, not for training.
"""

from paxml import base_experiment
from paxml import experiment_registry
from praxis import layers
from praxis import pax_fiddle


@experiment_registry.register
class SyntheticClassifier(base_experiment.BaseExperiment):
  """No datasets; the task is a config of `layers.Identity`."""

  def datasets(self):
    return []

  def task(self):
    return pax_fiddle.Config(layers.Identity)


@experiment_registry.register
class SharedNameExperiment(SyntheticClassifier):
  """Registered under a class name other modules also use."""
