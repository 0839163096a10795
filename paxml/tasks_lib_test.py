"""Tests task_from_fields (a TaskConfig from UPPERCASE class fields) and to_task_config (the
TaskConfig of Pax's SingleTask)."""

import dataclasses

from absl.testing import absltest
import flax.linen as nn

from paxml import tasks_lib
from praxis import optimizers
from praxis import pax_fiddle
from praxis.layers import linears

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


def _single_task() -> pax_fiddle.Config:
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name="t")
  task_p.model = pax_fiddle.Config(linears.Linear, name="m", input_dims=2, output_dims=3)
  task_p.model.ici_mesh_shape = [1, 2, 1]
  task_p.train.learner.optimizer = pax_fiddle.Config(optimizers.Adam, learning_rate=0.1)
  return task_p


class ToTaskConfigTest(absltest.TestCase):
  def test_pax_defaults_and_set_fields_reach_the_task_config(self):
    task_p = _single_task()
    task_p.train.num_train_steps = 12
    task_p.train.save_interval_steps = 4
    task_p.train.eval_skip_train = True
    task = tasks_lib.to_task_config(task_p)
    self.assertIsInstance(task.model, linears.Linear)
    self.assertEqual((task.model.input_dims, task.model.output_dims), (2, 3))
    self.assertEqual((task.num_train_steps, task.save_interval_steps), (12, 4))
    self.assertTrue(task.eval_skip_train)
    # Pax's defaults where the task sets nothing.
    self.assertEqual(
      (task.save_max_to_keep, task.summary_interval_steps, task.eval_interval_steps),
      (10, 100, 100),
    )
    self.assertEqual((task.save_keep_interval_duration, task.random_seed), ("12h", 1234))
    self.assertEqual(task.ici_mesh_shape, (1, 2, 1))
    self.assertIsNone(task.dcn_mesh_shape)
    self.assertEqual(task.optimizer.learning_rate, 0.1)

  def test_a_task_config_passes_through(self):
    task = tasks_lib.TaskConfig(model=_MODEL, num_train_steps=1, learning_rate=0.1)
    self.assertIs(tasks_lib.to_task_config(task), task)

  def test_lists_the_fields_it_does_not_apply(self):
    task_p = _single_task()
    task_p.train.gc_interval_steps = 5
    task_p.train.profiler_num_steps = 9  # Pax's helpers set it: the profiler's own business.
    task_p.train.learner.bprop_variable_exclusion = ["w"]
    task_p.decode.random_seed = 3
    task_p.summary_verbosity = 0
    self.assertEqual(
      sorted(tasks_lib.not_applied(task_p)),
      [
        "decode.random_seed",
        "summary_verbosity",
        "train.gc_interval_steps",
        "train.learner.bprop_variable_exclusion",
      ],
    )
    self.assertEqual(tasks_lib.not_applied(_single_task()), [])

  def test_refuses_what_would_change_training(self):
    task_p = _single_task()
    task_p.vn.vn_scale = 0.1
    with self.assertRaisesRegex(NotImplementedError, "variational noise"):
      tasks_lib.to_task_config(task_p)
    task_p = _single_task()
    task_p.train.learner.loss_name = "avg_xent"
    with self.assertRaisesRegex(ValueError, "total_loss"):
      tasks_lib.to_task_config(task_p)
    task_p = _single_task()
    task_p.train.learner.optimizer = None
    with self.assertRaisesRegex(ValueError, "set_default_adam"):
      tasks_lib.to_task_config(task_p)
    with self.assertRaisesRegex(TypeError, "SingleTask"):
      tasks_lib.to_task_config(pax_fiddle.Config(linears.Linear))

  def test_a_task_needs_a_name(self):
    with self.assertRaisesRegex(ValueError, "needs a name"):
      pax_fiddle.instantiate(pax_fiddle.Config(tasks_lib.SingleTask))


if __name__ == "__main__":
  absltest.main()
