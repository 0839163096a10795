"""Pax's `ExperimentImportsTestHelper`: a TestCase base that gets one test method per registered
experiment, checking that the experiment's configs build.

Each generated test (under `pg.hyper.trace`, so tunable experiments take their first choices):
instantiates the task config (a `BaseTask`), checks that the experiment has at least one input
and that every input is a `pax_fiddle.Config`, and, for experiments tagged
`smoke_test_abstract_init`, initializes the model abstractly from the experiment's input specs
provider (which must not be the training-pipeline one).
"""

import re

from absl.testing import absltest
import jax
from paxml import base_task
from praxis import base_hyperparams
from praxis import base_input
from praxis import pax_fiddle
import pyglove as pg

instantiate = base_hyperparams.instantiate


def _global_shape_dtype(x) -> jax.ShapeDtypeStruct:
  """A per-host input spec as the global one: the batch (dim 0) is split across processes.
  (Pax's `py_utils.get_global_input_shape_dtype`.)"""
  return jax.ShapeDtypeStruct((x.shape[0] * jax.process_count(), *x.shape[1:]), x.dtype)


def _matches_any(regexes, name: str) -> bool:
  return any(re.search(regex, name) for regex in regexes)


class ExperimentImportsTestHelper(absltest.TestCase):
  """Subclass it and call `create_test_methods_for_all_registered_experiments` before
  `absltest.main()`."""

  _PREFIX = "lingvo."

  def _test_one_experiment_params(self, registry, name: str) -> None:
    name = name.removeprefix(self._PREFIX)
    experiment = registry.get(name)()
    task = instantiate(experiment.task())
    self.assertIsInstance(task, base_task.BaseTask)

    decode = (
      experiment.decode_datasets()
      if hasattr(experiment, "decode_datasets")
      else experiment.decoder_datasets()
    )
    inputs = list(experiment.datasets()) + list(decode)
    self.assertNotEmpty(inputs, f"{name}: a registered experiment needs at least one input.")
    for config in inputs:
      self.assertIsInstance(config, pax_fiddle.Config)

    # Building inputs may read data; only tagged experiments go as far as model init.
    if "smoke_test_abstract_init" not in registry.get_registry_tags(name):
      return
    specs_provider = instantiate(experiment.get_input_specs_provider_params())
    self.assertNotIsInstance(
      specs_provider,
      base_input.DatasetInputSpecsProvider,
      f"{name} is tagged smoke_test_abstract_init, so its input specs provider must give specs "
      "without building the training input.",
    )
    specs = specs_provider.get_input_specs()
    model = task.model
    if getattr(model, "ici_mesh_shape", None) is not None:
      specs = jax.tree.map(_global_shape_dtype, specs)
    model.abstract_init_with_metadata(specs)

  @classmethod
  def create_test_methods_for_all_registered_experiments(
    cls, registry, task_regexes=None, exclude_regexes=None, include_only_regexes=None
  ) -> int:
    """Adds `test_experiment_params_<name>` for each registered experiment whose name matches
    a task regex (and an include-only regex, when given) and no exclude regex; returns how
    many were added."""
    task_regexes = task_regexes or []
    exclude_regexes = exclude_regexes or []
    include_only_regexes = include_only_regexes or []
    selected = []
    for name in sorted(registry.get_all()):
      if not _matches_any(task_regexes, name):
        continue
      if include_only_regexes and not _matches_any(include_only_regexes, name):
        continue
      if _matches_any(exclude_regexes, name):
        print(f"Excluding registered experiment {name}")
        continue
      selected.append(name)

      def test(self, name=name):
        pg.hyper.trace(
          lambda: self._test_one_experiment_params(registry, name), require_hyper_name=True
        )

      setattr(cls, "test_experiment_params_" + name.replace(".", "_"), test)
    print(f"Created {len(selected)} tests: {selected}")
    return len(selected)
