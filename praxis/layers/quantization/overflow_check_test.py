"""Overflow-checking layers log exactly when an output leaves the configured range."""

from absl.testing import absltest
import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers.quantization import overflow_check


class OverflowCheckTest(absltest.TestCase):
  def test_logs_only_out_of_range_outputs(self):
    p = pax_fiddle.Config(
      overflow_check.FeedForwardOverflowCheck,
      name="ffn",
      input_dims=4,
      output_dims=2,
      overflow_limits=overflow_check.OverflowLimits(max_val=100.0, min_val=-100.0),
    )
    layer = base_layer.instantiate(p)
    small = jnp.full((2, 4), 0.01)
    with base_layer.JaxContext.new_context():
      v = layer.init(jax.random.PRNGKey(0), small)
      # Weights of 100 make |outputs| = 4 * 100 * x: 4 for x = 0.01, 4e4 for x = 100.
      v["params"]["linear"]["w"] = jnp.full((4, 2), 100.0)
      with self.assertLogs(level="WARNING") as logs:
        layer.apply(v, small)
        layer.apply(v, small * 1e4)
        jax.effects_barrier()
    self.assertLen(logs.records, 1)
    self.assertTrue(logs.records[0].getMessage().startswith("Overflow in: FeedForward, ffn"))

  def test_default_limits_are_float16(self):
    limits = overflow_check.OverflowLimits()
    self.assertEqual(limits.max_val, 65504.0)
    self.assertEqual(limits.min_val, -65504.0)


if __name__ == "__main__":
  absltest.main()
