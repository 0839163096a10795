"""Tests for praxis.base_layer: weights with logical axes, children, initialisers."""

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_hyperparams
from praxis import base_layer


class Proj(base_layer.BaseLayer):
  input_dims: int = 0
  output_dims: int = 0

  def setup(self):
    self.w = self.create_variable("w", (self.input_dims, self.output_dims), ("embed", "mlp"))

  def __call__(self, x):
    self.add_summary("x_mean", jnp.mean(x))
    return self.maybe_shard(jnp.einsum("bd,df->bf", x.astype(self.compute_dtype),
                                       self.w.astype(self.compute_dtype)),
                            ("batch", "mlp"))


class Outer(base_layer.BaseLayer):
  dims: int = 0
  proj_tpl: base_hyperparams.Config = base_hyperparams.template_field(Proj)

  def setup(self):
    self.proj = self.create_child(self.proj_tpl, input_dims=self.dims, output_dims=2 * self.dims)

  def __call__(self, x):
    return self.proj(x)


class BaseLayerTest(absltest.TestCase):

  def test_weights_carry_logical_axes_and_children_inherit_dtypes(self):
    layer = Outer.HParams(dims=3, dtype=jnp.float32, fprop_dtype=jnp.bfloat16).Instantiate()
    variables = layer.init(jax.random.key(0), jnp.ones((2, 3)))
    boxed = variables["params"]["proj"]["w"]
    self.assertEqual(boxed.names, ("embed", "mlp"))
    self.assertEqual(boxed.value.shape, (3, 6))
    out, mutated = layer.apply(variables, jnp.ones((2, 3)), mutable=[base_layer.SUMMARIES])
    self.assertEqual(out.dtype, jnp.bfloat16)  # the child inherited fprop_dtype
    self.assertEqual(float(mutated[base_layer.SUMMARIES]["proj"]["x_mean"][0]), 1.0)
    # The template on the config is untouched by create_child's overrides.
    self.assertEqual(layer.proj_tpl.input_dims, 0)

  def test_wrong_number_of_axes_is_reported(self):

    class Bad(base_layer.BaseLayer):

      @nn.compact
      def __call__(self, x):
        return x * self.create_variable("w", (2, 2), ("embed",))

    with self.assertRaisesRegex(ValueError, r"1 logical axes \('embed',\) for a weight of rank 2"):
      Bad().init(jax.random.key(0), jnp.ones((2, 2)))

  def test_initializer_scales_follow_fan_in_and_out(self):
    key = jax.random.key(1)
    xavier = base_layer.WeightInit.Xavier().initializer(600, 200)(key, (600, 200), jnp.float32)
    limit = np.sqrt(6.0 / 800)
    self.assertLessEqual(float(jnp.max(jnp.abs(xavier))), limit)
    self.assertGreater(float(jnp.max(jnp.abs(xavier))), 0.95 * limit)
    fanin = base_layer.WeightInit.GaussianSqrtFanIn(2.0).initializer(400, 300)(
        key, (400, 300), jnp.float32)
    self.assertAlmostEqual(float(jnp.std(fanin)), 2.0 / 20.0, delta=0.003)
    with self.assertRaisesRegex(ValueError, "not one of"):
      base_layer.WeightInit("glorot")


if __name__ == "__main__":
  absltest.main()
