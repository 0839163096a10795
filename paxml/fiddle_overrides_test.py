"""Fiddle's flags on experiments: --fdl_set on --exp experiments, and --fdl_config."""

import dataclasses

from absl.testing import absltest
from absl.testing import flagsaver
import fiddle as fdl

from paxml import base_experiment
from paxml import fiddle_overrides
from paxml import pax_flags  # noqa: F401  # Defines Fiddle's flags, as main does.
from praxis import pax_fiddle


@dataclasses.dataclass
class Train:
  num_train_steps: int = 100
  learning_rate: float = 1e-3


@dataclasses.dataclass
class Task:
  name: str
  train: Train
  mesh: tuple[int, ...] = (1, 1, 1)


class FiddleTaskExperiment(base_experiment.BaseExperiment):
  """task() returns a Fiddle config, the way Pax's experiments return pax_fiddle.Config(SingleTask)."""

  NUM_LAYERS = 2

  def datasets(self):
    return []

  def task(self):
    return pax_fiddle.Config(Task, name="t", train=pax_fiddle.Config(Train))


class BuiltTaskExperiment(FiddleTaskExperiment):
  """task() returns the built object: its fields cannot be set from the command line."""

  def task(self):
    return fdl.build(super().task())


class ApplySettingsTest(absltest.TestCase):
  def test_sets_experiment_attributes_and_task_fields(self):
    experiment = FiddleTaskExperiment()
    fiddle_overrides.apply_settings(
      experiment,
      ["NUM_LAYERS=4", "train.num_train_steps=7", "train.learning_rate=0.5", "mesh=[1,4,2]"],
    )
    self.assertEqual(experiment.NUM_LAYERS, 4)
    self.assertEqual(FiddleTaskExperiment.NUM_LAYERS, 2)  # The class is untouched.
    task = experiment.task()
    self.assertIsInstance(task, fdl.Buildable)  # Still a config, for the trainer to build.
    built = fdl.build(task)
    self.assertEqual(built.train.num_train_steps, 7)
    self.assertEqual(built.train.learning_rate, 0.5)
    self.assertEqual(built.mesh, [1, 4, 2])
    self.assertEqual(fdl.build(FiddleTaskExperiment().task()).train.num_train_steps, 100)

  def test_task_fields_of_a_built_task_are_refused_in_one_line(self):
    with self.assertRaises(fiddle_overrides.OverrideError) as cm:
      fiddle_overrides.apply_settings(BuiltTaskExperiment(), ["train.num_train_steps=7"])
    message = str(cm.exception)
    self.assertIn("BuiltTaskExperiment.task() returns a Task, not a Fiddle config", message)
    self.assertNotIn("\n", message)
    # Experiment attributes still work on such an experiment.
    experiment = BuiltTaskExperiment()
    fiddle_overrides.apply_settings(experiment, ["NUM_LAYERS=3"])
    self.assertEqual(experiment.NUM_LAYERS, 3)

  def test_a_wrong_path_or_a_malformed_setting_fails_at_once(self):
    with self.assertRaisesRegex(fiddle_overrides.OverrideError, "train.num_steps"):
      fiddle_overrides.apply_settings(FiddleTaskExperiment(), ["train.num_steps=7"])
    with self.assertRaisesRegex(fiddle_overrides.OverrideError, "expected PATH=VALUE"):
      fiddle_overrides.apply_settings(FiddleTaskExperiment(), ["NUM_LAYERS"])


def make_experiment() -> FiddleTaskExperiment:
  experiment = FiddleTaskExperiment()
  experiment.NUM_LAYERS = 6
  return experiment


class ExperimentFromFlagsTest(absltest.TestCase):
  def test_none_without_fiddle_flags(self):
    self.assertIsNone(fiddle_overrides.experiment_from_flags(None))

  @flagsaver.flagsaver(fdl_set=["NUM_LAYERS=5"])
  def test_fdl_config_names_an_experiment_class_and_settings_apply_to_it(self):
    with flagsaver.flagsaver(fdl_config=f"{__name__}.FiddleTaskExperiment"):
      experiment = fiddle_overrides.experiment_from_flags(None)
    self.assertIsInstance(experiment, FiddleTaskExperiment)
    self.assertEqual(experiment.NUM_LAYERS, 5)

  def test_fdl_config_names_a_function(self):
    with flagsaver.flagsaver(fdl_config=f"{__name__}.make_experiment"):
      experiment = fiddle_overrides.experiment_from_flags(None)
    self.assertEqual(experiment.NUM_LAYERS, 6)

  def test_something_else_than_an_experiment_is_refused(self):
    with flagsaver.flagsaver(fdl_config=f"{__name__}.Train"):
      with self.assertRaisesRegex(fiddle_overrides.OverrideError, "Train, not an experiment"):
        fiddle_overrides.experiment_from_flags(None)

  def test_new_style_fdl_flag_value(self):
    value = pax_fiddle.Config(FiddleTaskExperiment)
    self.assertIsInstance(fiddle_overrides.experiment_from_flags(value), FiddleTaskExperiment)


if __name__ == "__main__":
  absltest.main()
