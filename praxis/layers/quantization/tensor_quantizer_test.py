"""TensorQuantizer against numpy (scale / rounding formulas) and through aqt_einsum."""

from absl.testing import absltest
import jax
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantizer


def _quantizer(**kwargs):
  return base_layer.instantiate(pax_fiddle.Config(quantizer.TensorQuantizer, name="tq", **kwargs))


def _quantize(tq, x, dims, **kwargs):
  with base_layer.JaxContext.new_context():
    variables = tq.init(jax.random.PRNGKey(0))
    return tq.apply(variables, x, dims, method=tq.quantize, **kwargs)


class TensorQuantizerTest(absltest.TestCase):
  def test_symmetric_matches_numpy(self):
    x = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    q, s, zp = _quantize(_quantizer(precision=8, add_scale_eps=False), x, [0])
    scale = np.abs(x).max(0) / 127.0
    np.testing.assert_allclose(s, scale, rtol=1e-6)
    np.testing.assert_array_equal(q, np.clip(np.floor(x / scale + 0.5), -128, 127))
    self.assertIsNone(zp)

  def test_asymmetric_round_trip(self):
    x = np.random.default_rng(1).uniform(1.0, 2.0, size=(16, 3)).astype(np.float32)
    tq = _quantizer(precision=8, use_symmetric=False)
    q, s, zp = _quantize(tq, x, [0], squeeze_scale=False)
    np.testing.assert_allclose(q * s - zp, x, atol=float(np.max(s)))

  def test_clipping_search_error_not_worse_than_hard_bound(self):
    x = np.random.default_rng(2).standard_t(2, size=(256, 1)).astype(np.float32)
    hard = _quantizer(precision=4)
    searched = _quantizer(precision=4, min_clipping=0.5, num_optimize_clipping=6)
    errs = []
    for tq in (hard, searched):
      q, s, _ = _quantize(tq, x, [0], squeeze_scale=False)
      errs.append(np.abs(q * s - x).sum())
    self.assertLessEqual(errs[1], errs[0] + 1e-4)

  def test_aqt_einsum_close_to_float(self):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 16)).astype(np.float32)
    w = rng.normal(size=(16, 5)).astype(np.float32)
    act, wq = _quantizer(precision=8), _quantizer(precision=8)

    def run(x, w):
      return operations.aqt_einsum("ab,bc->ac", x, w, lhs_quantizer=act, rhs_quantizer=wq)

    with base_layer.JaxContext.new_context():
      out = jax.jit(lambda x, w: act.apply({}, x, w, method=lambda _, a, b: run(a, b)))(x, w)
    np.testing.assert_allclose(out, x @ w, atol=0.15)
    self.assertFalse(np.allclose(out, x @ w, atol=1e-6))  # it did quantize


if __name__ == "__main__":
  absltest.main()
