"""End-to-end tests of the train loop on a tiny model (a few seconds each)."""

import functools
import glob
import json
import os

from absl.testing import absltest
import fiddle as fdl
import jax
import numpy as np
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

from paxml import base_experiment
from paxml import synthetic_input
from paxml import tasks_lib
from paxml import trainer
from praxis import transformer_lm


class _TinyLm(base_experiment.BaseExperiment):
  """30 steps of a one-layer, 32-wide LM; subclasses change the step count."""

  NUM_TRAIN_STEPS = 30

  def datasets(self):
    return [fdl.Config(
        synthetic_input.SyntheticLmInput,
        batch_size=8, seq_len=16, vocab_size=16, max_stride=2, seed=5,
    )]

  def task(self):
    return tasks_lib.TaskConfig(
        model=transformer_lm.TransformerLm(
            vocab_size=16, model_dims=32, num_layers=1, num_heads=2,
            hidden_dims=64, max_seq_len=16,
        ),
        learning_rate=1e-2,
        num_train_steps=self.NUM_TRAIN_STEPS,
        save_interval_steps=10,
        save_max_to_keep=10,
        summary_interval_steps=5,
        random_seed=1,
    )


class _TinyLm40(_TinyLm):
  NUM_TRAIN_STEPS = 40


def _scalars(job_log_dir):
  """Returns {tag: {step: value}} from every train event file."""
  result = {}
  for path in sorted(glob.glob(os.path.join(job_log_dir, "summaries", "train", "*"))):
    acc = event_accumulator.EventAccumulator(path, size_guidance={"tensors": 0})
    acc.Reload()
    for tag in acc.Tags()["tensors"]:
      for event in acc.Tensors(tag):
        result.setdefault(tag, {})[event.step] = float(
            tensor_util.make_ndarray(event.tensor_proto))
  return result


def _checkpoint_names(job_log_dir):
  return sorted(os.listdir(os.path.join(job_log_dir, "checkpoints")))


def _saved_input_position(job_log_dir, step):
  path = os.path.join(job_log_dir, "checkpoints", f"checkpoint_{step:08d}",
                      "train_input", "metadata")
  with open(path) as f:
    return json.load(f)["num_batches"]


class TrainAndEvaluateTest(absltest.TestCase):

  def test_trains_saves_summarizes_and_resumes(self):
    job_log_dir = self.create_tempdir().full_path

    first = trainer.train_and_evaluate(_TinyLm(), job_log_dir)

    self.assertEqual(first["step"], 30)
    scalars = _scalars(job_log_dir)
    for tag in ("loss", "accuracy", "lr", "grad_norm", "Steps/sec"):
      self.assertIn(tag, scalars)
    self.assertEqual(sorted(scalars["loss"]), [5, 10, 15, 20, 25, 30])
    self.assertAlmostEqual(scalars["lr"][30], 1e-2, places=6)
    # Learning: the loss falls well below its start (about ln(16) = 2.77).
    self.assertLess(scalars["loss"][30], scalars["loss"][5] - 0.5)
    self.assertAlmostEqual(first["loss"], scalars["loss"][30], places=5)
    # The initial state, every 10 steps, and the end.
    self.assertEqual(_checkpoint_names(job_log_dir), [
        "checkpoint_00000000", "checkpoint_00000010",
        "checkpoint_00000020", "checkpoint_00000030",
    ])

    with self.assertLogs("absl", "INFO") as logs:
      second = trainer.train_and_evaluate(_TinyLm40(), job_log_dir)

    self.assertIn(
        "Restored checkpoint at step 30 from "
        f"{os.path.join(job_log_dir, 'checkpoints')}; resuming",
        "\n".join(logs.output),
    )
    self.assertTrue(any("step 40/40 loss" in line for line in logs.output))
    self.assertEqual(second["step"], 40)
    self.assertIn("checkpoint_00000040", _checkpoint_names(job_log_dir))
    scalars = _scalars(job_log_dir)
    # Summaries continue at 35, not again from 5.
    self.assertEqual(sorted(scalars["loss"]), [5, 10, 15, 20, 25, 30, 35, 40])
    # The restored model is the trained one, not a fresh initialisation.
    self.assertLess(scalars["loss"][35], scalars["loss"][5] - 0.5)
    # The input continued its stream: batch 40 is next, not batch 10.
    self.assertEqual(_saved_input_position(job_log_dir, 40), 40)

    with self.assertLogs("absl", "INFO") as logs:
      third = trainer.train_and_evaluate(_TinyLm40(), job_log_dir)
    self.assertEqual(third, {"step": 40.0})
    self.assertIn("Already at step 40 of num_train_steps=40; nothing to train",
                  "\n".join(logs.output))

    # Same data, per-step randomness and optimizer state: stopping at 30 and
    # resuming must end where an uninterrupted 40-step run ends.
    straight = trainer.train_and_evaluate(_TinyLm40(), self.create_tempdir().full_path)
    for key in ("loss", "accuracy", "grad_norm"):
      self.assertAlmostEqual(second[key], straight[key], places=5, msg=key)


class TrainStepTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.task = _TinyLm().task()
    optimizer, schedule = trainer.make_optimizer(cls.task)
    # Jitted: op-by-op (eager) execution of these takes several seconds.
    cls.state = jax.jit(functools.partial(
        trainer.init_state, cls.task.model, optimizer))(jax.random.PRNGKey(0))
    cls.batch = synthetic_input.SyntheticLmInput(
        batch_size=4, seq_len=16, vocab_size=16, seed=0).get_next()
    # A staticmethod, or attribute access would bind the test case as `state`.
    cls.step_fn = staticmethod(jax.jit(functools.partial(
        trainer.train_step, model=cls.task.model, optimizer=optimizer,
        schedule=schedule)))

  def _step(self, state):
    return self.step_fn(state, self.batch, jax.random.PRNGKey(1))

  def test_one_step_updates_params_and_reports_the_loss(self):
    new_state, metrics = self._step(self.state)
    self.assertEqual(int(new_state.step), 1)
    moved = jax.tree.map(lambda a, b: float(np.abs(a - b).max()),
                         new_state.params, self.state.params)
    self.assertTrue(all(d > 0 for d in jax.tree.leaves(moved)))
    logits = jax.jit(self.task.model.apply)(
        {"params": self.state.params}, self.batch["ids"])
    loss, _ = transformer_lm.lm_loss(logits, self.batch["labels"], self.batch["weights"])
    self.assertAlmostEqual(float(metrics["loss"]), float(loss), places=5)

  def test_step_is_a_pure_function(self):
    _, a = self._step(self.state)
    _, b = self._step(self.state)
    self.assertEqual(float(a["loss"]), float(b["loss"]))
    self.assertEqual(float(a["grad_norm"]), float(b["grad_norm"]))

  def test_warmup_schedule(self):
    task = tasks_lib.TaskConfig(model=self.task.model, learning_rate=0.1,
                                num_train_steps=10, warmup_steps=4)
    _, schedule = trainer.make_optimizer(task)
    np.testing.assert_allclose(
        [float(schedule(s)) for s in (0, 2, 4, 9)], [0.0, 0.05, 0.1, 0.1], atol=1e-7)


if __name__ == "__main__":
  absltest.main()
