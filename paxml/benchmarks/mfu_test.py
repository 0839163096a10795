"""Smoke test of //paxml/benchmarks:mfu at --tiny size."""

import math

from absl.testing import absltest
import jax

from paxml.benchmarks import mfu


class MfuTest(absltest.TestCase):
  def test_tiny_run_reports(self):
    r = mfu.run(tiny=True, steps=3, warmup=1, batch=2, seq_len=2048)
    self.assertTrue(r["scaled_down"])
    self.assertIn("seq 64", r["shape"])  # --tiny caps the length
    self.assertEqual(r["attention_impl"], "einsum")  # the cap (50, Pax's) needs the einsum path
    self.assertGreater(r["params"], 0)
    self.assertTrue(r["step_s_min"] <= r["step_s_median"] <= r["step_s_max"])
    self.assertAlmostEqual(r["tokens_per_s"], 2 * 64 / r["step_s_median"], delta=1e-6)
    self.assertTrue(math.isfinite(r["loss_first"]) and math.isfinite(r["loss_last"]))
    self.assertLess(r["loss_last"], r["loss_first"])  # three Adam steps on one batch
    if jax.devices()[0].platform == "cpu":
      self.assertIsNone(r["mfu"])  # no CPU peak in progress.py's table


if __name__ == "__main__":
  absltest.main()
