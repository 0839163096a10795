"""Learning-rate schedules: Pax's set as typed configs, built on optax's schedules.

A schedule gives a *multiplier* of the optimizer's base learning rate at a step, as in Pax
(`lr(step) = learning_rate * schedule(step)`). Each class is a small dataclass with its
hyperparameters as fields; configure it like a layer and call it like an optax schedule:

    cfg = schedules.LinearRampupExponentialDecay.HParams.config(
        warmup_steps=4000, decay_start=4001, decay_end=300000, min_ratio=0.1, max=1.0)
    schedule = cfg.Instantiate()      # also: schedule.make() -> optax.Schedule
    schedule(0), schedule(2000), schedule(300000)   # 0.0, 0.5, 0.1

Steps are absolute (the trainer's step counter), not relative to the end of warm-up. The
optimizer evaluates `schedule(count)` where `count` is the number of updates already applied, so
the first update uses `schedule(0)`: with a warm-up from 0 that first update does nothing, exactly
as in Pax.

The classes (names and fields follow Pax's praxis/schedules.py):
  Constant(value)                             value.
  Linear(start=(x0, y0), limit=(x1, y1))      y0 before x0, linear to y1 at x1, then y1.
  PiecewiseLinear(boundaries, values)         linear between the points (boundaries[i], values[i]),
                                              flat outside them.
  Exponential(start=(x0, y0), limit=(x1, y1)) y0 before x0, geometric to y1 at x1, then y1.
  Cosine(initial_value, final_value, total_steps)  half a cosine, then final_value.
  PiecewiseConstant(boundaries, values)       values[i] on [boundaries[i-1], boundaries[i]): a step
                                              equal to a boundary already has the next value.
    Each of the five above also has `warmup_steps` (default 0): the first `warmup_steps` steps
    ramp linearly from 0 to the value the schedule has at `warmup_steps`.
  LinearRampupExponentialDecay(warmup_steps, decay_start, decay_end, min_ratio, max)
                                              0 -> max linearly until warmup_steps, max until
                                              decay_start, exponential to max * min_ratio at
                                              decay_end, then constant. (lm_cloud: 4000, 4001,
                                              300000, 0.1, 1.0.)
  LinearRampupCosineDecay(same fields)        the same with a cosine decay.
  Rsqrt(peak, warmup_steps)                   Pax's LinearRampupSqrtDecay: peak * min(step / w,
                                              sqrt(w / step)), step >= 1.
  Transformer(warmup_steps, model_dim, ...)   the "Attention is all you need" (Noam) schedule.
  PiecewiseSchedule(boundaries, schedules)    sub-schedules in turn, each fed the steps since its
                                              boundary (optax.join_schedules).
  Polynomial(power, start, limit, origin), DelayedCosine(start, limit),
  LinearRampupPolynomialDecay(... power), SqrtDecay(decay_start, multiplier, offset),
  LinearRampupPiecewiseConstant(boundaries, values), CycleSchedule(schedules, steps),
  ContinuousSchedule(initial_value, start_step, half_life_steps, min): Pax's, same formulas.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import optax

from praxis import base_hyperparams

Schedule = optax.Schedule


@dataclasses.dataclass(kw_only=True)
class BaseSchedule(base_hyperparams.HParamsMixin, abc.ABC):
  """A learning-rate multiplier as a function of the step; call it or `make()` it."""

  @abc.abstractmethod
  def make(self) -> Schedule:
    """The optax schedule `step -> multiplier` (a float32 scalar)."""

  def __call__(self, step: jax.typing.ArrayLike) -> jax.Array:
    return jnp.asarray(self.make()(step), jnp.float32)

  # Pax's method name.
  def value_at(self, step: jax.typing.ArrayLike) -> jax.Array:
    return self(step)


def _with_warmup(schedule: Schedule, warmup_steps: int) -> Schedule:
  """Steps below `warmup_steps` ramp linearly from 0 to `schedule(warmup_steps)`."""
  if warmup_steps < 0:
    raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}.")
  if warmup_steps == 0:
    return schedule
  ramp = optax.linear_schedule(0.0, schedule(warmup_steps), warmup_steps)
  # join_schedules passes the steps since the boundary; shift back to absolute steps.
  return optax.join_schedules([ramp, lambda s: schedule(s + warmup_steps)], [warmup_steps])


def _check_points(name: str, start: Sequence[float], limit: Sequence[float]) -> None:
  if len(start) != 2 or len(limit) != 2:
    raise ValueError(f"{name}: start and limit are (step, value) pairs; got {start}, {limit}.")
  if not start[0] < limit[0]:
    raise ValueError(f"{name}: start step {start[0]} must be before limit step {limit[0]}.")


@dataclasses.dataclass(kw_only=True)
class Constant(BaseSchedule):
  """Always `value`.

  Attributes:
    value: the multiplier.
    warmup_steps: linear ramp from 0 over this many first steps.
  """

  value: float = 1.0
  warmup_steps: int = 0

  def make(self) -> Schedule:
    return _with_warmup(optax.constant_schedule(self.value), self.warmup_steps)


@dataclasses.dataclass(kw_only=True)
class Linear(BaseSchedule):
  """`y0` until step `x0`, linear to `y1` at step `x1`, then `y1`.

  Attributes:
    start: (x0, y0).
    limit: (x1, y1), x1 > x0.
    warmup_steps: linear ramp from 0 over this many first steps.
  """

  start: tuple[int, float] = (0, 1.0)
  limit: tuple[int, float] = (1, 1.0)
  warmup_steps: int = 0

  def make(self) -> Schedule:
    _check_points("Linear", self.start, self.limit)
    (x0, y0), (x1, y1) = self.start, self.limit
    return _with_warmup(
      optax.linear_schedule(y0, y1, x1 - x0, transition_begin=x0), self.warmup_steps
    )


@dataclasses.dataclass(kw_only=True)
class PiecewiseLinear(BaseSchedule):
  """Linear interpolation through the points (boundaries[i], values[i]); flat outside them.

  Attributes:
    boundaries: increasing steps.
    values: the multiplier at each boundary (same length).
    warmup_steps: linear ramp from 0 over this many first steps.
  """

  boundaries: Sequence[int] = (0,)
  values: Sequence[float] = (1.0,)
  warmup_steps: int = 0

  def make(self) -> Schedule:
    if len(self.boundaries) != len(self.values) or not self.boundaries:
      raise ValueError(
        f"PiecewiseLinear: {len(self.boundaries)} boundaries and "
        f"{len(self.values)} values; give one value per boundary (at least one)."
      )
    if any(b1 <= b0 for b0, b1 in zip(self.boundaries, self.boundaries[1:])):
      raise ValueError(f"PiecewiseLinear: boundaries {self.boundaries} must be increasing.")
    if len(self.boundaries) == 1:
      return _with_warmup(optax.constant_schedule(self.values[0]), self.warmup_steps)
    # One optax linear piece per segment; join_schedules switches at the inner points.
    pieces = [
      optax.linear_schedule(
        self.values[0],
        self.values[1],
        self.boundaries[1] - self.boundaries[0],
        transition_begin=self.boundaries[0],
      )
    ]
    for i in range(1, len(self.boundaries) - 1):
      pieces.append(
        optax.linear_schedule(
          self.values[i], self.values[i + 1], self.boundaries[i + 1] - self.boundaries[i]
        )
      )
    return _with_warmup(
      optax.join_schedules(pieces, list(self.boundaries[1:-1])), self.warmup_steps
    )


@dataclasses.dataclass(kw_only=True)
class Exponential(BaseSchedule):
  """`y0` until step `x0`, geometric (log-linear) to `y1` at step `x1`, then `y1`.

  Attributes:
    start: (x0, y0), y0 > 0.
    limit: (x1, y1), x1 > x0, y1 > 0.
    warmup_steps: linear ramp from 0 over this many first steps.
  """

  start: tuple[int, float] = (0, 1.0)
  limit: tuple[int, float] = (1, 0.5)
  warmup_steps: int = 0

  def make(self) -> Schedule:
    _check_points("Exponential", self.start, self.limit)
    (x0, y0), (x1, y1) = self.start, self.limit
    if y0 <= 0 or y1 <= 0:
      raise ValueError(f"Exponential: values must be > 0 (a geometric path); got {y0}, {y1}.")
    decay = optax.exponential_decay(y0, x1 - x0, y1 / y0, transition_begin=x0, end_value=y1)
    return _with_warmup(decay, self.warmup_steps)


@dataclasses.dataclass(kw_only=True)
class Cosine(BaseSchedule):
  """`final + (initial - final) * (1 + cos(pi * min(step / total_steps, 1))) / 2`.

  Attributes:
    initial_value: the value at step 0.
    final_value: the value from `total_steps` on.
    total_steps: length of the decay (> 0).
    warmup_steps: linear ramp from 0 over this many first steps.
  """

  initial_value: float = 1.0
  final_value: float = 0.0
  total_steps: int = 1
  warmup_steps: int = 0

  def make(self) -> Schedule:
    if self.total_steps <= 0:
      raise ValueError(f"Cosine: total_steps must be > 0, got {self.total_steps}.")
    # optax's cosine decays to alpha * init; decaying the gap to 0 and adding the final value
    # also covers initial_value == 0 and increasing "decays".
    gap = optax.cosine_decay_schedule(self.initial_value - self.final_value, self.total_steps)
    final = self.final_value
    return _with_warmup(lambda step: final + gap(step), self.warmup_steps)


@dataclasses.dataclass(kw_only=True)
class PiecewiseConstant(BaseSchedule):
  """`values[0]` before `boundaries[0]`, `values[i]` on [boundaries[i-1], boundaries[i]).

  Attributes:
    boundaries: increasing steps where the value changes.
    values: len(boundaries) + 1 multipliers.
    warmup_steps: linear ramp from 0 over this many first steps.
  """

  boundaries: Sequence[int] = ()
  values: Sequence[float] = (1.0,)
  warmup_steps: int = 0

  def make(self) -> Schedule:
    if len(self.values) != len(self.boundaries) + 1:
      raise ValueError(
        f"PiecewiseConstant: {len(self.values)} values for "
        f"{len(self.boundaries)} boundaries; give len(boundaries) + 1 values."
      )
    if list(self.boundaries) != sorted(self.boundaries):
      raise ValueError(f"PiecewiseConstant: boundaries {self.boundaries} must be sorted.")
    pieces = [optax.constant_schedule(v) for v in self.values]
    return _with_warmup(optax.join_schedules(pieces, list(self.boundaries)), self.warmup_steps)


@dataclasses.dataclass(kw_only=True)
class _LinearRampupDecay(BaseSchedule):
  """Warm-up 0 -> max until `warmup_steps`, hold max until `decay_start`, decay to
  `max * min_ratio` at `decay_end`, then hold. Subclasses choose the decay's shape.

  Attributes:
    warmup_steps: steps of the linear ramp from 0 (0: start at max).
    decay_start: first step of the decay (>= warmup_steps).
    decay_end: step where the decay reaches max * min_ratio (> decay_start).
    min_ratio: the final multiplier relative to max.
    max: the peak multiplier (> 0).
  """

  warmup_steps: int = 0
  decay_start: int = 0
  decay_end: int = 1
  min_ratio: float = 0.01
  max: float = 1.0

  @abc.abstractmethod
  def _decay(self, steps: int) -> Schedule:
    """From max at 0 to max * min_ratio at `steps`, constant after."""

  def make(self) -> Schedule:
    name = type(self).__name__
    if not 0 <= self.warmup_steps <= self.decay_start < self.decay_end:
      raise ValueError(
        f"{name}: need 0 <= warmup_steps <= decay_start < decay_end; got warmup_steps="
        f"{self.warmup_steps}, decay_start={self.decay_start}, decay_end={self.decay_end}."
      )
    if self.max <= 0:
      raise ValueError(f"{name}: max must be > 0 (the peak multiplier), got {self.max}.")
    # Pax's LinearRampupCosineDecay.start_step: 1.0 until then, every step below counted from it.
    start = getattr(self, "start_step", 0)
    pieces, boundaries = [], []
    if start > 0:
      pieces.append(optax.constant_schedule(1.0))
      boundaries.append(start)
    if self.warmup_steps > 0:
      pieces.append(optax.linear_schedule(0.0, self.max, self.warmup_steps))
      boundaries.append(start + self.warmup_steps)
    if self.decay_start > self.warmup_steps:
      pieces.append(optax.constant_schedule(self.max))
      boundaries.append(start + self.decay_start)
    pieces.append(self._decay(self.decay_end - self.decay_start))
    return optax.join_schedules(pieces, boundaries)


@dataclasses.dataclass(kw_only=True)
class LinearRampupExponentialDecay(_LinearRampupDecay):
  __doc__ = _LinearRampupDecay.__doc__.replace("decay to", "decay exponentially to")

  def _decay(self, steps: int) -> Schedule:
    return optax.exponential_decay(
      self.max, steps, self.min_ratio, end_value=self.max * self.min_ratio
    )


@dataclasses.dataclass(kw_only=True)
class LinearRampupCosineDecay(_LinearRampupDecay):
  __doc__ = _LinearRampupDecay.__doc__.replace("decay to", "decay along half a cosine to") + (
    "  start_step (Pax's): the multiplier is 1.0 before it; the steps above count from it.\n"
  )

  start_step: int = 0

  def _decay(self, steps: int) -> Schedule:
    return optax.cosine_decay_schedule(self.max, steps, alpha=self.min_ratio)


@dataclasses.dataclass(kw_only=True)
class Rsqrt(BaseSchedule):
  """Linear warm-up to `peak` at `warmup_steps`, then `peak * sqrt(warmup_steps / step)`.

  Pax's LinearRampupSqrtDecay: `peak * min(step / w, sqrt(w / step))` with step >= 1 (so step 0
  gives the same value as step 1, never 0). optax has no inverse-square-root schedule.

  Attributes:
    peak: the multiplier at `warmup_steps`.
    warmup_steps: length of the linear warm-up (> 0).
  """

  peak: float = 1.0
  warmup_steps: int = 4000

  def make(self) -> Schedule:
    if self.warmup_steps <= 0:
      raise ValueError(f"Rsqrt: warmup_steps must be > 0, got {self.warmup_steps}.")
    peak, warmup = self.peak, float(self.warmup_steps)

    def schedule(step):
      step = jnp.maximum(jnp.asarray(step, jnp.float32), 1.0)
      return peak * jnp.minimum(step / warmup, jnp.sqrt(warmup / step))

    return schedule


LinearRampupSqrtDecay = Rsqrt  # Pax's name.


@dataclasses.dataclass(kw_only=True)
class Transformer(BaseSchedule):
  """`model_dim**-0.5 * min((step + 1) * w**-1.5, (step + 1)**-0.5)`, w = warmup_steps x replicas.

  Attributes:
    warmup_steps: steps of the linear increase.
    model_dim: the model width that scales the peak.
    worker_replicas: multiplies warmup_steps (Pax's field).
    decay_end: if set, the value is frozen from this step on.
  """

  warmup_steps: int = 4000
  model_dim: int = 512
  worker_replicas: int = 1
  decay_end: int | None = None

  def make(self) -> Schedule:
    warmup = float(self.warmup_steps * self.worker_replicas)
    scale = 1.0 / math.sqrt(self.model_dim)
    decay_end = self.decay_end

    def schedule(step):
      step = jnp.asarray(step, jnp.float32)
      if decay_end is not None:
        step = jnp.minimum(step, decay_end)
      return scale * jnp.minimum((step + 1) * warmup**-1.5, (step + 1) ** -0.5)

    return schedule


@dataclasses.dataclass(kw_only=True)
class PiecewiseSchedule(BaseSchedule):
  """`schedules[i]` on [boundaries[i-1], boundaries[i]), fed the steps since boundaries[i-1].

  Attributes:
    boundaries: increasing steps.
    schedules: len(boundaries) + 1 schedules (configs of the classes above).
  """

  boundaries: Sequence[int] = ()
  schedules: Sequence[BaseSchedule] = ()

  def make(self) -> Schedule:
    if len(self.schedules) != len(self.boundaries) + 1:
      raise ValueError(
        f"PiecewiseSchedule: {len(self.schedules)} schedules for "
        f"{len(self.boundaries)} boundaries; give len(boundaries) + 1."
      )
    if list(self.boundaries) != sorted(self.boundaries):
      raise ValueError(f"PiecewiseSchedule: boundaries {self.boundaries} must be sorted.")
    return optax.join_schedules([s.make() for s in self.schedules], list(self.boundaries))


@dataclasses.dataclass(kw_only=True)
class Polynomial(BaseSchedule):
  """`y0` before `x0`, `y1` from `x1`, between them `y0 + f(r) (y1 - y0)` with r the fraction of
  the way: f(r) = r**power (origin 'start') or 1 - (1 - r)**power (origin 'limit').

  Attributes:
    power: the polynomial's power.
    start: (x0, y0).
    limit: (x1, y1), x1 > x0.
    origin: 'start' or 'limit'.
  """

  power: int = 1
  start: tuple[int, float] = (0, 1.0)
  limit: tuple[int, float] = (1, 1.0)
  origin: str = "start"

  def make(self) -> Schedule:
    _check_points("Polynomial", self.start, self.limit)
    if self.origin not in ("start", "limit"):
      raise ValueError(f"Polynomial: origin must be 'start' or 'limit', got {self.origin!r}.")
    (x0, y0), (x1, y1) = self.start, self.limit
    power, from_start = self.power, self.origin == "start"

    def schedule(step):
      x = jnp.asarray(step, jnp.float32)
      r = jnp.clip((x - x0) / (x1 - x0), 0.0, 1.0)
      f = r**power if from_start else 1 - (1 - r) ** power
      return jnp.where(x < x0, y0, jnp.where(x >= x1, y1, y0 + f * (y1 - y0)))

    return schedule


@dataclasses.dataclass(kw_only=True)
class DelayedCosine(BaseSchedule):
  """`y0` before `x0`, half a cosine from `y0` to `y1` between `x0` and `x1`, then `y1`.

  Attributes:
    start: (x0, y0), y0 > 0.
    limit: (x1, y1), x1 > x0, y1 >= 0.
  """

  start: tuple[int, float] = (0, 1.0)
  limit: tuple[int, float] = (1, 0.5)

  def make(self) -> Schedule:
    _check_points("DelayedCosine", self.start, self.limit)
    (x0, y0), (x1, y1) = self.start, self.limit
    if y0 <= 0 or y1 < 0:
      raise ValueError(f"DelayedCosine: need y0 > 0 and y1 >= 0, got {y0}, {y1}.")

    def schedule(step):
      phase = jnp.clip((jnp.asarray(step, jnp.float32) - x0) / (x1 - x0), 0.0, 1.0) * math.pi
      return y1 + 0.5 * (y0 - y1) * (1 + jnp.cos(phase))

    return schedule


@dataclasses.dataclass(kw_only=True)
class LinearRampupPolynomialDecay(_LinearRampupDecay):
  __doc__ = _LinearRampupDecay.__doc__.replace("decay to", "decay polynomially (power) to")

  power: int = 1

  def _decay(self, steps: int) -> Schedule:
    return optax.polynomial_schedule(self.max, self.max * self.min_ratio, self.power, steps)


@dataclasses.dataclass(kw_only=True)
class SqrtDecay(BaseSchedule):
  """`multiplier / sqrt(max(step - offset, decay_start))`: constant, then inverse square root.

  Attributes:
    decay_start: the decay starts after this many steps.
    multiplier: the scale.
    offset: subtracted from the step.
  """

  decay_start: int = 10000
  multiplier: float = 1.0
  offset: float = 0.0

  def make(self) -> Schedule:
    start, multiplier, offset = float(self.decay_start), self.multiplier, self.offset
    return lambda step: (
      multiplier * jax.lax.rsqrt(jnp.maximum(jnp.asarray(step, jnp.float32) - offset, start))
    )


@dataclasses.dataclass(kw_only=True)
class LinearRampupPiecewiseConstant(BaseSchedule):
  """Linear from 0 to values[0] at boundaries[0], then values[i] on [boundaries[i],
  boundaries[i + 1]), values[-1] after the last boundary.

  Attributes:
    boundaries: increasing steps (at least one).
    values: one value per boundary.
  """

  boundaries: Sequence[int] = (1,)
  values: Sequence[float] = (1.0,)

  def make(self) -> Schedule:
    if not self.boundaries or len(self.boundaries) != len(self.values):
      raise ValueError(
        f"LinearRampupPiecewiseConstant: {len(self.boundaries)} boundaries and "
        f"{len(self.values)} values; give one value per boundary (at least one)."
      )
    first = self.boundaries[0]
    ramp = optax.linear_schedule(0.0, self.values[0], first)
    rest = optax.join_schedules(
      [optax.constant_schedule(v) for v in self.values], [b - first for b in self.boundaries[1:]]
    )
    return optax.join_schedules([ramp, rest], [first])


@dataclasses.dataclass(kw_only=True)
class CycleSchedule(BaseSchedule):
  """`schedules[i]` for `steps[i]` steps, in turn, over and over; each sees the absolute step.

  Attributes:
    schedules: the sub-schedules (configs of the classes above).
    steps: how long each runs.
  """

  schedules: Sequence[BaseSchedule] = ()
  steps: Sequence[int] = ()

  def make(self) -> Schedule:
    if not self.schedules or len(self.schedules) != len(self.steps):
      raise ValueError(
        f"CycleSchedule: {len(self.schedules)} schedules and {len(self.steps)} steps; give "
        "one length per schedule."
      )
    ends = [sum(self.steps[: i + 1]) for i in range(len(self.steps))]
    period, made = ends[-1], [s.make() for s in self.schedules]

    def schedule(step):
      position = jnp.mod(jnp.asarray(step), period)
      out = made[0](step)
      for boundary, sub in zip(ends[:-1], made[1:]):
        out = jnp.where(position < boundary, out, sub(step))
      return out

    return schedule


@dataclasses.dataclass(kw_only=True)
class ContinuousSchedule(BaseSchedule):
  """`initial_value`, halved every `half_life_steps` after `start_step`, down to `min` times it.

  Attributes:
    initial_value: the value until start_step.
    start_step: where the decay starts.
    half_life_steps: steps per halving.
    min: the lowest value, relative to initial_value.
  """

  initial_value: float = 1.0
  start_step: int = 400_000
  half_life_steps: int = 100_000
  min: float = 0.01

  def make(self) -> Schedule:
    limit = self.start_step + self.half_life_steps * math.log(self.min) / math.log(0.5)
    exp = Exponential(start=(self.start_step, 1.0), limit=(limit, self.min)).make()
    initial = self.initial_value
    return lambda step: initial * exp(step)
