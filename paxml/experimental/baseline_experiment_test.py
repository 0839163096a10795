"""Tests of BaselineExperiment: a high-level setting reaches the model whether it is set on
the high-level config, given to lowlevel_config, or edited after lowering."""

import dataclasses

from absl.testing import absltest
from paxml import parameterized_experiment
from paxml.experimental import baseline_experiment
from praxis import pax_fiddle


def _double(x):
  return 2 * x


@dataclasses.dataclass
class _Baseline(baseline_experiment.BaselineExperiment):
  width: int = 3

  def experiment_fixture(self):
    return pax_fiddle.Config(
      parameterized_experiment.ParameterizedExperiment,
      task={"width": self.width, "hidden": 4 * self.width},
    )


class BaselineExperimentTest(absltest.TestCase):
  def test_highlevel_setting_derives_lowlevel_ones(self):
    config = _Baseline.highlevel_config()
    config.width = 5
    experiment = pax_fiddle.build(config)
    self.assertIsInstance(experiment, parameterized_experiment.ParameterizedExperiment)
    self.assertEqual(experiment.task(), {"width": 5, "hidden": 20})

  def test_lower_then_edit(self):
    lowered = _Baseline.lowlevel_config(width=pax_fiddle.Config(_double, x=4))
    self.assertEqual(lowered.task, {"width": 8, "hidden": 32})  # The setting was built first.
    lowered.task = {"width": 1}
    self.assertEqual(pax_fiddle.build(lowered).task(), {"width": 1})

  def test_lower_needs_a_highlevel_config(self):
    with self.assertRaisesRegex(ValueError, "make_experiment"):
      baseline_experiment.lower(_Baseline.lowlevel_config())


if __name__ == "__main__":
  absltest.main()
