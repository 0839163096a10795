"""AutoMLSelect: `decision` picks which TensorQuantizer branch quantizes."""

from absl.testing import absltest
import jax
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers.quantization import automl_select
from praxis.layers.quantization import quantizer


class AutoMLSelectTest(absltest.TestCase):
  def test_decision_selects_branch(self):
    options = [
      pax_fiddle.Config(quantizer.TensorQuantizer, name=f"q{bits}", precision=bits)
      for bits in (8, 2)
    ]
    layer = base_layer.instantiate(
      pax_fiddle.Config(automl_select.AutoMLSelect, name="s", search_options_tpl=options)
    )
    x = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    with base_layer.JaxContext.new_context():
      variables = layer.init(jax.random.PRNGKey(0), x, 1)
      self.assertEqual(variables["non_trainable"]["rl_variables"].shape, (2,))
      q8, _, _ = layer.apply(variables, x, 1)
      variables["non_trainable"]["decision"] = np.uint8(1)
      q2, _, _ = layer.apply(variables, x, 1)
    self.assertGreater(np.abs(q8).max(), 100)  # int8 range
    self.assertLessEqual(np.abs(q2).max(), 2)  # 2-bit range [-2, 1]


if __name__ == "__main__":
  absltest.main()
