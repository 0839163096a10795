"""Exact firing sets of the triggers, with a fake clock for time triggers."""

from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from paxml import triggers


def _fired(trigger, steps):
  return [s for s in steps if trigger.check(s)]


class FakeClock:
  """A clock the test advances by hand."""

  def __init__(self, now=1000.0):
    self.now = now

  def __call__(self):
    return self.now


class TriggerTest(parameterized.TestCase):
  def test_step_interval_fires_on_multiples_including_zero(self):
    self.assertEqual(_fired(triggers.StepInterval(5), range(0, 23)), [0, 5, 10, 15, 20])

  def test_at_step_single_and_many(self):
    self.assertEqual(_fired(triggers.AtSteps(7), range(20)), [7])
    self.assertEqual(_fired(triggers.AtSteps([3, 11, 3]), range(20)), [3, 11])

  def test_at_first_steps_fires_at_steps_zero_to_n(self):
    # bobbin's AtFirstNSteps(3) set: 0, 1, 2, 3.
    self.assertEqual(_fired(triggers.AtFirstSteps(3), range(0, 10)), [0, 1, 2, 3])
    self.assertEqual(_fired(triggers.AtFirstSteps(np.int64(0)), range(0, 3)), [0])
    # A run resumed past step n never fires.
    self.assertEqual(_fired(triggers.AtFirstSteps(3), range(100, 110)), [])

  def test_at_first_steps_of_process_fires_exactly_n_times(self):
    # bobbin's of_process variant fired 2 times for n=3.
    self.assertEqual(_fired(triggers.AtFirstSteps(3, of_process=True), range(1, 10)), [1, 2, 3])
    # After a restart the count starts at the first step this process sees.
    self.assertEqual(
      _fired(triggers.AtFirstSteps(3, of_process=True), range(1001, 1010)), [1001, 1002, 1003]
    )
    # The first step seen counts even when the loop also checks step 0.
    self.assertEqual(_fired(triggers.AtFirstSteps(2, of_process=True), range(0, 10)), [0, 1])

  def test_time_interval_with_injected_clock(self):
    clock = FakeClock()
    trigger = triggers.TimeInterval(10.0, clock=clock)
    fired = []
    for step in range(1, 30):
      clock.now += 3.0  # One step every 3 s: fires at t=3 (first check), 12, 21, ...
      if trigger.check(step):
        fired.append(step)
    # First check fires (fire_at_zero); then every 4th step (12 s >= 10 s).
    self.assertEqual(fired, [1, 5, 9, 13, 17, 21, 25, 29])

  def test_time_interval_without_fire_at_zero_waits_from_creation(self):
    clock = FakeClock()
    trigger = triggers.TimeInterval(10.0, fire_at_zero=False, clock=clock)
    self.assertFalse(trigger.check(1))
    clock.now += 9.99
    self.assertFalse(trigger.check(2))
    clock.now += 0.01
    self.assertTrue(trigger.check(3))
    self.assertFalse(trigger.check(4))

  def test_time_interval_not_inclusive_needs_more_than_the_interval(self):
    clock = FakeClock()
    trigger = triggers.TimeInterval(5.0, clock=clock, inclusive=False)
    fired = []
    for t in (0.0, 5.0, 5.5, 10.5, 10.6):
      clock.now = t
      fired.append(trigger.check(0))
    self.assertEqual(fired, [True, False, True, False, True])

  def test_numpy_ints_are_steps(self):
    self.assertEqual(_fired(triggers.AtSteps(np.int32(4)), range(6)), [4])
    self.assertEqual(_fired(triggers.StepInterval(np.int64(3)), range(7)), [0, 3, 6])
    # bobbin's `step % n == 0` for a negative n.
    self.assertEqual(_fired(triggers.StepInterval(-2), range(5)), [0, 2, 4])

  def test_time_interval_default_clock_is_patchable(self):
    with mock.patch("time.monotonic") as monotonic:
      monotonic.return_value = 50.0
      trigger = triggers.TimeInterval(5.0)
      self.assertTrue(trigger.check(0))
      monotonic.return_value = 54.0
      self.assertFalse(trigger.check(1))
      monotonic.return_value = 55.0
      self.assertTrue(trigger.check(2))

  def test_growth_steps_match_jaxline_schedule(self):
    trigger = triggers.GrowthSteps([1, 2, 5])
    self.assertEqual(_fired(trigger, range(0, 1001)), [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000])
    # JAXline's float code once fired near 400000; integer maths cannot.
    trigger = triggers.GrowthSteps([1, 4])
    self.assertTrue(trigger.check(400000))
    self.assertFalse(trigger.check(399996))
    self.assertFalse(trigger.check(400001))

  def test_growth_steps_take_fractional_ratios_and_refuse_non_positive_ones(self):
    # round(1.5 * 10**k), k the step's decade: 2, 15, 150 (JAXline's rule).
    self.assertEqual(_fired(triggers.GrowthSteps([1.5]), range(0, 200)), [2, 15, 150])
    # JAXline's tests pass 10 beside 1: it adds no step (10 * 10**k has one digit too many).
    self.assertEqual(_fired(triggers.GrowthSteps([10]), range(0, 2000)), [])
    for bad in (0, -1, True):
      with self.assertRaisesRegex(ValueError, "positive number"):
        triggers.GrowthSteps([bad])

  def test_time_interval_restart_starts_the_wait_again(self):
    now = [100.0]
    trigger = triggers.TimeInterval(10, fire_at_zero=False, clock=lambda: now[0])
    now[0] = 109.0
    self.assertFalse(trigger.check(1))
    trigger.restart(105.0)
    now[0] = 114.0
    self.assertFalse(trigger.check(2))  # 9 s after the restart, not 14 s after creation.
    now[0] = 115.0
    self.assertTrue(trigger.check(3))

  def test_or_fires_on_union_and_checks_every_operand(self):
    trigger = triggers.StepInterval(4) | triggers.AtSteps([1, 6])
    self.assertEqual(_fired(trigger, range(0, 10)), [0, 1, 4, 6, 8])
    # Flattening.
    three = trigger | triggers.AtSteps(9)
    self.assertLen(three.triggers, 3)
    # No short-circuit: the per-process trigger sees step 1 although the
    # interval trigger already fired there, so its window starts at 1.
    of_process = triggers.AtFirstSteps(2, of_process=True)
    combined = triggers.StepInterval(1) | of_process
    self.assertTrue(combined.check(1))
    self.assertEqual(_fired(of_process, [2, 3]), [2])

  @parameterized.parameters(
    ({"step_interval": 0},),
    ({"at_first_steps": -1},),
    ({"time_interval": 0},),
    ({"at_step": [-2]},),
    ({"step_interval": 2.5},),
  )
  def test_bad_values_raise(self, kwargs):
    with self.assertRaises(ValueError):
      triggers.make_trigger(**kwargs)


class MakeTriggerTest(absltest.TestCase):
  def test_unknown_keyword_lists_the_valid_ones(self):
    with self.assertRaisesRegex(TypeError, "step_intervl") as cm:
      triggers.make_trigger(step_intervl=5)
    for name in triggers.TRIGGER_KWARGS:
      self.assertIn(name, str(cm.exception))
    self.assertLen(triggers.TRIGGER_KWARGS, 5)

  def test_no_trigger_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "never run"):
      triggers.make_trigger()
    with self.assertRaisesRegex(ValueError, "never run"):
      triggers.make_trigger(step_interval=None)

  def test_keywords_are_ored(self):
    clock = FakeClock()
    trigger = triggers.make_trigger(
      clock=clock,
      step_interval=10,
      at_step=3,
      at_first_steps=2,
      at_first_steps_of_process=1,
      time_interval=100.0,
    )
    fired = []
    for step in range(5, 31):  # A resumed run: process starts at step 5.
      clock.now += 1.0
      if trigger.check(step):
        fired.append(step)
    # time fires at the first check (5) and not again within 26 s;
    # of_process fires at 5; interval at 10, 20, 30; at_step/first_steps never.
    self.assertEqual(fired, [5, 10, 20, 30])


class ScheduleTest(absltest.TestCase):
  def test_runs_due_actions_in_order_and_returns_results_by_name(self):
    calls = []

    def save(x):
      calls.append(("save", x))
      return "saved"

    def log(x):
      calls.append(("log", x))
      return x * 2

    schedule = (
      triggers.Schedule()
      .schedule(save, step_interval=3)
      .schedule(log, name="logger", at_step=[2, 3])
    )
    self.assertEqual(schedule.names, ["save", "logger"])
    self.assertEqual(schedule.run_at(1, 7), {})
    self.assertEqual(schedule.run_at(2, 7), {"logger": 14})
    self.assertEqual(schedule.run_at(3, 5), {"save": "saved", "logger": 10})
    self.assertEqual(calls, [("log", 7), ("save", 5), ("log", 5)])

  def test_default_names_are_made_unique_explicit_duplicates_fail(self):
    f = lambda: None  # pylint: disable=unnecessary-lambda-assignment
    schedule = triggers.Schedule().schedule(f, at_step=1).schedule(f, at_step=2)
    self.assertEqual(schedule.names, ["<lambda>", "<lambda>_1"])
    with self.assertRaisesRegex(ValueError, "already scheduled"):
      schedule.schedule(f, name="<lambda>", at_step=3)

  def test_time_interval_uses_the_schedule_clock(self):
    clock = FakeClock()
    schedule = triggers.Schedule(clock=clock).schedule(lambda: "t", name="t", time_interval=5.0)
    self.assertEqual(schedule.run_at(1), {"t": "t"})
    clock.now += 4.0
    self.assertEqual(schedule.run_at(2), {})
    clock.now += 1.0
    self.assertEqual(schedule.run_at(3), {"t": "t"})


if __name__ == "__main__":
  absltest.main()
