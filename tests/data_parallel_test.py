"""The trainer on 4 (fake CPU) devices gives the losses of a plain single-device loop.

The trainer splits each batch over every device along the batch axis and replicates the state. This
test runs with XLA_FLAGS=--xla_force_host_platform_device_count=4 (set by its BUILD target) and
compares the trainer's metrics with `train_step` jitted on one device, step for step.
"""

import functools

from absl.testing import absltest
import fiddle as fdl
import jax
import numpy as np

from paxml import trainer
from paxml.tasks.lm.params import demo

_STEPS = 6


class _TinyLm(demo.DemoLm):
  """DemoLm shrunk to a few seconds; the batch of 8 splits evenly over 4 devices."""

  VOCAB_SIZE = 16
  SEQ_LEN = 16
  BATCH_SIZE = 8
  MAX_STRIDE = 2
  INPUT_SEED = 3
  MODEL_DIMS = 32
  NUM_LAYERS = 1
  NUM_HEADS = 2
  HIDDEN_DIMS = 64
  LEARNING_RATE = 1e-2
  WARMUP_STEPS = 0
  NUM_TRAIN_STEPS = _STEPS
  SAVE_INTERVAL_STEPS = 100
  SAVE_MAX_TO_KEEP = 2
  SUMMARY_INTERVAL_STEPS = 1


def _single_device_losses(experiment):
  """Per-step losses of the same model, data and keys, all on device 0 with no sharding."""
  task = experiment.task()
  data = fdl.build(experiment.train_dataset())
  optimizer, schedule = trainer.make_optimizer(task)
  # The trainer's key derivation: split the seed into (init, train).
  init_rng, train_rng = jax.random.split(jax.random.PRNGKey(task.random_seed))
  device = jax.devices()[0]
  state = jax.device_put(trainer.init_state(task.model, optimizer, init_rng), device)
  step_fn = jax.jit(functools.partial(
      trainer.train_step, model=task.model, optimizer=optimizer, schedule=schedule))
  losses = []
  for _ in range(_STEPS):
    state, metrics = step_fn(state, jax.device_put(data.get_next(), device), train_rng)
    losses.append(float(metrics["loss"]))
  return losses


class DataParallelTest(absltest.TestCase):

  def test_four_devices_match_one(self):
    self.assertEqual(jax.device_count(), 4, "the BUILD target sets 4 host devices")
    experiment = _TinyLm()
    final = trainer.train_and_evaluate(experiment, self.create_tempdir().full_path)
    reference = _single_device_losses(experiment)
    self.assertEqual(final["step"], _STEPS)
    # Sharded reductions sum in another order than one device does: equal up to float32 rounding.
    np.testing.assert_allclose(final["loss"], reference[-1], rtol=1e-5)
    # The reference itself must be a training run, or matching it would prove little.
    self.assertLess(reference[-1], reference[0])


if __name__ == "__main__":
  absltest.main()
