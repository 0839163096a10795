"""Tests for praxis.layers.activations against numpy formulas and their hand-derived derivatives."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_hyperparams
from praxis.layers import activations

_erf = np.vectorize(math.erf)


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _phi(x):  # standard normal density
  return np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)


def _gelu_tanh(x):
  c = np.sqrt(2.0 / np.pi)
  return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x**3)))


def _gelu_tanh_grad(x):
  c = np.sqrt(2.0 / np.pi)
  u = c * (x + 0.044715 * x**3)
  t = np.tanh(u)
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x)


# name -> (config, f(x), f'(x)), all written independently of jax.nn.
_CASES = {
  "identity": (activations.Identity.HParams(), lambda x: x, np.ones_like),
  "relu": (activations.ReLU.HParams(), lambda x: np.maximum(x, 0), lambda x: (x > 0) * 1.0),
  "relu6": (
    activations.ReLU6.HParams(),
    lambda x: np.clip(x, 0, 6),
    lambda x: ((x > 0) & (x < 6)) * 1.0,
  ),
  "squared_relu": (
    activations.SquaredReLU.HParams(),
    lambda x: np.maximum(x, 0) ** 2,
    lambda x: 2 * np.maximum(x, 0),
  ),
  "leaky_relu": (
    activations.LeakyReLU.HParams(negative_slope=0.2),
    lambda x: np.where(x >= 0, x, 0.2 * x),
    lambda x: np.where(x >= 0, 1.0, 0.2),
  ),
  "elu": (
    activations.ELU.HParams(alpha=1.5),
    lambda x: np.where(x > 0, x, 1.5 * np.expm1(x)),
    lambda x: np.where(x > 0, 1.0, 1.5 * np.exp(x)),
  ),
  "gelu_exact": (
    activations.GELU.HParams(approximate=False),
    lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
    lambda x: 0.5 * (1 + _erf(x / np.sqrt(2))) + x * _phi(x),
  ),
  "gelu_tanh": (activations.GELU.HParams(approximate=True), _gelu_tanh, _gelu_tanh_grad),
  "silu": (
    activations.SiLU.HParams(),
    lambda x: x * _sigmoid(x),
    lambda x: _sigmoid(x) * (1 + x * (1 - _sigmoid(x))),
  ),
  "swish_beta2": (
    activations.Swish.HParams(beta=2.0),
    lambda x: x * _sigmoid(2 * x),
    lambda x: _sigmoid(2 * x) * (1 + 2 * x * (1 - _sigmoid(2 * x))),
  ),
  "sigmoid": (activations.Sigmoid.HParams(), _sigmoid, lambda x: _sigmoid(x) * (1 - _sigmoid(x))),
  "tanh": (activations.Tanh.HParams(), np.tanh, lambda x: 1 - np.tanh(x) ** 2),
  "softplus": (activations.Softplus.HParams(), lambda x: np.log1p(np.exp(x)), _sigmoid),
}


class ActivationsTest(parameterized.TestCase):
  @parameterized.named_parameters(*[(name, name) for name in _CASES])
  def test_forward_and_gradient_match_numpy(self, name):
    cfg, f, df = _CASES[name]
    layer = cfg.Instantiate()
    # Avoid the kinks (0 for relu-likes, 6 for relu6) where the derivative is ambiguous.
    x = np.random.RandomState(0).uniform(-8, 8, size=(3, 5, 7)).astype(np.float64)
    x = np.where(np.abs(x) < 1e-2, 0.5, x)
    x = np.where(np.abs(x - 6) < 1e-2, 5.5, x)
    variables = layer.init(jax.random.key(0), jnp.asarray(x, jnp.float32))
    self.assertEqual(jax.tree_util.tree_leaves(variables), [])  # no weights
    out = layer.apply(variables, jnp.asarray(x, jnp.float32))
    self.assertEqual(out.shape, x.shape)
    np.testing.assert_allclose(np.asarray(out), f(x), rtol=1e-5, atol=1e-5)
    grad = jax.grad(lambda v: jnp.sum(layer.apply(variables, v)))(jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(np.asarray(grad), df(x), rtol=1e-4, atol=1e-5)

  def test_gelu_variants_differ(self):
    # A layer that ignored `approximate` would pass one of the numpy checks above and fail here.
    x = jnp.linspace(-3, 3, 101)
    exact = activations.GELU.HParams(approximate=False).Instantiate().apply({}, x)
    approx = activations.GELU.HParams(approximate=True).Instantiate().apply({}, x)
    self.assertGreater(float(jnp.max(jnp.abs(exact - approx))), 1e-4)

  def test_keeps_bfloat16(self):
    x = jnp.linspace(-2, 2, 8, dtype=jnp.bfloat16)
    for name, (cfg, _, _) in _CASES.items():
      with self.subTest(name):
        self.assertEqual(cfg.Instantiate().apply({}, x).dtype, jnp.bfloat16)

  def test_lookup_by_name_and_unknown_name_lists_known(self):
    cfg = activations.activation_config("GELU", approximate=False)
    self.assertIsInstance(cfg, base_hyperparams.Config)
    self.assertIs(cfg.__fn_or_cls__, activations.GELU)
    self.assertFalse(cfg.approximate)
    with self.assertRaisesRegex(ValueError, r"'gleu'.*'gelu'.*'relu'"):
      activations.activation_config("gleu")
    # Pax's lookup.
    self.assertIs(
      activations.BaseActivation.get_subclass_by_name("Squared_ReLU"), activations.SquaredReLU
    )
    with self.assertRaisesRegex(KeyError, "0 activation layers named 'gleu'"):
      activations.BaseActivation.get_subclass_by_name("gleu")

  def test_pax_extra_activations(self):
    x = np.linspace(-2, 2, 9).astype(np.float32)
    for cls, expected in (
      (activations.CubedReLU, np.maximum(x, 0) ** 3),
      (activations.SineReLU, np.sin(np.maximum(x, 0))),
      (activations.Exp, np.exp(x)),
    ):
      np.testing.assert_allclose(
        cls.HParams().Instantiate().apply({}, jnp.asarray(x)),
        expected,
        rtol=1e-6,
        err_msg=cls.__name__,
      )


if __name__ == "__main__":
  absltest.main()
