"""Periodic actions in your own train loop (bobbin's `cron`).

  crontab = cron.CronTab()
  crontab.schedule(task.make_checkpoint_saver(path), step_interval=1000)
  crontab.schedule(task.make_log_writer(), time_interval=10.0,
                   at_first_steps_of_process=5)
  for batch in batches:
    train_state, step_info = step_fn(train_state, batch, rng)
    crontab.run(train_state, step_info=step_info)   # {name: result}

A trigger's `check(train_state)` reads `train_state.step` (the number of
updates applied). Firing sets:
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
"""

import abc
from collections.abc import Callable, Iterable
import functools
import time
from typing import Any

import flax.jax_utils
import numpy as np

Action = Callable[..., Any]


def _step(train_state: Any) -> int:
  return int(np.asarray(train_state.step))


class Trigger(abc.ABC):
  """Decides from the train state whether an action is due."""

  def __or__(self, other: "Trigger") -> "OrTrigger":
    return OrTrigger(self, other)

  @abc.abstractmethod
  def check(self, train_state: Any) -> bool:
    """Returns whether the action is due for `train_state` (may update state)."""


class OrTrigger(Trigger):
  """Fires when any operand fires; chained ORs stay one flat list."""

  def __init__(self, *triggers: Trigger):
    flat = []
    for t in triggers:
      flat.extend(t._triggers if isinstance(t, OrTrigger) else (t,))
    self._triggers = tuple(flat)

  def check(self, train_state: Any) -> bool:
    # A list, not any(generator): every operand must see every step.
    return any([t.check(train_state) for t in self._triggers])


class ForEachNSteps(Trigger):
  """Fires when the step is a multiple of `n`."""

  def __init__(self, n: int):
    self._n = n

  def check(self, train_state: Any) -> bool:
    return _step(train_state) % self._n == 0


class ForEachTSeconds(Trigger):
  """Fires when more than `secs` seconds passed since it last fired."""

  def __init__(self, secs: float, fire_at_zero: bool = True):
    self._secs = secs
    # time.time is looked up at call time so tests can patch it.
    self._last_fired = -float("inf") if fire_at_zero else time.time()

  def check(self, train_state: Any) -> bool:
    del train_state
    now = time.time()
    if now - self._last_fired > self._secs:
      self._last_fired = now
      return True
    return False


class AtFirstNSteps(Trigger):
  """Fires at steps 0..n, or at the first n steps of this process."""

  def __init__(self, n: int, of_process: bool = False):
    self._n = n
    self._of_process = of_process
    self._first_step = None

  def check(self, train_state: Any) -> bool:
    step = _step(train_state)
    if not self._of_process:
      return step <= self._n
    if self._first_step is None:
      self._first_step = step
    return step - self._first_step < self._n


class AtNthStep(Trigger):
  """Fires at the given step or steps."""

  def __init__(self, ns: int | Iterable[int]):
    self._ns = {ns} if isinstance(ns, int) else set(ns)

  def check(self, train_state: Any) -> bool:
    return _step(train_state) in self._ns


_TRIGGERS_BY_KWARG: dict[str, Callable[[Any], Trigger]] = {
  "step_interval": ForEachNSteps,
  "at_step": AtNthStep,
  "at_first_steps": functools.partial(AtFirstNSteps, of_process=False),
  "at_first_steps_of_process": functools.partial(AtFirstNSteps, of_process=True),
  "time_interval": ForEachTSeconds,
}


def make_trigger(**kwargs: Any) -> Trigger:
  """Returns the OR of the triggers named by `CronTab.schedule`'s keywords."""
  triggers = []
  for name, value in kwargs.items():
    if name not in _TRIGGERS_BY_KWARG:
      raise TypeError(
        f"`CronTab.schedule` got an unexpected keyword argument '{name}'; use "
        f"{', '.join(_TRIGGERS_BY_KWARG)}."
      )
    triggers.append(_TRIGGERS_BY_KWARG[name](value))
  if not triggers:
    raise ValueError(
      "None of timing arguments is specified in `CronTab.schedule`. Specify at "
      f"least one of: {', '.join(_TRIGGERS_BY_KWARG)}."
    )
  return triggers[0] if len(triggers) == 1 else OrTrigger(*triggers)


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
      train_state = flax.jax_utils.unreplicate(train_state)
    return {
      name: action(train_state, *args, **kwargs)
      for name, trigger, action in self._actions
      if trigger.check(train_state)
    }
