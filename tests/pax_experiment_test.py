"""A user experiment written the way Pax's docs write one trains here unchanged.

`MyLmCloudLm` subclasses `lm_cloud.LmCloudSpmd`, edits the `pax_fiddle.Config(SingleTask)`
that `task()` returns (steps, intervals, optimizer, model fields) and reads Pax's synthetic
input through `base_input.LingvoInputAdaptor` + `input_generator.SyntheticLmData`. It runs
through `main.run`, the function `main` calls, for 5 steps.
"""

import os

from absl.testing import absltest
from jax import numpy as jnp

from paxml import experiment_registry
from paxml import main
from paxml import tasks_lib
from paxml.tasks.lm import input_generator
from paxml.tasks.lm.params import lm_cloud
from praxis import base_input
from praxis import layers
from praxis import pax_fiddle
from praxis import schedules


@experiment_registry.register
class MyLmCloudLm(lm_cloud.LmCloudSpmd):
  """Two 32-wide layers over 64 tokens, 5 steps."""

  NUM_LAYERS = 2
  MODEL_DIMS = 32
  HIDDEN_DIMS = 64
  DIMS_PER_HEAD = 8
  VOCAB_SIZE = 64
  MAX_SEQ_LEN = 16
  FPROP_DTYPE = jnp.float32
  ACTIVATION_CLS = layers.ReLU
  ICI_MESH_SHAPE = [1, 1, 1]

  def _input(self, is_training: bool) -> pax_fiddle.Config:
    input_p = input_generator.SyntheticLmData.HParams()
    input_p.batch_size = 4
    input_p.seq_len = self.MAX_SEQ_LEN
    return pax_fiddle.Config(base_input.LingvoInputAdaptor, input=input_p, is_training=is_training)

  def datasets(self) -> list[pax_fiddle.Config]:
    return [self._input(True), self._input(False)]

  def task(self) -> pax_fiddle.Config:
    task_p = super().task()
    task_p.train.num_train_steps = 5
    task_p.train.save_interval_steps = 5
    task_p.train.summary_interval_steps = 1
    task_p.train.eval_interval_steps = 5
    lp = task_p.train.learner
    lp.optimizer.learning_rate = 1e-2
    lp.optimizer.lr_schedule = pax_fiddle.Config(schedules.Constant)
    task_p.model.lm_tpl.softmax_tpl.soft_cap_logits = None
    return task_p


class PaxUserExperimentTest(absltest.TestCase):
  def test_trains_five_steps(self):
    job_log_dir = self.create_tempdir().full_path
    result = main.run(experiment_registry.canonical_name(MyLmCloudLm), job_log_dir)
    self.assertEqual(result["step"], 5)
    # Pax's synthetic rows are all ones: the loss falls from about ln(64) = 4.16 at once.
    self.assertLess(result["loss"], 3.0)
    # train.save_interval_steps=5: the first step's checkpoint and the last.
    self.assertEqual(
      sorted(os.listdir(os.path.join(job_log_dir, "checkpoints"))),
      ["checkpoint_00000000", "checkpoint_00000005"],
    )

  def test_task_fields_reach_the_trainer(self):
    task = tasks_lib.to_task_config(MyLmCloudLm().task())
    self.assertEqual(
      (task.num_train_steps, task.save_interval_steps, task.summary_interval_steps),
      (5, 5, 1),
    )
    self.assertEqual(task.ici_mesh_shape, (1, 1, 1))
    self.assertEqual(task.optimizer.learning_rate, 1e-2)
    self.assertIsNone(task.model.lm_tpl.softmax_tpl.soft_cap_logits)


if __name__ == "__main__":
  absltest.main()
