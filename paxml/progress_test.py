"""Tests of the FLOPs formula, the peak table, and the rates the progress line reports."""

import types
from unittest import mock

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp

from paxml import progress


class ProgressTest(absltest.TestCase):
  def test_flops_per_token_is_6n_plus_12lhqt(self):
    # Hand-computed: 6 * 1000 + 12 * 2 layers * 4 heads * 8 dims * 16 tokens = 6000 + 12288.
    self.assertEqual(progress.flops_per_token(1000, (2, 4, 8), 16), 18288.0)
    self.assertEqual(progress.flops_per_token(1000, None, 16), 6000.0)

  def test_model_flops_count_every_weight_but_the_position_table(self):
    # Boxed (as jax.eval_shape of an init gives them) and plain leaves both count.
    params = {
      "embedding": nn.LogicallyPartitioned(jnp.zeros((10, 4)), ("vocab", "embed")),
      "position_emb": {"emb_var": jnp.zeros((16, 4))},
      "ffn": {"w": jax.ShapeDtypeStruct((4, 8), jnp.float32), "b": jnp.zeros((8,))},
    }
    self.assertEqual(progress.num_matmul_params(params), 40 + 32 + 8)
    self.assertEqual(
      progress.model_flops_per_token(params, (2, 4, 8), 16),
      progress.flops_per_token(80, (2, 4, 8), 16),
    )

  def test_peak_table(self):
    def device(kind):
      return types.SimpleNamespace(device_kind=kind)

    self.assertEqual(progress.peak_flops_per_device(device("NVIDIA H100 80GB HBM3")), 989e12)
    self.assertEqual(progress.peak_flops_per_device(device("TPU v5 lite")), 197e12)
    self.assertEqual(progress.peak_flops_per_device(device("TPU v4")), 275e12)
    self.assertIsNone(progress.peak_flops_per_device(jax.devices("cpu")[0]))

  def test_rates_mfu_and_eta(self):
    clock = iter([100.0, 110.0])
    with mock.patch.object(progress.time, "perf_counter", lambda: next(clock)):
      meter = progress.ProgressMeter(
        num_train_steps=100,
        tokens_per_step=1000,
        flops_per_token=1e9,
        num_devices=2,
        peak_flops_per_device=1e12,
        start_step=0,
      )
      rates = meter.update(20)  # 20 steps in 10 s.
    self.assertAlmostEqual(rates["Steps/sec"], 2.0)
    self.assertAlmostEqual(rates["tokens/sec"], 2000.0)
    # 2000 tokens/s * 1e9 FLOPs = 2e12 FLOP/s of 2 * 1e12 peak.
    self.assertAlmostEqual(rates["MFU"], 1.0)
    self.assertAlmostEqual(rates["eta_secs"], 40.0)  # 80 steps left at 2 steps/s.
    line = meter.line(20, 1.5, rates)
    self.assertIn("step 20/100 loss 1.5000 steps/s 2.00 tokens/s 2000 MFU 100.0% ETA 0m40s", line)

  def test_rates_are_on_finished_steps_without_the_compile(self):
    clock = iter([0.0, 100.0, 105.0, 115.0])
    with mock.patch.object(progress.time, "perf_counter", lambda: next(clock)):
      meter = progress.ProgressMeter(
        num_train_steps=41,
        tokens_per_step=10,
        flops_per_token=1.0,
        num_devices=1,
        peak_flops_per_device=None,
      )
      meter.step_done(1)  # The first step finished at t=100: 100 s of compilation.
      meter.step_done(2)  # Later reports change nothing: windows end at summaries.
      first = meter.update(11)  # t=105: 10 steps in 5 s since the first one finished.
      second = meter.update(21)  # t=115: 10 steps in 10 s.
    self.assertAlmostEqual(first["Steps/sec"], 2.0)
    self.assertAlmostEqual(first["tokens/sec"], 20.0)
    self.assertAlmostEqual(first["eta_secs"], 30 / 2.0)
    self.assertAlmostEqual(second["Steps/sec"], 1.0)
    # The ETA uses the mean rate since the first finished step: 20 steps in 15 s.
    self.assertAlmostEqual(second["eta_secs"], 20 / (20 / 15))

  def test_unknown_peak_reports_no_mfu(self):
    meter = progress.ProgressMeter(
      num_train_steps=10,
      tokens_per_step=1,
      flops_per_token=1.0,
      num_devices=1,
      peak_flops_per_device=None,
    )
    rates = meter.update(1)
    self.assertNotIn("MFU", rates)
    self.assertIn("MFU n/a", meter.line(1, 0.0, rates))


if __name__ == "__main__":
  absltest.main()
