"""Quantized Conv2D serving int8 kernels against the float Conv2D."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import convolutions as float_convolutions
from praxis.layers.quantization import convolutions
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams as qh


class QuantizedConv2DTest(absltest.TestCase):
  def test_int8_kernel_matches_float_conv(self):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 6, 3)).astype(np.float32)
    kwargs = dict(filter_shape=(3, 3, 3, 4), filter_stride=(1, 1), bias=False)
    float_conv = base_layer.instantiate(
      pax_fiddle.Config(float_convolutions.Conv2D, name="c", **kwargs)
    )
    q_conv = base_layer.instantiate(
      pax_fiddle.Config(
        convolutions.Conv2D,
        name="c",
        quantization=qh.QuantizationParams(mode=qh.QuantizationMode.INFERENCE),
        **kwargs,
      )
    )
    with base_layer.JaxContext.new_context():
      variables = float_conv.init(jax.random.PRNGKey(0), x)
      expected = float_conv.apply(variables, x)
      w = variables["params"]["w"]  # [h, w, C_in, C_out]
      q, s, _ = operations.reduce_precision(w, [0, 1, 2])
      q_vars = {"params": {"w": q, "w_quantized_scale": jnp.squeeze(s)}}
      self.assertEqual(
        jax.tree.map(jnp.shape, q_conv.init(jax.random.PRNGKey(0), x))["params"],
        {"w": (3, 3, 3, 4), "w_quantized_scale": (4,)},
      )
      out = q_conv.apply(q_vars, x)
    np.testing.assert_allclose(out, expected, atol=0.02 * np.abs(expected).max())


if __name__ == "__main__":
  absltest.main()
