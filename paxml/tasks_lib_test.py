"""Tests task_from_fields: a TaskConfig from an experiment's UPPERCASE class fields."""

import dataclasses

from absl.testing import absltest
import flax.linen as nn

from paxml import tasks_lib

_MODEL = nn.Dense(features=1)


class _Experiment:
  """Sets a few TaskConfig fields the Pax way, plus fields that are not TaskConfig's."""

  NUM_TRAIN_STEPS = 7
  LEARNING_RATE = 0.5
  WARMUP_STEPS = 3
  ICI_MESH_SHAPE = (1, 2, 1)
  EVAL_INTERVAL_STEPS = 4
  EVAL_SKIP_TRAIN = True
  RANDOM_SEED = 9
  MODEL_DIMS = 64  # Architecture: not a TaskConfig field, so not read.


class _Recorder:
  """Answers no attribute, and records which ones were asked for."""

  def __init__(self):
    self.asked = set()

  def __getattr__(self, name):
    self.asked.add(name)
    raise AttributeError(name)


class TaskFromFieldsTest(absltest.TestCase):
  def test_reads_the_upper_cased_fields(self):
    task = tasks_lib.task_from_fields(_Experiment(), _MODEL)
    self.assertIs(task.model, _MODEL)
    self.assertEqual(
      (
        task.num_train_steps,
        task.learning_rate,
        task.warmup_steps,
        task.ici_mesh_shape,
        task.eval_interval_steps,
        task.eval_skip_train,
        task.random_seed,
      ),
      (7, 0.5, 3, (1, 2, 1), 4, True, 9),
    )

  def test_fields_the_experiment_lacks_keep_task_config_defaults(self):
    task = tasks_lib.task_from_fields(_Experiment(), _MODEL)
    # Written out (TaskConfig's documented defaults), not read from the dataclass.
    self.assertEqual(
      (
        task.optimizer,
        task.clip_gradient_norm_to_value,
        task.num_microbatches,
        task.dcn_mesh_shape,
        task.save_interval_steps,
        task.save_max_to_keep,
        task.save_keep_interval_duration,
        task.summary_interval_steps,
        task.decode_interval_steps,
      ),
      (None, 5.0, 1, None, 5000, 10, None, 100, None),
    )
    # And every field the experiment does not name equals a plain TaskConfig's.
    plain = tasks_lib.TaskConfig(model=_MODEL, num_train_steps=7, learning_rate=0.5)
    named = {name.lower() for name in vars(_Experiment) if name.isupper()}
    for field in dataclasses.fields(tasks_lib.TaskConfig):
      if field.name not in named:
        self.assertEqual(getattr(task, field.name), getattr(plain, field.name), field.name)

  def test_overrides_win(self):
    task = tasks_lib.task_from_fields(
      _Experiment(), _MODEL, num_train_steps=11, ici_mesh_shape=None, save_max_to_keep=2
    )
    self.assertEqual(
      (task.num_train_steps, task.ici_mesh_shape, task.save_max_to_keep), (11, None, 2)
    )
    self.assertEqual(task.learning_rate, 0.5)  # Not overridden: still the experiment's.

  def test_subclass_values_are_the_ones_read(self):

    class Longer(_Experiment):
      NUM_TRAIN_STEPS = 70

    self.assertEqual(tasks_lib.task_from_fields(Longer(), _MODEL).num_train_steps, 70)

  def test_asks_for_every_task_config_field_but_model(self):
    # Generic over dataclasses.fields: a field added to TaskConfig is read with no change here.
    recorder = _Recorder()
    with self.assertRaises(TypeError):  # Nothing found: num_train_steps is missing.
      tasks_lib.task_from_fields(recorder, _MODEL)
    expected = {f.name.upper() for f in dataclasses.fields(tasks_lib.TaskConfig)} - {"MODEL"}
    self.assertEqual(recorder.asked, expected)
    self.assertContainsSubset(
      {
        "NUM_TRAIN_STEPS",
        "OPTIMIZER",
        "LEARNING_RATE",
        "WARMUP_STEPS",
        "ICI_MESH_SHAPE",
        "DCN_MESH_SHAPE",
        "SAVE_INTERVAL_STEPS",
        "SUMMARY_INTERVAL_STEPS",
        "EVAL_INTERVAL_STEPS",
        "DECODE_INTERVAL_STEPS",
        "RANDOM_SEED",
      },
      recorder.asked,
    )

  def test_misspelt_upper_case_field_is_not_read(self):

    class Typo(_Experiment):
      NUM_TRAIN_STEP = 1000  # Pax allows any UPPERCASE field; this one is simply not TaskConfig's.

    self.assertEqual(tasks_lib.task_from_fields(Typo(), _MODEL).num_train_steps, 7)

  def test_bad_value_of_a_known_field_is_task_config_error(self):

    class NoSaves(_Experiment):
      SAVE_INTERVAL_STEPS = 0

    with self.assertRaisesRegex(ValueError, "save_interval_steps must be at least 1, got 0"):
      tasks_lib.task_from_fields(NoSaves(), _MODEL)

  def test_optimizer_with_shorthand_fields_is_task_config_error(self):
    # The shorthand fields are read too, so an experiment with its own optimizer overrides them.
    with self.assertRaisesRegex(ValueError, "shorthand for optimizer=None"):
      tasks_lib.task_from_fields(_Experiment(), _MODEL, optimizer=object())
    task = tasks_lib.task_from_fields(
      _Experiment(), _MODEL, optimizer="adam config", learning_rate=None, warmup_steps=0
    )
    self.assertEqual(task.optimizer_config(), "adam config")

  def test_override_that_is_no_field_is_a_type_error(self):
    with self.assertRaisesRegex(TypeError, "num_train_step is not a TaskConfig field"):
      tasks_lib.task_from_fields(_Experiment(), _MODEL, num_train_step=3)


if __name__ == "__main__":
  absltest.main()
