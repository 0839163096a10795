"""Periodic actions in your own train loop (bobbin's `cron`).

  crontab = cron.CronTab()
  crontab.schedule(task.make_checkpoint_saver(path), step_interval=1000)
  crontab.schedule(task.make_log_writer(), time_interval=10.0,
                   at_first_steps_of_process=5)
  for batch in batches:
    train_state, step_info = step_fn(train_state, batch, rng)
    crontab.run(train_state, step_info=step_info)   # {name: result}

A trigger's `check(train_state)` reads `train_state.step` (the number of
updates applied) and asks the project's one trigger mechanism,
`paxml.triggers`, which the Pax trainer's intervals use too. Firing sets:
  ForEachNSteps(n):   step % n == 0 (step 0 included).
  AtNthStep(ns):      the listed step(s).
  AtFirstNSteps(n):   steps 0..n, as bobbin (n + 1 firings from scratch).
  AtFirstNSteps(n, of_process=True): the first n steps this process checks,
                      s0..s0+n-1 (bobbin fired only n - 1 times; see
                      docs/toolkit.md).
  ForEachTSeconds(t): when more than t seconds (time.time) passed since the
                      last firing; the first check fires unless
                      fire_at_zero=False.
  a | b:              either fires; every operand is checked every time, so
                      stateful triggers see every step.
Your own trigger: subclass `Trigger` and implement `check(train_state)`.
"""

import abc
from collections.abc import Callable, Iterable
import time
from typing import Any

import numpy as np

from paxml import triggers
from paxml.toolkit import pmap_util

Action = Callable[..., Any]


def _step(train_state: Any) -> int:
  return int(np.asarray(train_state.step))


def _wall_clock() -> float:
  # bobbin's clock; looked up at call time so tests can patch `time.time`.
  return time.time()


class Trigger(abc.ABC):
  """Decides from the train state whether an action is due."""

  def __or__(self, other: "Trigger") -> "OrTrigger":
    return OrTrigger(self, other)

  @abc.abstractmethod
  def check(self, train_state: Any) -> bool:
    """Returns whether the action is due for `train_state` (may update state)."""


class OrTrigger(Trigger):
  """Fires when any operand fires; chained ORs stay one flat list."""

  def __init__(self, *operands: Trigger):
    flat = []
    for t in operands:
      flat.extend(t._triggers if isinstance(t, OrTrigger) else (t,))
    self._triggers = tuple(flat)

  def check(self, train_state: Any) -> bool:
    # A list, not any(generator): every operand must see every step.
    return any([t.check(train_state) for t in self._triggers])


class StepTrigger(Trigger):
  """A `paxml.triggers` trigger asked with the train state's step."""

  def __init__(self, step_trigger: triggers.Trigger):
    self.step_trigger = step_trigger

  def check(self, train_state: Any) -> bool:
    return self.step_trigger.check(_step(train_state))

  def __repr__(self) -> str:
    return f"{type(self).__name__}({self.step_trigger!r})"


class ForEachNSteps(StepTrigger):
  """Fires when the step is a multiple of `n`."""

  def __init__(self, n: int):
    super().__init__(triggers.StepInterval(n))


class ForEachTSeconds(StepTrigger):
  """Fires when more than `secs` seconds passed since it last fired."""

  def __init__(self, secs: float, fire_at_zero: bool = True):
    super().__init__(
      triggers.TimeInterval(secs, fire_at_zero=fire_at_zero, clock=_wall_clock, inclusive=False)
    )


class AtFirstNSteps(StepTrigger):
  """Fires at steps 0..n, or at the first n steps of this process."""

  def __init__(self, n: int, of_process: bool = False):
    super().__init__(triggers.AtFirstSteps(n, of_process=of_process))


class AtNthStep(StepTrigger):
  """Fires at the given step or steps."""

  def __init__(self, ns: int | Iterable[int]):
    super().__init__(triggers.AtSteps(ns))


def make_trigger(**kwargs: Any) -> Trigger:
  """The OR of the triggers named by `CronTab.schedule`'s keywords.

  Keywords: step_interval, at_step, at_first_steps,
  at_first_steps_of_process, time_interval (see `paxml.triggers.make_trigger`).
  """
  return StepTrigger(triggers.make_trigger(clock=_wall_clock, inclusive_time=False, **kwargs))


class CronTab:
  """An ordered table of (name, trigger, action)."""

  def __init__(self):
    self._actions: list[tuple[str, Trigger, Action]] = []

  def schedule(self, action: Action, *, name: str | None = None, **kwargs: Any) -> "CronTab":
    """Runs `action` when any trigger named by `kwargs` fires; returns self.

    Keywords: step_interval=N, at_step=N or (N1, N2, ...), at_first_steps=N,
    at_first_steps_of_process=N, time_interval=seconds. The name defaults to
    `repr(action)`.
    """
    return self.add(repr(action) if name is None else name, make_trigger(**kwargs), action)

  def add(self, name: str, trigger: Trigger, action: Action) -> "CronTab":
    """Adds one (name, trigger, action) entry; returns self."""
    self._actions.append((name, trigger, action))
    return self

  def run(
    self, train_state: Any, is_train_state_replicated: bool = True, *args: Any, **kwargs: Any
  ) -> dict[str, Any]:
    """Calls `action(train_state, *args, **kwargs)` for each due action.

    Args:
      train_state: the current state.
      is_train_state_replicated: True (bobbin's default) takes device 0's copy
        of a pmap-replicated state first; a state without a device axis is
        passed as is, so the default is safe for jit loops too.
      *args: extra positional arguments for every action.
      **kwargs: extra keyword arguments for every action (e.g. step_info=).

    Returns:
      {name: result} of the actions that ran.
    """
    if is_train_state_replicated and np.ndim(train_state.step) >= 1:
      train_state = pmap_util.unreplicate(train_state)
    return {
      name: action(train_state, *args, **kwargs)
      for name, trigger, action in self._actions
      if trigger.check(train_state)
    }
