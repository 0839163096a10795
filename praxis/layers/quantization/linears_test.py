"""Quantized Linear / Einsum: PTQ weights from quantize_weight serve outputs close to the float layer."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers.quantization import einsum
from praxis.layers.quantization import linears
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams as qh


def _params(mode, **weight_kwargs):
  return qh.QuantizationParams(
    quantization_type=qh.QuantizationType.PTQ,
    mode=mode,
    weight_params=qh.WeightQuantizationParams(**weight_kwargs),
  )


def _serve(cls, x, weight_kwargs, **layer_kwargs):
  """(float output, quantized-inference output, quantized variables) of one layer."""
  build = lambda mode: base_layer.instantiate(
    pax_fiddle.Config(cls, name="l", quantization=_params(mode, **weight_kwargs), **layer_kwargs)
  )
  train, serve = build(qh.QuantizationMode.TRAINING), build(qh.QuantizationMode.INFERENCE)
  with base_layer.JaxContext.new_context():
    variables = train.init(jax.random.PRNGKey(0), x)
    float_out = train.apply(variables, x)
    q_vars, _ = train.apply(variables, mutable=[], method=train.quantize_weight)
    q_out = serve.apply(q_vars, x)
  return float_out, q_out, q_vars


class QuantizedLinearTest(parameterized.TestCase):
  @parameterized.parameters(
    dict(precision=8, use_symmetric=True, block_size=0),
    dict(precision=8, use_symmetric=False, block_size=0),
    dict(precision=8, use_symmetric=True, block_size=8),
    dict(precision=4, use_symmetric=True, block_size=0),
  )
  def test_ptq_serving_matches_float(self, precision, use_symmetric, block_size):
    x = np.random.default_rng(0).normal(size=(2, 3, 16)).astype(np.float32)
    float_out, q_out, q_vars = _serve(
      linears.Linear,
      x,
      dict(precision=precision, use_symmetric=use_symmetric, block_size=block_size),
      input_dims=16,
      output_dims=4,
    )
    w = q_vars["params"]["w"]
    expected_shape = {(4, 0): (2, 4), (8, 8): (2, 8, 4)}.get((precision, block_size), (16, 4))
    self.assertEqual(w.shape, expected_shape)  # int4 packs 8 rows into one int32
    self.assertEqual(w.dtype, jnp.int32 if precision == 4 else jnp.int8)
    tol = 0.05 if precision == 8 else 0.6
    np.testing.assert_allclose(q_out, float_out, atol=tol * np.abs(float_out).max())

  def test_einsum_layer_serves_int8_weights(self):
    # Pax's quantized Einsum has no quantize_weight: quantize w by hand (per output channel).
    x = np.random.default_rng(1).normal(size=(2, 8)).astype(np.float32)
    w = np.random.default_rng(2).normal(size=(8, 2, 3)).astype(np.float32)
    q, s, _ = operations.reduce_einsum_weight_precision(
      "bd,dnh->bnh", w, calculation_dtype=jnp.float32
    )
    layer = base_layer.instantiate(
      pax_fiddle.Config(
        einsum.Einsum,
        name="e",
        eqn="bd,dnh->bnh",
        w_shape=[8, 2, 3],
        quantization=_params(qh.QuantizationMode.INFERENCE),
      )
    )
    with base_layer.JaxContext.new_context():
      shapes = jax.tree.map(jnp.shape, layer.init(jax.random.PRNGKey(0), x))
      out = layer.apply({"params": {"w": q, "w_quantized_scale": s}}, x)
    self.assertEqual(shapes["params"]["w_quantized_scale"], (2, 3))
    expected = np.einsum("bd,dnh->bnh", x, w)
    np.testing.assert_allclose(out, expected, atol=0.05 * np.abs(expected).max())


if __name__ == "__main__":
  absltest.main()
