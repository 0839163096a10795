"""`CronTab`: run actions (save, log, eval) when their triggers fire.

A thin layer over `paxml.triggers.Schedule` (the project's one trigger
mechanism, whose docstring lists the exact firing sets). What it adds is
bobbin's calling convention:

  crontab = CronTab()
  crontab.schedule(saver, step_interval=1000, at_step=warmup)
  crontab.schedule(log_writer, time_interval=10.0, at_first_steps_of_process=5)
  for batch in batches:
    train_state, step_info = train_step_fn(train_state, batch, rng)
    results = crontab.run(train_state, step_info=step_info)   # {name: result}

`run` un-replicates a pmap-replicated state (leading device axis) before
reading `train_state.step`, so actions always see one copy.
"""

from typing import Any

import numpy as np

from paxml import triggers
from paxml.toolkit import pmap_utils

# bobbin's trigger names, re-exported so users of `bobbin.cron` find them.
Trigger = triggers.Trigger
ForEachNSteps = triggers.StepInterval
AtNthStep = triggers.AtSteps
AtFirstNSteps = triggers.AtFirstSteps
ForEachTSeconds = triggers.TimeInterval


def is_replicated(train_state: Any) -> bool:
  """Whether `train_state.step` has a leading device axis (pmap layout)."""
  return np.ndim(train_state.step) >= 1


class CronTab(triggers.Schedule):
  """Named actions with triggers; `schedule(...)` chains, `run(...)` fires."""

  def run(self, train_state: Any, *args: Any, is_train_state_replicated: bool | None = None,
          **kwargs: Any) -> dict[str, Any]:
    """Calls `action(train_state, *args, **kwargs)` for every due action.

    Args:
      train_state: the current state; replicated (pmap) or not.
      *args: passed to every action after the state.
      is_train_state_replicated: None detects it from `train_state.step`.
      **kwargs: passed to every action (e.g. `step_info=...`).

    Returns:
      {name: action result} for the actions that ran, in scheduling order.
    """
    if is_train_state_replicated is None:
      is_train_state_replicated = is_replicated(train_state)
    if is_train_state_replicated:
      train_state = pmap_utils.unreplicate(train_state)
    step = int(np.asarray(train_state.step))
    return {name: action(train_state, *args, **kwargs)
            for name, action in self.due(step)}
