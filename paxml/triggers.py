"""When periodic work runs: the one trigger mechanism of the project.

The Pax trainer (checkpoint, summary, eval and decode intervals), the
bobbin-style `CronTab` (`paxml.toolkit.cron`, whose triggers read the step of
a train state and ask these) and JAXline's `PeriodicAction`
(`paxml.experiment_api.utils`: steps, seconds, growth ratios, the end step)
decide "should X run now?" with these triggers.

A trigger looks only at an integer step and, for time triggers, at a clock, so
it does not depend on any train-state type. Step numbering: `step` is the
number of updates applied so far, so the check made right after the first
update sees step 1 (a check before any update sees step 0).

Exact firing sets (each is tested in triggers_test.py):
  StepInterval(n):        every step with `step % n == 0`, step 0 included
                          (bobbin's `ForEachNSteps`, JAXline's steps interval).
  AtSteps(steps):         exactly the listed steps.
  AtFirstSteps(n):        steps 0..n, bobbin's `AtFirstNSteps(n)` set (n + 1
                          firings when step 0 is checked too), none for a
                          run resumed past step n.
  AtFirstSteps(n, of_process=True):
                          the first n distinct steps this process checks,
                          i.e. s0..s0+n-1 where s0 is the first step seen;
                          after a restart at step 1000 that is 1001..1000+n.
                          (bobbin's per-process variant fired n-1 times.)
  TimeInterval(secs):     when at least `secs` seconds passed since this
                          trigger last fired (more than `secs` with
                          `inclusive=False`, bobbin's `ForEachTSeconds`);
                          with `fire_at_zero` (default) the first check
                          fires, otherwise the wait starts when the trigger
                          is created.
  GrowthSteps(ratios):    steps `round(r * 10**k)` for r in ratios, k the
                          step's decade (10**k <= step < 10**(k + 1)): JAXline's
                          `periodic_action_growth_ratios` ([1, 2, 5] fires at
                          1, 2, 5, 10, 20, 50, 100, ...; 1.5 at 2, 15, 150; a
                          ratio outside [1, 10), such as JAXline's 10, adds
                          nothing).
  a | b:                  when any operand fires. Every operand is checked
                          on every call (no short-circuit), so stateful
                          triggers (time, first-steps-of-process) see every
                          step and reset only when they themselves fire.

`make_trigger(**kwargs)` builds the OR of the triggers named by bobbin's five
keywords (`step_interval`, `at_step`, `at_first_steps`,
`at_first_steps_of_process`, `time_interval`); `Schedule` is a named list of
(trigger, action) pairs on which `CronTab` builds.
"""

import abc
from collections.abc import Callable, Iterable
import numbers
import time
from typing import Any

Clock = Callable[[], float]


def _monotonic() -> float:
  # Looked up at call time so tests can patch `time.monotonic`.
  return time.monotonic()


class Trigger(abc.ABC):
  """Decides, step by step, whether an action is due."""

  @abc.abstractmethod
  def check(self, step: int) -> bool:
    """Returns whether the action is due at `step` (and updates any state)."""

  def __or__(self, other: "Trigger") -> "Trigger":
    if not isinstance(other, Trigger):
      return NotImplemented
    return OrTrigger(self, other)


class OrTrigger(Trigger):
  """Fires when any of its operands fires; nested ORs are flattened."""

  def __init__(self, *triggers: Trigger):
    self.triggers: tuple[Trigger, ...] = tuple(
      leaf for t in triggers for leaf in (t.triggers if isinstance(t, OrTrigger) else (t,))
    )

  def check(self, step: int) -> bool:
    # A list, not a generator in any(): every operand must see the step.
    return any([t.check(step) for t in self.triggers])

  def __repr__(self) -> str:
    return " | ".join(repr(t) for t in self.triggers)


def _is_int(value: Any) -> bool:
  # numpy integers count: steps often come from arrays.
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _positive_int(value: Any, what: str) -> int:
  if not _is_int(value) or value <= 0:
    raise ValueError(f"{what} must be a positive int, got {value!r}.")
  return int(value)


class StepInterval(Trigger):
  """Fires at every multiple of `interval` (0, n, 2n, ...).

  A negative interval fires at the multiples of its absolute value, as
  bobbin's `step % n == 0` did (bobbin's LibriSpeech example passes
  `dataset_size // batch_size`, which is -2 // 1 when tf.data does not know
  the size).
  """

  def __init__(self, interval: int):
    if not _is_int(interval) or interval == 0:
      raise ValueError(f"step_interval must be a non-zero int, got {interval!r}.")
    self.interval = abs(int(interval))

  def check(self, step: int) -> bool:
    return step % self.interval == 0

  def __repr__(self) -> str:
    return f"StepInterval({self.interval})"


class AtSteps(Trigger):
  """Fires at exactly the given step(s)."""

  def __init__(self, steps: int | Iterable[int]):
    steps = [steps] if _is_int(steps) else list(steps)
    for s in steps:
      if not _is_int(s) or s < 0:
        raise ValueError(f"at_step takes non-negative ints, got {s!r}.")
    self.steps = frozenset(int(s) for s in steps)

  def check(self, step: int) -> bool:
    return step in self.steps

  def __repr__(self) -> str:
    return f"AtSteps({sorted(self.steps)})"


class AtFirstSteps(Trigger):
  """Fires at the first steps of the run or of this process.

  With `of_process=False` the firing set is steps 0..n, as bobbin's (global
  step count, so a resumed run past step n never fires). With
  `of_process=True` it is the first `n` steps this process checks
  (`s0 <= step < s0 + n`, s0 = the first step seen), which is what a warm-up
  log after a restart wants.
  """

  def __init__(self, n: int, *, of_process: bool = False):
    if not _is_int(n) or n < 0:
      raise ValueError(f"at_first_steps must be a non-negative int, got {n!r}.")
    self.n = int(n)
    self.of_process = of_process
    self._first_step: int | None = None

  def check(self, step: int) -> bool:
    if not self.of_process:
      return 0 <= step <= self.n
    if self._first_step is None:
      self._first_step = step
    return self._first_step <= step < self._first_step + self.n

  def __repr__(self) -> str:
    return f"AtFirstSteps({self.n}, of_process={self.of_process})"


class TimeInterval(Trigger):
  """Fires when `seconds` have passed since it last fired."""

  def __init__(
    self,
    seconds: float,
    *,
    fire_at_zero: bool = True,
    clock: Clock | None = None,
    inclusive: bool = True,
  ):
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or seconds <= 0:
      raise ValueError(f"time_interval must be a positive number of seconds, got {seconds!r}.")
    self.seconds = float(seconds)
    self.inclusive = inclusive
    self._clock = clock or _monotonic
    self._last_fired: float | None = None if fire_at_zero else self._clock()

  def check(self, step: int) -> bool:
    del step  # Only the clock matters.
    now = self._clock()
    if self._last_fired is None or self._passed(now - self._last_fired):
      self._last_fired = now
      return True
    return False

  def restart(self, now: float | None = None) -> None:
    """Starts the wait again at `now` (default: the clock), as if it had just fired."""
    self._last_fired = self._clock() if now is None else now

  def _passed(self, elapsed: float) -> bool:
    return elapsed >= self.seconds if self.inclusive else elapsed > self.seconds

  def __repr__(self) -> str:
    return f"TimeInterval({self.seconds}s)"


class GrowthSteps(Trigger):
  """Fires at `round(r * 10**k)`, k the step's decade, for each ratio r (JAXline's ratios)."""

  def __init__(self, ratios: Iterable[float]):
    self.ratios = tuple(ratios)
    if not self.ratios:
      raise ValueError("GrowthSteps needs at least one ratio, e.g. [1, 2, 5].")
    for r in self.ratios:
      if isinstance(r, bool) or not isinstance(r, numbers.Real) or r <= 0:
        raise ValueError(
          f"A growth ratio must be a positive number (fractions of a decade, e.g. [1, 2, 5]); "
          f"got {r!r}."
        )

  def check(self, step: int) -> bool:
    if step <= 0:
      return False
    # The step's decade from its digit count: JAXline's float log10 mis-fired near powers of 10.
    decade = 10 ** (len(str(int(step))) - 1)
    return any(int(round(r * decade)) == step for r in self.ratios)

  def __repr__(self) -> str:
    return f"GrowthSteps({list(self.ratios)})"


# bobbin's `CronTab.schedule` keywords and the triggers they build.
_TRIGGER_KWARGS: dict[str, Callable[..., Trigger]] = {
  "step_interval": StepInterval,
  "at_step": AtSteps,
  "at_first_steps": AtFirstSteps,
  "at_first_steps_of_process": lambda n: AtFirstSteps(n, of_process=True),
  "time_interval": TimeInterval,
}
TRIGGER_KWARGS: tuple[str, ...] = tuple(_TRIGGER_KWARGS)


def make_trigger(
  *, clock: Clock | None = None, inclusive_time: bool = True, **trigger_kwargs: Any
) -> Trigger:
  """Returns the OR of the triggers named by `trigger_kwargs`.

  Args:
    clock: seconds source for `time_interval` (default `time.monotonic`).
    inclusive_time: `TimeInterval.inclusive` for `time_interval`.
    **trigger_kwargs: any of TRIGGER_KWARGS; a value of None is ignored.

  Raises:
    TypeError: for a keyword that is not a trigger.
    ValueError: when no trigger is given.
  """
  unknown = sorted(set(trigger_kwargs) - set(_TRIGGER_KWARGS))
  if unknown:
    raise TypeError(
      f"Unknown trigger keyword(s) {unknown}; valid ones are {list(TRIGGER_KWARGS)} "
      "(several may be combined: the action runs when any of them fires)."
    )
  triggers = []
  for name, value in trigger_kwargs.items():
    if value is None:
      continue
    if name == "time_interval":
      triggers.append(TimeInterval(value, clock=clock, inclusive=inclusive_time))
    else:
      triggers.append(_TRIGGER_KWARGS[name](value))
  if not triggers:
    raise ValueError(
      "No trigger given, so the action would never run; pass at least one of "
      f"{list(TRIGGER_KWARGS)}, e.g. step_interval=1000."
    )
  return triggers[0] if len(triggers) == 1 else OrTrigger(*triggers)


Action = Callable[..., Any]


class Schedule:
  """Named (trigger, action) entries, run in the order they were added."""

  def __init__(self, *, clock: Clock | None = None):
    self._clock = clock
    self._entries: dict[str, tuple[Trigger, Action]] = {}

  def add(self, name: str, trigger: Trigger, action: Action) -> "Schedule":
    """Registers `action` under `name`, run when `trigger` fires."""
    if name in self._entries:
      raise ValueError(f"An action named {name!r} is already scheduled; pass a distinct name=.")
    if not isinstance(trigger, Trigger):
      raise TypeError(f"trigger must be a paxml.triggers.Trigger, got {trigger!r}.")
    self._entries[name] = (trigger, action)
    return self

  def schedule(
    self, action: Action, *, name: str | None = None, **trigger_kwargs: Any
  ) -> "Schedule":
    """Runs `action` when any trigger in `trigger_kwargs` fires; chainable.

    Without `name`, the action's `__name__` (or class name) is used, with a
    `_<k>` suffix if that name is taken.
    """
    trigger = make_trigger(clock=self._clock, **trigger_kwargs)
    if name is None:
      base = getattr(action, "__name__", type(action).__name__)
      name, k = base, 1
      while name in self._entries:
        name, k = f"{base}_{k}", k + 1
    return self.add(name, trigger, action)

  @property
  def names(self) -> list[str]:
    return list(self._entries)

  def due(self, step: int) -> list[tuple[str, Action]]:
    """Checks every trigger at `step`; returns the due (name, action)s."""
    return [
      (name, action) for name, (trigger, action) in self._entries.items() if trigger.check(step)
    ]

  def run_at(self, step: int, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Calls each due action with `*args, **kwargs`; returns results by name."""
    return {name: action(*args, **kwargs) for name, action in self.due(step)}
