"""PeriodicAction: step/time intervals, growth ratios, end step, log_all_data, async errors."""

from absl.testing import absltest

from paxml.experiment_api import periodic


class PeriodicActionTest(absltest.TestCase):

  def _run(self, action, steps, dt=1.0):
    for step in steps:
      action(100.0 + step * dt, step, {"loss": float(step)})

  def test_steps_growth_and_end_step(self):
    calls = []
    action = periodic.PeriodicAction(lambda t, s, sc: calls.append(s), "steps", 50,
                                     logging_growth_ratios=[1, 2, 5], end_step_to_action=77)
    self._run(action, range(1, 120))
    self.assertEqual(calls, [1, 2, 5, 10, 20, 50, 77, 100])

  def test_secs_uses_passed_time_and_reports_steps_per_sec(self):
    calls = []
    action = periodic.PeriodicAction(lambda t, s, sc: calls.append((s, sc["steps_per_sec"])),
                                     "secs", 10.0, start_time=100.0, start_step=0)
    self._run(action, range(1, 25), dt=2.0)  # Step k at t = 100 + 2k.
    self.assertEqual(calls, [(5, 0.5), (10, 0.5), (15, 0.5), (20, 0.5)])

  def test_log_all_data_replays_every_step(self):
    calls = []
    action = periodic.PeriodicAction(lambda t, s, sc: calls.append((s, sc["loss"])), "steps",
                                     3, log_all_data=True)
    self._run(action, range(1, 7))
    self.assertEqual(calls, [(s, float(s)) for s in range(1, 7)])

  def test_async_error_surfaces_on_next_call_and_later_calls_skip(self):
    calls = []

    def fn(t, s, sc):
      calls.append(s)
      if s == 2:
        raise RuntimeError("writer broke")

    action = periodic.PeriodicAction(fn, "steps", 1, run_async=True)
    action(0.0, 1, {})
    action(0.0, 2, {})
    with self.assertRaisesRegex(RuntimeError, "writer broke"):
      action._fn.wait()  # pylint: disable=protected-access
    with self.assertRaisesRegex(RuntimeError, "writer broke"):
      action(0.0, 3, {})
    self.assertEqual(calls, [1, 2])


if __name__ == "__main__":
  absltest.main()
