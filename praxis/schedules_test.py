"""Tests for praxis.schedules against values computed by hand (math, not optax)."""

import math

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import schedules


def _values(schedule, steps):
  return [float(schedule(s)) for s in steps]


class SchedulesTest(absltest.TestCase):
  def assertValues(self, schedule, expected: dict[int, float], rtol=1e-6):
    got = _values(schedule, list(expected))
    np.testing.assert_allclose(
      got, list(expected.values()), rtol=rtol, atol=1e-7, err_msg=str(list(expected))
    )

  def test_config_rejects_typos_and_builds(self):
    cfg = schedules.Constant.HParams.config(value=0.5)
    with self.assertRaises(AttributeError):
      cfg.valeu = 1.0
    self.assertEqual(float(cfg.Instantiate()(7)), 0.5)

  def test_constant_with_warmup(self):
    s = schedules.Constant(value=2.0, warmup_steps=4)
    self.assertValues(s, {0: 0.0, 1: 0.5, 3: 1.5, 4: 2.0, 100: 2.0})

  def test_linear(self):
    s = schedules.Linear(start=(10, 1.0), limit=(20, 0.0))
    self.assertValues(s, {0: 1.0, 10: 1.0, 15: 0.5, 19: 0.1, 20: 0.0, 50: 0.0})

  def test_linear_with_warmup_ramps_to_value_at_warmup_end(self):
    # Without warm-up the value at step 5 would be 1 - 5/20 = 0.75.
    s = schedules.Linear(start=(0, 1.0), limit=(20, 0.0), warmup_steps=5)
    self.assertValues(s, {0: 0.0, 1: 0.15, 4: 0.6, 5: 0.75, 10: 0.5, 20: 0.0})

  def test_piecewise_linear(self):
    s = schedules.PiecewiseLinear(boundaries=(0, 10, 30), values=(0.0, 1.0, 0.5))
    self.assertValues(s, {0: 0.0, 5: 0.5, 10: 1.0, 20: 0.75, 30: 0.5, 99: 0.5})
    # Flat before the first point.
    s = schedules.PiecewiseLinear(boundaries=(10, 20), values=(2.0, 4.0))
    self.assertValues(s, {0: 2.0, 10: 2.0, 15: 3.0, 20: 4.0, 25: 4.0})

  def test_exponential(self):
    s = schedules.Exponential(start=(100, 1.0), limit=(200, 0.01))
    self.assertValues(s, {0: 1.0, 100: 1.0, 150: 0.1, 175: 10**-1.5, 200: 0.01, 400: 0.01})

  def test_exponential_with_warmup(self):
    s = schedules.Exponential(start=(0, 1.0), limit=(100, 0.01), warmup_steps=50)
    self.assertValues(s, {0: 0.0, 25: 0.05, 50: 0.1, 100: 0.01})

  def test_cosine(self):
    s = schedules.Cosine(initial_value=1.0, final_value=0.1, total_steps=100)
    self.assertValues(
      s,
      {
        0: 1.0,
        25: 0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2,
        50: 0.55,
        100: 0.1,
        150: 0.1,
      },
    )

  def test_cosine_with_warmup(self):
    s = schedules.Cosine(initial_value=1.0, final_value=0.0, total_steps=100, warmup_steps=10)
    at_10 = (1 + math.cos(math.pi * 0.1)) / 2
    self.assertValues(s, {0: 0.0, 5: at_10 / 2, 10: at_10, 50: 0.5, 100: 0.0})

  def test_piecewise_constant_boundary_belongs_to_next_piece(self):
    s = schedules.PiecewiseConstant(boundaries=(10, 20), values=(1.0, 0.1, 0.01))
    self.assertValues(s, {0: 1.0, 9: 1.0, 10: 0.1, 19: 0.1, 20: 0.01, 1000: 0.01})

  def test_piecewise_constant_with_warmup(self):
    s = schedules.PiecewiseConstant(boundaries=(10,), values=(1.0, 0.5), warmup_steps=4)
    self.assertValues(s, {0: 0.0, 2: 0.5, 4: 1.0, 10: 0.5})

  def test_lm_cloud_linear_rampup_exponential_decay(self):
    # Pax's lm_cloud setting: warm-up 4000, decay from 4001 to 0.1 at 300000.
    s = schedules.LinearRampupExponentialDecay(
      warmup_steps=4000, decay_start=4001, decay_end=300000, min_ratio=0.1, max=1.0
    )
    mid = 4001 + (300000 - 4001) // 2
    self.assertValues(
      s,
      {
        0: 0.0,
        1: 1 / 4000,
        300: 300 / 4000,  # LmCloudSpmd2BLimitSteps never leaves warm-up.
        3999: 3999 / 4000,
        4000: 1.0,
        4001: 1.0,
        mid: 0.1 ** ((mid - 4001) / (300000 - 4001)),
        299999: 0.1 ** (299998 / 299999),
        300000: 0.1,
        10**6: 0.1,
      },
      rtol=2e-6,
    )

  def test_linear_rampup_exponential_decay_scaled_max(self):
    s = schedules.LinearRampupExponentialDecay(
      warmup_steps=10, decay_start=20, decay_end=30, min_ratio=0.25, max=2.0
    )
    self.assertValues(s, {5: 1.0, 10: 2.0, 15: 2.0, 20: 2.0, 25: 1.0, 30: 0.5, 40: 0.5})

  def test_linear_rampup_cosine_decay(self):
    s = schedules.LinearRampupCosineDecay(
      warmup_steps=10, decay_start=20, decay_end=120, min_ratio=0.1, max=1.0
    )
    self.assertValues(
      s,
      {
        0: 0.0,
        5: 0.5,
        10: 1.0,
        19: 1.0,
        20: 1.0,
        45: 0.1 + 0.9 * (1 + math.cos(math.pi * 0.25)) / 2,
        70: 0.55,
        120: 0.1,
        500: 0.1,
      },
    )

  def test_linear_rampup_cosine_decay_start_step(self):
    # Pax's start_step: 1.0 before it, then the schedule counted from it.
    s = schedules.LinearRampupCosineDecay(
      start_step=100, warmup_steps=10, decay_start=20, decay_end=120, min_ratio=0.1, max=2.0
    )
    self.assertValues(s, {0: 1.0, 99: 1.0, 100: 0.0, 105: 1.0, 110: 2.0, 170: 1.1, 300: 0.2})

  def test_pax_polynomial_family(self):
    p = schedules.Polynomial(power=2, start=(10, 1.0), limit=(20, 0.0))
    self.assertValues(p, {0: 1.0, 15: 1.0 - 0.25, 20: 0.0, 30: 0.0})
    p = schedules.Polynomial(power=2, start=(10, 1.0), limit=(20, 0.0), origin="limit")
    self.assertValues(p, {15: 1.0 - 0.75})
    d = schedules.LinearRampupPolynomialDecay(
      warmup_steps=10, decay_start=20, decay_end=30, power=2, min_ratio=0.0, max=1.0
    )
    # Pax's Polynomial (origin 'start') as the decay: max + r**2 (end - max), r = 5 / 10 at 25.
    self.assertValues(d, {5: 0.5, 20: 1.0, 25: 0.75, 40: 0.0})

  def test_pax_cosine_sqrt_cycle_continuous(self):
    c = schedules.DelayedCosine(start=(10, 1.0), limit=(20, 0.5))
    self.assertValues(c, {0: 1.0, 15: 0.75, 20: 0.5, 99: 0.5})
    q = schedules.SqrtDecay(decay_start=100, multiplier=2.0)
    self.assertValues(q, {0: 0.2, 100: 0.2, 400: 0.1})
    r = schedules.LinearRampupPiecewiseConstant(boundaries=[10, 20], values=[1.0, 0.5])
    self.assertValues(r, {0: 0.0, 5: 0.5, 10: 1.0, 19: 1.0, 20: 0.5, 99: 0.5})
    cycle = schedules.CycleSchedule(
      schedules=[schedules.Constant(value=1.0), schedules.Constant(value=2.0)], steps=[3, 2]
    )
    self.assertValues(cycle, {0: 1.0, 2: 1.0, 3: 2.0, 4: 2.0, 5: 1.0, 8: 2.0})
    cont = schedules.ContinuousSchedule(
      initial_value=2.0, start_step=10, half_life_steps=5, min=0.25
    )
    self.assertValues(cont, {0: 2.0, 10: 2.0, 15: 1.0, 20: 0.5, 100: 0.5}, rtol=1e-5)

  def test_rampup_decay_without_warmup_or_hold(self):
    s = schedules.LinearRampupExponentialDecay(
      warmup_steps=0, decay_start=0, decay_end=10, min_ratio=0.01, max=1.0
    )
    self.assertValues(s, {0: 1.0, 5: 0.1, 10: 0.01})

  def test_rampup_decay_rejects_bad_order(self):
    with self.assertRaisesRegex(ValueError, "warmup_steps <= decay_start < decay_end"):
      schedules.LinearRampupCosineDecay(warmup_steps=10, decay_start=5, decay_end=20).make()

  def test_rsqrt(self):
    s = schedules.Rsqrt(peak=2.0, warmup_steps=100)
    self.assertValues(s, {0: 0.02, 1: 0.02, 50: 1.0, 100: 2.0, 400: 1.0, 10000: 0.2})
    self.assertIs(schedules.LinearRampupSqrtDecay, schedules.Rsqrt)

  def test_transformer(self):
    s = schedules.Transformer(warmup_steps=100, model_dim=64, decay_end=900)
    self.assertValues(
      s,
      {
        0: 64**-0.5 * 100**-1.5,
        99: 64**-0.5 * 100 * 100**-1.5,  # the peak: (step + 1) = warmup
        399: 64**-0.5 * 400**-0.5,
        5000: 64**-0.5 * 901**-0.5,  # frozen at decay_end
      },
    )

  def test_piecewise_schedule_feeds_relative_steps(self):
    s = schedules.PiecewiseSchedule(
      boundaries=(10,),
      schedules=(
        schedules.Linear(start=(0, 0.0), limit=(10, 1.0)),
        schedules.Linear(start=(0, 1.0), limit=(10, 0.0)),
      ),
    )
    self.assertValues(s, {0: 0.0, 5: 0.5, 10: 1.0, 15: 0.5, 20: 0.0})

  def test_nested_config_builds(self):
    cfg = schedules.PiecewiseSchedule.HParams.config(
      boundaries=[3],
      schedules=[
        schedules.Constant.HParams.config(value=1.0),
        schedules.Constant.HParams.config(value=0.5),
      ],
    )
    s = cfg.Instantiate()
    self.assertValues(s, {2: 1.0, 3: 0.5})

  def test_jit_and_traced_steps(self):
    s = schedules.LinearRampupExponentialDecay(
      warmup_steps=4, decay_start=4, decay_end=8, min_ratio=0.5, max=1.0
    )
    steps = jnp.arange(10, dtype=jnp.int32)
    got = jax.jit(jax.vmap(s))(steps)
    expected = [0, 0.25, 0.5, 0.75, 1, 0.5**0.25, 0.5**0.5, 0.5**0.75, 0.5, 0.5]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    self.assertEqual(got.dtype, jnp.float32)

  def test_pax_config_classmethod_value_at_and_make_agree(self):
    cfg = schedules.LinearRampupCosineDecay.config(
      warmup_steps=2, decay_start=2, decay_end=6, min_ratio=0.5, max=1.0
    )
    s = cfg.Instantiate()
    self.assertIsInstance(s, schedules.BaseSchedule)
    steps = jnp.arange(8)
    # By hand: ramp 0, 0.5, then 0.75 + 0.25 cos(pi r) over 4 steps, then 0.5.
    expected = [0.0, 0.5, 1.0] + [0.75 + 0.25 * math.cos(math.pi * r / 4) for r in (1, 2, 3)]
    expected += [0.5, 0.5]
    np.testing.assert_allclose(jax.jit(jax.vmap(s.value_at))(steps), expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(jax.vmap(s.make())(steps), expected, rtol=1e-6, atol=1e-7)

  def test_user_schedule_defines_value_at_only(self):
    class Halving(schedules.BaseSchedule):
      every: int = 10

      def value_at(self, step):
        return 0.5 ** (jnp.asarray(step) // self.every).astype(jnp.float32)

    s = Halving.config(every=2).Instantiate()
    self.assertValues(s, {0: 1.0, 1: 1.0, 2: 0.5, 5: 0.25})
    self.assertAlmostEqual(float(s.make()(4)), 0.25)

  def test_rampup_decay_needs_max(self):
    # Pax's default max is 0.0: an unset max is an error at construction.
    with self.assertRaisesRegex(ValueError, "set max > 0"):
      schedules.LinearRampupExponentialDecay.config(decay_end=10).Instantiate()

  def test_invalid_configs_explain(self):
    with self.assertRaisesRegex(ValueError, "len\\(boundaries\\) \\+ 1 values"):
      schedules.PiecewiseConstant(boundaries=(1, 2), values=(1.0,)).make()
    with self.assertRaisesRegex(ValueError, "must be > 0"):
      schedules.Exponential(start=(0, 1.0), limit=(10, 0.0)).make()
    with self.assertRaisesRegex(ValueError, "before limit step"):
      schedules.Linear(start=(10, 1.0), limit=(10, 0.0)).make()


if __name__ == "__main__":
  absltest.main()
