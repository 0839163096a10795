"""Tests for `shared_weight_layer_id`: children with one id are one layer with one set of weights,
kept at the root under the id (Pax's layout). Reference: numpy, the layer applied twice."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import linears


class Twice(base_layer.BaseLayer):
  first_tpl: pax_fiddle.Config[base_layer.BaseLayer] = base_layer.template_field(None)
  second_tpl: pax_fiddle.Config[base_layer.BaseLayer] = base_layer.template_field(None)

  def setup(self):
    self.create_child("first", self.first_tpl)
    self.create_child("second", self.second_tpl)

  def __call__(self, x):
    return self.second(self.first(x))


class SharedLayersTest(absltest.TestCase):
  def _twice(self, sub):
    return pax_fiddle.build(
      pax_fiddle.Config(Twice, name="twice", first_tpl=sub.clone(), second_tpl=sub.clone())
    )

  def test_one_id_is_one_layer_at_the_root(self):
    sub = pax_fiddle.Config(
      linears.Linear, input_dims=3, output_dims=3, shared_weight_layer_id="proj"
    )
    layer = self._twice(sub)
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    self.assertEqual(jax.tree.map(jnp.shape, variables), {"params": {"proj": {"w": (3, 3)}}})
    w = np.asarray(variables["params"]["proj"]["w"])
    np.testing.assert_allclose(layer.apply(variables, x), x @ w @ w, rtol=1e-5)

  def test_different_configs_under_one_id_raise(self):
    first = pax_fiddle.Config(
      linears.Linear, input_dims=3, output_dims=3, shared_weight_layer_id="proj"
    )
    second = first.clone().set(output_dims=4)
    layer = pax_fiddle.build(pax_fiddle.Config(Twice, name="t", first_tpl=first, second_tpl=second))
    with self.assertRaisesRegex(ValueError, "same config"):
      layer.init(jax.random.PRNGKey(0), jnp.ones((1, 3)))

  def test_without_an_id_children_keep_their_own_weights(self):
    sub = pax_fiddle.Config(linears.Linear, input_dims=3, output_dims=3)
    variables = self._twice(sub).init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
    self.assertEqual(sorted(variables["params"]), ["first", "second"])


if __name__ == "__main__":
  absltest.main()
