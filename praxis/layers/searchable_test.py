"""AutoMLSelect: every branch's weights exist; the stored decision picks the branch."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import linears
from praxis.layers import searchable


class AutoMLSelectTest(absltest.TestCase):
  def test_decision_selects_the_branch(self):
    branches = [
      pax_fiddle.Config(linears.Linear, input_dims=3, output_dims=2),
      pax_fiddle.Config(linears.Linear, input_dims=3, output_dims=2),
    ]
    layer = base_layer.instantiate(
      pax_fiddle.Config(searchable.AutoMLSelect, name="s", search_options_tpl=branches)
    )
    x = jnp.arange(6.0).reshape(2, 3)
    variables = layer.init(jax.random.PRNGKey(0), x)
    self.assertEqual(set(variables["params"]), {"search_options_0", "search_options_1"})
    self.assertEqual(variables["non_trainable"]["decision"].dtype, jnp.uint8)
    for choice in (0, 1):
      variables["non_trainable"]["decision"] = jnp.uint8(choice)
      w = variables["params"][f"search_options_{choice}"]["w"]
      np.testing.assert_allclose(layer.apply(variables, x), x @ w, rtol=1e-5)

  def test_needs_a_branch(self):
    layer = base_layer.instantiate(pax_fiddle.Config(searchable.AutoMLSelect, name="s"))
    with self.assertRaisesRegex(AttributeError, "at least one branch"):
      layer.init(jax.random.PRNGKey(0), jnp.ones((1, 3)))


if __name__ == "__main__":
  absltest.main()
