"""Tests for cron: exact firing sets on the train state, and CronTab.run."""

from unittest import mock

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
import optax

from paxml import triggers
from paxml.toolkit import cron
from paxml.toolkit import training


def _state(step: int) -> training.TrainState:
  state = training.TrainState.create(apply_fn=None, params={"w": jnp.zeros(2)}, tx=optax.sgd(0.1))
  return state.replace(step=step)


def _fired(trigger: cron.Trigger, steps) -> list[int]:
  return [s for s in steps if trigger.check(_state(s))]


class TriggerTest(absltest.TestCase):
  def test_firing_sets(self):
    self.assertEqual(_fired(cron.ForEachNSteps(4), range(13)), [0, 4, 8, 12])
    self.assertEqual(_fired(cron.AtNthStep([3, 7]), range(10)), [3, 7])
    # bobbin's set: steps 0..n.
    self.assertEqual(_fired(cron.AtFirstNSteps(3), range(10)), [0, 1, 2, 3])
    # The first n steps this process sees (bobbin fired n - 1 times).
    self.assertEqual(
      _fired(cron.AtFirstNSteps(3, of_process=True), range(100, 110)), [100, 101, 102]
    )
    self.assertEqual(
      _fired(cron.AtFirstNSteps(2) | cron.ForEachNSteps(5), range(11)), [0, 1, 2, 5, 10]
    )

  def test_any_paxml_trigger_runs_on_the_state_step(self):
    # The toolkit's triggers are paxml.triggers asked with the state's step.
    self.assertIsInstance(cron.ForEachNSteps(3).step_trigger, triggers.StepInterval)
    growth = cron.StepTrigger(triggers.GrowthSteps([1, 5])) | cron.AtNthStep(7)
    self.assertEqual(_fired(growth, range(60)), [1, 5, 7, 10, 50])

  def test_time_interval_uses_time_time_and_a_strict_bound(self):
    with mock.patch("time.time") as now:
      trigger = cron.ForEachTSeconds(7)
      fired = []
      for t in (10.0, 15.0, 17.0, 17.5, 24.5):
        now.return_value = t
        fired.append(trigger.check(_state(0)))
    self.assertEqual(fired, [True, False, False, True, False])


class CronTabTest(absltest.TestCase):
  def test_actions_get_the_state_and_extra_arguments(self):
    seen = []
    tab = cron.CronTab().schedule(
      lambda s, *a, **k: seen.append((int(s.step), a, k)), name="a", at_step=2
    )
    self.assertEqual(tab.run(_state(1), step_info="x"), {})
    self.assertEqual(tab.run(_state(2), step_info="x"), {"a": None})
    # `run(state, False)` is bobbin's is_train_state_replicated, not an action argument.
    tab.run(_state(2), False, step_info="y")
    self.assertEqual(seen, [(2, (), {"step_info": "x"}), (2, (), {"step_info": "y"})])

  def test_replicated_state_is_unreplicated(self):
    steps = []
    tab = cron.CronTab().schedule(lambda s: steps.append(np.shape(s.step)), step_interval=1)
    replicated = _state(3).replace(step=np.full((2,), 3))
    tab.run(replicated)
    self.assertEqual(steps, [()])

  def test_schedule_errors_name_the_keywords(self):
    with self.assertRaisesRegex(TypeError, "every"):
      cron.CronTab().schedule(lambda s: None, every=3)
    with self.assertRaisesRegex(ValueError, "step_interval"):
      cron.CronTab().schedule(lambda s: None)


if __name__ == "__main__":
  absltest.main()
