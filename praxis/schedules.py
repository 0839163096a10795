"""Learning-rate schedules: Pax's classes, fields and formulas, usable as optax schedules.

A schedule gives a *multiplier* of the optimizer's base learning rate at a step, as in Pax
(`lr(step) = learning_rate * schedule.value_at(step)`). Each class is a Pax
`FiddleBaseParameterizable`: a keyword-only dataclass whose fields are its hyperparameters,
configured and built as in Pax:

    cfg = schedules.LinearRampupExponentialDecay.config(
        warmup_steps=4000, decay_start=4001, decay_end=300000, min_ratio=0.1, max=1.0)
    schedule = cfg.Instantiate()      # checks the fields, as Pax's __post_init__ does
    schedule.value_at(2000)           # 0.5 (a float32 scalar; jit-able, traced steps too)
    schedule.make()                   # ours: the same function as an optax.Schedule

`Cls.HParams.config(...)` (the seed's spelling) makes the same config. Steps are absolute (the
trainer's step counter). The optimizer evaluates the schedule at the number of updates already
applied, so the first update uses step 0: with a warm-up from 0 that update does nothing, as in
Pax.

A user's own schedule subclasses `BaseSchedule` and defines `value_at` (Pax's way) or `make`.

Pax's classes: Constant, Polynomial, Linear (a Polynomial of power 1), Exponential, Cosine,
DelayedCosine, PiecewiseConstant, LinearRampupExponentialDecay, LinearRampupCosineDecay,
LinearRampupPolynomialDecay, LinearRampupSqrtDecay, LinearRampupPiecewiseConstant, SqrtDecay,
Transformer, PiecewiseSchedule, CycleSchedule, ContinuousSchedule.
Ours beside them: PiecewiseLinear, and a `warmup_steps` field (default 0: Pax's behaviour) on
Constant, Polynomial/Linear, Exponential, Cosine and PiecewiseConstant that ramps the first steps
linearly from 0 to the schedule's value at `warmup_steps`. `Rsqrt` is the seed's older name of
LinearRampupSqrtDecay (the same class).
"""

from __future__ import annotations

import abc
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import optax

from praxis import base_hyperparams

Schedule = optax.Schedule
instantiate = base_hyperparams.instantiate


def _f32(step: jax.typing.ArrayLike) -> jax.Array:
  return jnp.asarray(step).astype(jnp.float32)


class BaseSchedule(base_hyperparams.FiddleBaseParameterizable, abc.ABC):
  """A learning-rate multiplier as a function of the step.

  Subclasses define `value_at(step)` (Pax) or `make()` (an optax schedule); each gives the other.
  """

  def __post_init__(self):
    parent = getattr(super(), "__post_init__", None)
    if parent is not None:
      parent()

  def value_at(self, step: jax.typing.ArrayLike) -> jax.Array:
    """The multiplier at `step` (an integer scalar, traced or not) as a float32 scalar."""
    if type(self).make is BaseSchedule.make:
      raise NotImplementedError(
        f"{type(self).__name__} defines neither value_at(step) nor make(); a schedule "
        "subclass must define one of them."
      )
    return jnp.asarray(self.make()(step), jnp.float32)

  def make(self) -> Schedule:
    """The optax schedule `step -> multiplier` (what optimizers.build uses)."""
    if type(self).value_at is BaseSchedule.value_at:
      raise NotImplementedError(
        f"{type(self).__name__} defines neither value_at(step) nor make(); a schedule "
        "subclass must define one of them."
      )
    return self.value_at

  def __call__(self, step: jax.typing.ArrayLike) -> jax.Array:
    return self.value_at(step)


class _Warmup:
  """Mixin for our `warmup_steps` field: the first steps ramp linearly from 0 to the value the
  schedule has at `warmup_steps` (the class's own value from there on)."""

  def value_at(self, step):
    own = jnp.asarray(self._value(step), jnp.float32)
    if not self.warmup_steps:
      return own
    if self.warmup_steps < 0:
      raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}.")
    at_end = jnp.asarray(self._value(self.warmup_steps), jnp.float32)
    x = _f32(step)
    return jnp.where(x < self.warmup_steps, at_end * x / self.warmup_steps, own)


def _check_points(name: str, start: Sequence[float], limit: Sequence[float]) -> None:
  if len(start) != 2 or len(limit) != 2:
    raise ValueError(f"{name}: start and limit are (step, value) pairs; got {start}, {limit}.")
  if not start[0] < limit[0]:
    raise ValueError(f"{name}: start step {start[0]} must be before limit step {limit[0]}.")


def _joined(schedules: Sequence[Any], boundaries: Sequence[int]) -> Schedule:
  """Pieces in turn; each fed the steps since its boundary (optax.join_schedules)."""
  return optax.join_schedules([s.value_at for s in schedules], list(boundaries))


class Constant(_Warmup, BaseSchedule):
  """Always `value`.

  Attributes:
    value: the multiplier.
    warmup_steps: ours; linear ramp from 0 over this many first steps.
  """

  value: float = 1.0
  warmup_steps: int = 0

  def _value(self, step):
    del step
    return jnp.asarray(self.value, jnp.float32)


class Polynomial(_Warmup, BaseSchedule):
  """`y0` before `x0`, `y1` from `x1`, between them `y0 + f(r) (y1 - y0)` with r the fraction of
  the way: f(r) = r**power (origin 'start') or 1 - (1 - r)**power (origin 'limit').

  Attributes:
    power: the polynomial's power.
    start: (x0, y0).
    limit: (x1, y1), x1 > x0.
    origin: 'start' or 'limit'.
    warmup_steps: ours; linear ramp from 0 over this many first steps.
  """

  power: int = 1
  start: tuple[int, float] = (0, 1.0)
  limit: tuple[int, float] = (1, 1.0)
  origin: str = "start"
  warmup_steps: int = 0

  def __post_init__(self):
    super().__post_init__()
    _check_points(type(self).__name__, self.start, self.limit)
    if self.origin not in ("start", "limit"):
      raise ValueError(f"Polynomial: origin must be 'start' or 'limit', got {self.origin!r}.")

  def _value(self, step):
    (x0, y0), (x1, y1) = self.start, self.limit
    x = _f32(step)
    r = jnp.clip((x - x0) / (x1 - x0), 0.0, 1.0)
    f = r**self.power if self.origin == "start" else 1 - (1 - r) ** self.power
    return jnp.where(x < x0, y0, jnp.where(x >= x1, y1, y0 + f * (y1 - y0)))


class Linear(Polynomial):
  """`y0` until step `x0`, linear to `y1` at step `x1`, then `y1` (a Polynomial of power 1)."""

  power: int = 1


class PiecewiseLinear(_Warmup, BaseSchedule):
  """Ours: linear through the points (boundaries[i], values[i]); flat outside them.

  Attributes:
    boundaries: increasing steps.
    values: the multiplier at each boundary (same length).
    warmup_steps: linear ramp from 0 over this many first steps.
  """

  boundaries: Sequence[int] = (0,)
  values: Sequence[float] = (1.0,)
  warmup_steps: int = 0

  def __post_init__(self):
    super().__post_init__()
    if len(self.boundaries) != len(self.values) or not self.boundaries:
      raise ValueError(
        f"PiecewiseLinear: {len(self.boundaries)} boundaries and "
        f"{len(self.values)} values; give one value per boundary (at least one)."
      )
    if any(b1 <= b0 for b0, b1 in zip(self.boundaries, self.boundaries[1:])):
      raise ValueError(f"PiecewiseLinear: boundaries {self.boundaries} must be increasing.")

  def _value(self, step):
    # jnp.interp is flat outside the points, as wanted.
    return jnp.interp(
      _f32(step), jnp.asarray(self.boundaries, jnp.float32), jnp.asarray(self.values, jnp.float32)
    )


class Exponential(_Warmup, BaseSchedule):
  """`y0` until step `x0`, geometric (log-linear) to `y1` at step `x1`, then `y1`.

  Attributes:
    start: (x0, y0), y0 > 0.
    limit: (x1, y1), x1 > x0, y1 > 0.
    warmup_steps: ours; linear ramp from 0 over this many first steps.
  """

  start: tuple[int, float] = (0, 1.0)
  limit: tuple[int, float] = (1, 0.5)
  warmup_steps: int = 0

  def __post_init__(self):
    super().__post_init__()
    _check_points("Exponential", self.start, self.limit)
    if self.start[1] <= 0 or self.limit[1] <= 0:
      raise ValueError(
        f"Exponential: values must be > 0 (a geometric path); got {self.start}, {self.limit}."
      )

  def _value(self, step):
    (x0, y0), (x1, y1) = self.start, self.limit
    log_linear = Linear(start=(x0, math.log(y0)), limit=(x1, math.log(y1)))
    return jnp.exp(log_linear.value_at(step))


class Cosine(_Warmup, BaseSchedule):
  """`final + (initial - final) * (1 + cos(pi * min(step / total_steps, 1))) / 2`.

  Attributes:
    initial_value: the value at step 0.
    final_value: the value from `total_steps` on.
    total_steps: length of the decay (set it: > 0).
    warmup_steps: ours; linear ramp from 0 over this many first steps.
  """

  initial_value: float = 1.0
  final_value: float = 0.0
  total_steps: int = 0
  warmup_steps: int = 0

  def _value(self, step):
    if self.total_steps <= 0:
      # Pax divides by it and returns NaN at step 0.
      raise ValueError(f"Cosine: set total_steps > 0 (the decay's length), got {self.total_steps}.")
    fraction = jnp.minimum(1.0, _f32(step) / self.total_steps)
    gap = self.initial_value - self.final_value
    return self.final_value + 0.5 * gap * (1 + jnp.cos(math.pi * fraction))


class DelayedCosine(BaseSchedule):
  """`y0` before `x0`, half a cosine from `y0` to `y1` between `x0` and `x1`, then `y1`.

  Attributes:
    start: (x0, y0), y0 > 0.
    limit: (x1, y1), x1 > x0, y1 >= 0.
  """

  start: tuple[int, float] = (0, 1.0)
  limit: tuple[int, float] = (1, 0.5)

  def __post_init__(self):
    super().__post_init__()
    _check_points("DelayedCosine", self.start, self.limit)
    if self.start[1] <= 0 or self.limit[1] < 0:
      raise ValueError(f"DelayedCosine: need y0 > 0 and y1 >= 0, got {self.start}, {self.limit}.")

  def value_at(self, step):
    (x0, y0), (x1, y1) = self.start, self.limit
    phase = Linear(start=(x0, 0.0), limit=(x1, math.pi)).value_at(step)
    return y1 + 0.5 * (y0 - y1) * (1 + jnp.cos(phase))


class PiecewiseConstant(_Warmup, BaseSchedule):
  """`values[0]` before `boundaries[0]`, `values[i]` on [boundaries[i-1], boundaries[i]): a step
  equal to a boundary already has the next value.

  Attributes:
    boundaries: sorted steps where the value changes.
    values: len(boundaries) + 1 multipliers.
    warmup_steps: ours; linear ramp from 0 over this many first steps.
  """

  boundaries: Sequence[int] | None = None
  values: Sequence[float] | None = None
  warmup_steps: int = 0

  def __post_init__(self):
    super().__post_init__()
    if self.boundaries is None or self.values is None:
      raise ValueError("PiecewiseConstant: set both `boundaries` and `values`.")
    if len(self.values) != len(self.boundaries) + 1:
      raise ValueError(
        f"PiecewiseConstant: {len(self.values)} values for "
        f"{len(self.boundaries)} boundaries; give len(boundaries) + 1 values."
      )
    if list(self.boundaries) != sorted(self.boundaries):
      raise ValueError(f"PiecewiseConstant: boundaries {self.boundaries} must be sorted.")

  def _value(self, step):
    # Which piece: the number of boundaries at or below the step.
    index = jnp.searchsorted(jnp.asarray(self.boundaries, jnp.float32), _f32(step), side="right")
    return jnp.asarray(self.values, jnp.float32)[index]


class _LinearRampupDecay(BaseSchedule):
  """Shared by Pax's LinearRampup{Exponential,Cosine,Polynomial}Decay: 0 -> max linearly until
  `warmup_steps`, max until `decay_start`, then a decay (the subclass's shape) to
  `max * min_ratio` at `decay_end`, constant after."""

  warmup_steps: int = 0
  decay_start: int = 0
  decay_end: int = 0
  min_ratio: float = 0.01
  max: float = 0.0

  def __post_init__(self):
    super().__post_init__()
    name = type(self).__name__
    if not 0 <= self.warmup_steps <= self.decay_start < self.decay_end:
      raise ValueError(
        f"{name}: need 0 <= warmup_steps <= decay_start < decay_end; got warmup_steps="
        f"{self.warmup_steps}, decay_start={self.decay_start}, decay_end={self.decay_end}."
      )
    if self.max <= 0:
      raise ValueError(f"{name}: set max > 0 (the peak multiplier), got {self.max}.")

  def _decay(self) -> BaseSchedule:
    """From (0, max) to (decay_end - decay_start, max * min_ratio), constant after."""
    raise NotImplementedError

  def value_at(self, step):
    start = getattr(self, "start_step", 0)  # LinearRampupCosineDecay's field.
    pieces, boundaries = [], []
    if start > 0:
      pieces.append(Constant(value=1.0))
      boundaries.append(start)
    if self.warmup_steps > 0:
      pieces.append(Linear(start=(0, 0.0), limit=(self.warmup_steps, self.max)))
      boundaries.append(start + self.warmup_steps)
    if self.decay_start > self.warmup_steps:
      pieces.append(Constant(value=self.max))
      boundaries.append(start + self.decay_start)
    pieces.append(self._decay())
    return jnp.asarray(_joined(pieces, boundaries)(step), jnp.float32)

  def _decay_points(self):
    return (0, self.max), (self.decay_end - self.decay_start, self.max * self.min_ratio)


class LinearRampupExponentialDecay(_LinearRampupDecay):
  """0 -> max linearly until `warmup_steps`, max until `decay_start`, exponential decay to
  `max * min_ratio` at `decay_end`, then constant.

  Attributes:
    warmup_steps: steps of the linear ramp from 0 (0: start at max).
    decay_start: first step of the decay (>= warmup_steps).
    decay_end: step where the decay reaches max * min_ratio (> decay_start).
    min_ratio: the final multiplier relative to max.
    max: the peak multiplier (must be set, > 0).
  """

  def _decay(self):
    start, limit = self._decay_points()
    return Exponential(start=start, limit=limit)


class LinearRampupCosineDecay(_LinearRampupDecay):
  """As LinearRampupExponentialDecay with half a cosine as the decay, all of it shifted by
  `start_step` (the multiplier is 1.0 before it; the other steps count from it)."""

  start_step: int = 0

  def _decay(self):
    start, limit = self._decay_points()
    return DelayedCosine(start=start, limit=limit)


class LinearRampupPolynomialDecay(_LinearRampupDecay):
  """As LinearRampupExponentialDecay with a Polynomial (origin 'start') of `power` as decay."""

  power: int = 1

  def _decay(self):
    start, limit = self._decay_points()
    return Polynomial(start=start, limit=limit, power=self.power)


class LinearRampupSqrtDecay(BaseSchedule):
  """`peak * min(step / warmup_steps, sqrt(warmup_steps / step))` with step >= 1: the
  Transformer schedule parameterised by its peak.

  Attributes:
    peak: the multiplier at `warmup_steps`.
    warmup_steps: length of the linear warm-up (> 0).
  """

  peak: float = 1.0
  warmup_steps: int = 4000

  def value_at(self, step):
    if self.warmup_steps <= 0:
      raise ValueError(f"LinearRampupSqrtDecay: warmup_steps must be > 0, got {self.warmup_steps}.")
    x = jnp.maximum(_f32(step), 1.0)
    w = float(self.warmup_steps)
    return self.peak * jnp.minimum(x / w, jnp.sqrt(w / x))


Rsqrt = LinearRampupSqrtDecay  # The seed's name for Pax's class.


class Transformer(BaseSchedule):
  """`model_dim**-0.5 * min((step + 1) * w**-1.5, (step + 1)**-0.5)`, w = warmup_steps x replicas.

  Attributes:
    warmup_steps: steps of the linear increase.
    model_dim: the model width that scales the peak.
    worker_replicas: multiplies warmup_steps.
    decay_end: if set, the value is frozen from this step on.
  """

  warmup_steps: int = 4000
  model_dim: int = 512
  worker_replicas: int = 1
  decay_end: int | None = None

  def value_at(self, step):
    x = _f32(step)
    if self.decay_end is not None:
      x = jnp.minimum(x, float(self.decay_end))
    w = jnp.float32(self.warmup_steps * self.worker_replicas)
    return jnp.float32(self.model_dim) ** -0.5 * jnp.minimum((x + 1) * w**-1.5, (x + 1) ** -0.5)


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

  def value_at(self, step):
    x = jnp.maximum(_f32(step) - self.offset, float(self.decay_start))
    return jax.lax.rsqrt(x) * jnp.float32(self.multiplier)


class LinearRampupPiecewiseConstant(BaseSchedule):
  """Linear from 0 to values[0] at boundaries[0], then values[i] on [boundaries[i],
  boundaries[i + 1]), values[-1] after the last boundary.

  Attributes:
    boundaries: increasing steps (at least one).
    values: one value per boundary.
  """

  boundaries: Sequence[int] | None = None
  values: Sequence[float] | None = None

  def __post_init__(self):
    super().__post_init__()
    if not self.boundaries or self.values is None or len(self.boundaries) != len(self.values):
      raise ValueError(
        f"LinearRampupPiecewiseConstant: boundaries {self.boundaries} and values "
        f"{self.values}; give one value per boundary (at least one)."
      )

  def value_at(self, step):
    first = self.boundaries[0]
    ramp = Linear(start=(0, 0.0), limit=(first, self.values[0]))
    # One value per remaining boundary plus the last one, which holds after the end.
    rest = PiecewiseConstant(
      boundaries=[b - first for b in self.boundaries[1:]], values=self.values
    )
    return jnp.asarray(_joined([ramp, rest], [first])(step), jnp.float32)


class PiecewiseSchedule(BaseSchedule):
  """`schedules[i]` on [boundaries[i-1], boundaries[i]), fed the steps since boundaries[i-1].

  Attributes:
    boundaries: sorted steps.
    schedules: len(boundaries) + 1 schedules (configs of the classes above; built with this one).
  """

  boundaries: Sequence[int] | None = None
  schedules: Sequence[BaseSchedule] | None = None

  def __post_init__(self):
    super().__post_init__()
    boundaries, subs = list(self.boundaries or ()), list(self.schedules or ())
    if boundaries != sorted(boundaries):
      raise ValueError(f"PiecewiseSchedule: boundaries {boundaries} must be sorted.")
    if len(subs) != len(boundaries) + 1:
      raise ValueError(
        f"PiecewiseSchedule: {len(subs)} schedules for {len(boundaries)} boundaries; "
        "give len(boundaries) + 1."
      )

  def value_at(self, step):
    return jnp.asarray(_joined(self.schedules, self.boundaries)(step), jnp.float32)


class CycleSchedule(BaseSchedule):
  """`schedules[i]` for `steps[i]` steps, in turn, over and over; each sees the absolute step.

  Attributes:
    schedules: the sub-schedules (configs of the classes above; built with this one).
    steps: how long each runs.
  """

  schedules: Sequence[BaseSchedule] | None = None
  steps: Sequence[int] | None = None

  def __post_init__(self):
    super().__post_init__()
    if not self.schedules or self.steps is None or len(self.schedules) != len(self.steps):
      raise ValueError(
        f"CycleSchedule: schedules {self.schedules} and steps {self.steps}; give one length "
        "per schedule."
      )

  def value_at(self, step):
    ends = [sum(self.steps[: i + 1]) for i in range(len(self.steps))]
    position = jnp.mod(jnp.asarray(step), ends[-1])
    out = self.schedules[0].value_at(step)
    for boundary, sub in zip(ends[:-1], self.schedules[1:]):
      out = jnp.where(position < boundary, out, sub.value_at(step))
    return out


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

  def value_at(self, step):
    limit = self.start_step + self.half_life_steps * math.log(self.min) / math.log(0.5)
    exp = Exponential(start=(self.start_step, 1.0), limit=(limit, self.min))
    return self.initial_value * exp.value_at(step)
