"""CronTab: bobbin's schedule/run convention over paxml.triggers."""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
import optax

from paxml.toolkit import crontab
from paxml.toolkit import training


def _state(step):
  return training.TrainState.create(apply_fn=None, params={"w": jnp.ones(2)},
                                    tx=optax.sgd(1.0)).replace(step=step)


class CronTabTest(absltest.TestCase):

  def test_schedule_run_and_results_by_name(self):
    seen = []

    def save(state, *, step_info):
      seen.append(("save", int(state.step), step_info))
      return "saved"

    def log(state, *, step_info):
      seen.append(("log", int(state.step), step_info))
      return int(state.step)

    tab = crontab.CronTab().schedule(save, step_interval=4, at_step=3).schedule(
        log, name="log", at_first_steps=2)
    results = [tab.run(_state(s), step_info=s * 10) for s in range(1, 9)]
    self.assertEqual(results, [{"log": 1}, {"log": 2}, {"save": "saved"}, {"save": "saved"},
                               {}, {}, {}, {"save": "saved"}])
    self.assertEqual([s[:2] for s in seen],
                     [("log", 1), ("log", 2), ("save", 3), ("save", 4), ("save", 8)])

  def test_at_first_steps_counts_exactly(self):
    tab = crontab.CronTab().schedule(lambda s: 1, name="a", at_first_steps=3).schedule(
        lambda s: 1, name="p", at_first_steps_of_process=3)
    fired = {"a": [], "p": []}
    for step in range(0, 10):
      for name in tab.run(_state(step)):
        fired[name].append(step)
    self.assertEqual(fired, {"a": [1, 2, 3], "p": [0, 1, 2]})

  def test_replicated_state_is_unreplicated_for_actions(self):
    replicated = _state(jnp.array([5, 5]))  # A leading device axis of 2.
    replicated = replicated.replace(params={"w": jnp.ones((2, 2))})
    got = crontab.CronTab().schedule(
        lambda s: (int(s.step), np.shape(s.params["w"])), name="x",
        step_interval=5).run(replicated)
    self.assertEqual(got, {"x": (5, (2,))})

  def test_keyword_errors(self):
    with self.assertRaisesRegex(TypeError, "time_interval"):
      crontab.CronTab().schedule(lambda s: None, every=3)
    with self.assertRaisesRegex(ValueError, "at least one"):
      crontab.CronTab().schedule(lambda s: None)


if __name__ == "__main__":
  absltest.main()
