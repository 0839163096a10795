"""Tests of ExperimentImportsTestHelper: it adds one test per selected registered experiment, and
those tests pass for a real experiment and fail for one without inputs."""

import unittest

from absl.testing import absltest
from paxml import base_experiment
from paxml import experiment_imports_test_helper
from paxml import experiment_registry
from paxml.tasks.lm.params import lm_cloud  # noqa: F401  (registers SmallMlp)


class _NoInputs(base_experiment.BaseExperiment):
  def datasets(self):
    return []

  def task(self):
    return experiment_registry.get("tasks.lm.params.lm_cloud.SmallMlp")().task()


class _FakeRegistry:
  """The registry functions the helper calls, over one experiment."""

  @staticmethod
  def get_all():
    return {"fake.NoInputs": _NoInputs}

  @staticmethod
  def get(name):
    del name
    return _NoInputs

  @staticmethod
  def get_registry_tags(name):
    del name
    return []


def _run(case_cls) -> unittest.TestResult:
  suite = unittest.defaultTestLoader.loadTestsFromTestCase(case_cls)
  return unittest.TextTestRunner(verbosity=0).run(suite)


class HelperTest(absltest.TestCase):
  def test_real_experiment_passes(self):
    class Generated(experiment_imports_test_helper.ExperimentImportsTestHelper):
      pass

    n = Generated.create_test_methods_for_all_registered_experiments(
      experiment_registry, task_regexes=[""], include_only_regexes=["SmallMlp$"]
    )
    self.assertEqual(n, 1)
    result = _run(Generated)
    self.assertEqual((result.testsRun, len(result.failures), len(result.errors)), (1, 0, 0))

  def test_experiment_without_inputs_fails(self):
    class Generated(experiment_imports_test_helper.ExperimentImportsTestHelper):
      pass

    self.assertEqual(
      Generated.create_test_methods_for_all_registered_experiments(_FakeRegistry, [""]), 1
    )
    self.assertTrue(hasattr(Generated, "test_experiment_params_fake_NoInputs"))
    result = _run(Generated)
    self.assertLen(result.failures, 1)
    self.assertIn("at least one input", result.failures[0][1])

  def test_exclusion(self):
    class Generated(experiment_imports_test_helper.ExperimentImportsTestHelper):
      pass

    n = Generated.create_test_methods_for_all_registered_experiments(
      _FakeRegistry, [""], exclude_regexes=["NoInputs"]
    )
    self.assertEqual(n, 0)


if __name__ == "__main__":
  absltest.main()
