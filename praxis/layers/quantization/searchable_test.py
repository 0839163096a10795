"""Searchable quantized layers: `decision` picks the precision of the weight quantizer."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers.quantization import quantization_hparams as qh
from praxis.layers.quantization import searchable


def _quantization():
  return qh.QuantizationParams(
    quantization_type=qh.QuantizationType.AQT,
    mode=qh.QuantizationMode.TRAINING,
    weight_params=qh.WeightQuantizationParams(),
  )


class SearchableTest(absltest.TestCase):
  def test_templates_carry_each_precision(self):
    acts, weights = searchable._build_quantization_templates([2, 8], _quantization())
    self.assertEqual(acts, [])  # no act_params: activations are not searched
    self.assertEqual([w.precision for w in weights], [2, 8])
    with self.assertRaisesRegex(AttributeError, "not supported"):
      searchable._build_quantization_templates([3], _quantization())

  def test_decision_selects_precision(self):
    p = pax_fiddle.Config(
      searchable.SearchableLinear,
      name="l",
      input_dims=16,
      output_dims=4,
      quantization=_quantization(),
      precisions=[2, 8],
    )
    layer = base_layer.instantiate(p)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 16)), jnp.float32)
    with base_layer.JaxContext.new_context():
      v = layer.init(jax.random.PRNGKey(0), x)
      exact = np.asarray(x) @ np.asarray(v["params"]["w"])
      outs = []
      for decision in (0, 1):
        v["non_trainable"]["weight_quantizer"]["decision"] = jnp.uint8(decision)
        outs.append(np.asarray(layer.apply(v, x)))
    err2, err8 = (np.abs(o - exact).max() for o in outs)
    # int8 is close to the float product; int2 (3 levels) is visibly coarser.
    self.assertLess(err8, 0.05 * np.abs(exact).max())
    self.assertGreater(err2, 4 * err8)


if __name__ == "__main__":
  absltest.main()
