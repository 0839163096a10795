"""Builds every registered experiment abstractly: configs, input, shapes of a step.

Nothing is compiled or trained: `jax.eval_shape` traces initialisation and one
train step, which catches mismatches (sequence longer than max_seq_len, heads
that do not divide the width, a missing training dataset) in seconds.
"""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import fiddle as fdl
import flax.linen as nn
import jax

from paxml import experiment_registry
from paxml import train_states
from paxml import trainer
from praxis import pytypes
# Every module that registers experiments; add new ones here.
from paxml.tasks.lm.params import demo  # pylint: disable=unused-import

_NAMES = experiment_registry.canonical_names()


class AllExperimentsTest(parameterized.TestCase):

  def test_some_experiments_are_registered(self):
    self.assertIn("tasks.lm.params.demo.DemoLm", _NAMES)

  @parameterized.named_parameters((name, name) for name in _NAMES)
  def test_builds_abstractly(self, name):
    experiment = experiment_registry.get(name)()
    task = experiment.task()
    train_input = fdl.build(experiment.train_dataset())
    batch = pytypes.NestedMap(train_input.get_next())
    self.assertEqual(batch["ids"].shape, batch["labels"].shape)

    optimizer, schedule = train_states.make_optimizer(task)
    rng = jax.random.PRNGKey(0)
    state = jax.eval_shape(lambda r: nn.unbox(
        train_states.init_state(task.model, optimizer, r, batch)), rng)
    new_state, metrics = jax.eval_shape(
        functools.partial(trainer.train_step, model=task.model,
                          optimizer=optimizer, schedule=schedule,
                          num_microbatches=task.num_microbatches),
        state, batch, rng)
    self.assertEqual(jax.tree.structure(new_state), jax.tree.structure(state))
    for key in ("loss", "Metrics/total_loss", "lr", "learning/raw_grad_norm"):
      self.assertEqual(metrics[key].shape, (), msg=key)


if __name__ == "__main__":
  absltest.main()
