"""Smoke test of //paxml/benchmarks:lm_step at its CI size (2 x 64, seq 32, fp32)."""

import math

from absl.testing import absltest

from paxml.benchmarks import lm_step


class LmStepTest(absltest.TestCase):
  def test_ci_rows(self):
    def row(mode, caps):
      shape = lm_step.with_caps(lm_step.CI_SHAPE, caps)
      return lm_step.compare(
        shape, seq=32, mode=mode, policy="SAVE_NOTHING", tokens=64, repeats=1, steps=1
      )

    rows = {mode: row(mode, True) for mode in ("unrolled", "scan")}
    rows["unrolled, no caps"] = row("unrolled", False)
    for mode, row in rows.items():
      # Same starting weights, same function (the reference in its own layout): the two
      # models agree on the initial loss, which is a little above the uniform guess's
      # ln 256 = 5.55 (random tied embeddings).
      self.assertAlmostEqual(row["ours_loss0"], row["minimal_loss0"], delta=1e-4, msg=mode)
      self.assertBetween(row["ours_loss0"], math.log(256), 1.5 * math.log(256))
      for key in ("time", "flops", "bytes", "temp"):
        self.assertTrue(math.isfinite(row[key]) and row[key] > 0, f"{mode} {key}: {row[key]}")
    # Without the caps the loss is another number (the caps bound the logits).
    self.assertGreater(
      abs(rows["unrolled, no caps"]["ours_loss0"] - rows["unrolled"]["ours_loss0"]), 1e-3
    )
    # Unrolled, the matmuls are the same: XLA's flops agree closely.
    self.assertAlmostEqual(rows["unrolled"]["flops"], 1.0, delta=0.05)
    # Scanned, the loop body is recounted once per layer, and remat (SAVE_NOTHING) recomputes
    # the forward pass: more flops than the unrolled program, not the ~1/L that XLA's raw
    # count of a loop would give.
    self.assertGreater(rows["scan"]["ours_flops"], rows["unrolled"]["ours_flops"])
    self.assertLess(rows["scan"]["ours_flops"], 1.6 * rows["unrolled"]["ours_flops"])


if __name__ == "__main__":
  absltest.main()
