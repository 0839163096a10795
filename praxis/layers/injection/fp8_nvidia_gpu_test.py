"""Tests for praxis.layers.injection.fp8_nvidia_gpu against numpy FP8 rounding (ml_dtypes):
the quantized forward pass, the delayed-scaling updates carried by the gradients, the gated op."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import linears
from praxis.layers.injection import fp8_nvidia_gpu

E4M3_MAX = 448.0


def np_qdq(x, scale, dtype=ml_dtypes.float8_e4m3fn, fmax=E4M3_MAX):
  """Quantize x / scale to FP8 (saturating) and back, in numpy."""
  q = np.clip(np.asarray(x, np.float32) / scale, -fmax, fmax).astype(dtype)
  return q.astype(np.float32) * scale


def linear(direct: bool, history: int = 4):
  return base_layer.instantiate(
    pax_fiddle.Config(
      linears.Linear,
      name="ffn",
      input_dims=8,
      output_dims=4,
      einsum_tpl=pax_fiddle.Config(
        fp8_nvidia_gpu.Fp8EinsumOp, use_direct_quant=direct, amax_history_length=history
      ),
    )
  )


class Fp8Test(parameterized.TestCase):
  @parameterized.parameters(True, False)
  def test_forward_is_fp8_rounded_and_scales_follow_history(self, direct):
    layer = linear(direct)
    x = np.random.RandomState(0).normal(size=(3, 8)).astype(np.float32) * 3
    variables = layer.init(jax.random.PRNGKey(0), x)
    fp8 = variables["params"]["einsum"]
    self.assertEqual(
      {k: v.shape for k, v in fp8.items()},
      {
        "input_amax_history": (4,),
        "kernel_amax_history": (4,),
        "output_grad_amax_history": (4,),
        "input_scale": (1,),
        "kernel_scale": (1,),
        "output_grad_scale": (1,),
      },
    )
    w = np.asarray(variables["params"]["w"])
    # Fresh history (all 0): the scale stays 1, so the forward pass is the e4m3-rounded einsum.
    np.testing.assert_allclose(
      layer.apply(variables, x), np_qdq(x, 1.0) @ np_qdq(w, 1.0), rtol=1e-5, atol=1e-5
    )
    # The "gradient" of each history is the history with this step's amax pushed in front.
    grads = jax.grad(lambda v: jnp.sum(layer.apply(v, x)))(variables)["params"]["einsum"]
    np.testing.assert_allclose(grads["input_amax_history"], [np.abs(x).max(), 0, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(grads["kernel_amax_history"], [np.abs(w).max(), 0, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(grads["output_grad_amax_history"], [1.0, 0, 0, 0])  # d sum / d y
    np.testing.assert_allclose(grads["input_scale"], [1.0])
    # A history whose max is 2 * 448 gives the input a scale of 2 in the next step.
    params = jax.tree.map(lambda v: v, variables["params"])
    params["einsum"]["input_amax_history"] = jnp.asarray([5.0, 2 * E4M3_MAX, 1.0, 0.0])
    y = layer.apply({"params": params}, x)
    np.testing.assert_allclose(y, np_qdq(x, 2.0) @ np_qdq(w, 1.0), rtol=1e-5, atol=1e-5)
    grads = jax.grad(lambda v: jnp.sum(layer.apply(v, x)))({"params": params})
    np.testing.assert_allclose(grads["params"]["einsum"]["input_scale"], [2.0], rtol=1e-6)

  @parameterized.parameters(True, False)
  def test_gated_op_matches_two_rounded_einsums(self, direct):
    op = base_layer.instantiate(
      pax_fiddle.Config(fp8_nvidia_gpu.Fp8EinsumGatedOp, name="op", use_direct_quant=direct)
    )
    rng = np.random.RandomState(1)
    x, k, kg = (rng.normal(size=s).astype(np.float32) for s in ((2, 3, 8), (8, 5), (8, 5)))
    variables = op.init(jax.random.PRNGKey(0), "...y,yz->...z", x, k, kg)
    self.assertIn("kernel_scale_gated", variables["params"])
    self.assertNotIn("input_scale_gated", variables["params"])
    y, y_gated = op.apply(variables, "...y,yz->...z", x, k, kg)
    np.testing.assert_allclose(y, np_qdq(x, 1.0) @ np_qdq(k, 1.0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_gated, np_qdq(x, 1.0) @ np_qdq(kg, 1.0), rtol=1e-5, atol=1e-5)

  def test_kernel_dtype_must_be_fprop_dtype(self):
    op = base_layer.instantiate(pax_fiddle.Config(fp8_nvidia_gpu.Fp8EinsumOp, name="op"))
    x, k = jnp.ones((2, 4)), jnp.ones((4, 3), jnp.bfloat16)
    with self.assertRaisesRegex(ValueError, "fprop_dtype"):
      op.init(jax.random.PRNGKey(0), "ab,bc->ac", x, k)


if __name__ == "__main__":
  absltest.main()
