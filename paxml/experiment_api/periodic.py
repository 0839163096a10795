"""JAXline's `PeriodicAction` on the project's triggers, and `make_async`.

`PeriodicAction(fn, interval_type, interval, ...)` is called after every step
as `action(t, global_step, scalars)` and calls `fn(t, global_step, scalars)`
when due:
  interval_type "steps": `global_step % interval == 0` (paxml.triggers
    StepInterval), plus the growth-ratio steps (GrowthSteps);
  interval_type "secs": `interval` seconds of the passed-in `t` since it last
    fired (TimeInterval on the caller's clock; not at the first step);
  always at `end_step_to_action` (so the last step is written).
The scalars passed on carry `steps_per_sec` since the previous firing. With
`log_all_data`, the scalars of every step in between are replayed in order.
"""

from collections.abc import Callable
import concurrent.futures
import threading
from typing import Any

from absl import logging

from paxml import triggers


class _AsyncCaller:
  """Runs calls one at a time, in order, in a background thread.

  A failure is re-raised by the next call (and by `wait`); after a failure
  every later call is skipped, as in JAXline.
  """

  def __init__(self, fn: Callable[..., Any]):
    self._fn = fn
    self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="periodic")
    self._last: concurrent.futures.Future | None = None
    self._error: BaseException | None = None
    self._lock = threading.Lock()

  def _check(self) -> None:
    with self._lock:
      if self._last is not None and self._last.done() and self._last.exception():
        self._error = self._last.exception()
      if self._error is not None:
        raise self._error

  def __call__(self, *args) -> None:
    self._check()
    self._last = self._pool.submit(self._fn, *args)

  def wait(self) -> None:
    if self._last is not None:
      concurrent.futures.wait([self._last])
    self._check()
    self._pool.shutdown(wait=True)


def make_async(fn: Callable[..., Any]) -> _AsyncCaller:
  return _AsyncCaller(fn)


class PeriodicAction:
  """Calls `fn(t, step, scalars)` when due; see the module docstring."""

  def __init__(self, fn: Callable[[float, int, dict], Any], interval_type: str,
               interval: float | None, *, start_time: float = 0.0, start_step: int = 0,
               run_async: bool = False, log_all_data: bool = False,
               logging_growth_ratios: list[int] | None = None,
               end_step_to_action: int | None = None):
    if interval_type not in ("secs", "steps"):
      raise ValueError(f"interval_type={interval_type!r}; use 'secs' or 'steps'.")
    self._fn = make_async(fn) if run_async else fn
    self._now = start_time
    self._trigger: triggers.Trigger | None = None
    if interval is not None and interval > 0:
      if interval_type == "steps":
        self._trigger = triggers.StepInterval(int(interval))
      else:
        self._trigger = triggers.TimeInterval(float(interval), fire_at_zero=False,
                                              clock=lambda: self._now)
    if logging_growth_ratios:
      growth = triggers.GrowthSteps(logging_growth_ratios)
      self._trigger = growth if self._trigger is None else self._trigger | growth
    self._end_step = end_step_to_action
    self._log_all_data = log_all_data
    self._buffer: list[tuple[float, int, dict]] = []
    self._prev = (start_time, start_step)

  def __call__(self, t: float, step: int, scalars: dict) -> bool:
    """Records the step; runs `fn` when due. Returns whether it ran."""
    self._now = t
    if self._log_all_data:
      self._buffer.append((t, step, dict(scalars)))
    due = self._trigger is not None and self._trigger.check(step)
    if not (due or step == self._end_step):
      return False
    prev_t, prev_step = self._prev
    steps_per_sec = (step - prev_step) / (t - prev_t) if t > prev_t else 0.0
    self._prev = (t, step)
    records = self._buffer if self._log_all_data else [(t, step, dict(scalars))]
    self._buffer = []
    for rt, rstep, rscalars in records:
      self._fn(rt, rstep, {**rscalars, "steps_per_sec": steps_per_sec})
    return True

  def wait_to_finish(self) -> None:
    if isinstance(self._fn, _AsyncCaller):
      self._fn.wait()


def log_scalars(t: float, step: int, scalars: dict) -> None:
  del t
  logging.info("global_step: %d, %s", step, scalars)
