"""Einsum: its weights' shapes and fan axes, and its output against numpy.einsum."""

from absl.testing import absltest
import jax
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import einsum


def _layer(**kwargs):
  return base_layer.instantiate(pax_fiddle.Config(einsum.Einsum, name="e", **kwargs))


class EinsumTest(absltest.TestCase):
  def test_output_matches_numpy_with_bias(self):
    layer = _layer(eqn="btd,dnh->btnh", w_shape=[4, 2, 3], use_bias=True)
    x = np.random.default_rng(0).normal(size=(2, 5, 4)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    self.assertEqual(variables["params"]["b"].shape, (2, 3))
    variables["params"]["b"] = np.ones((2, 3), np.float32)
    out = layer.apply(variables, x)
    expected = np.einsum("btd,dnh->btnh", x, variables["params"]["w"]) + 1.0
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)

  def test_fan_axes_come_from_the_equation(self):
    layer = _layer(eqn="...nh,hdn->...d", w_shape=[3, 4, 2])
    meta = layer.abstract_init_with_metadata(np.zeros((2, 2, 3), np.float32))
    hp = meta["params"]["w"]
    self.assertEqual(list(hp.fan_in_axes), [0, 2])  # h and n are contracted
    self.assertEqual(list(hp.fan_out_axes), [1])

  def test_bias_dims_must_come_last(self):
    layer = _layer(eqn="bd,dn->nb", w_shape=[4, 2], use_bias=True)
    with self.assertRaisesRegex(ValueError, "must come last"):
      layer.init(jax.random.PRNGKey(0), np.zeros((3, 4), np.float32))


if __name__ == "__main__":
  absltest.main()
