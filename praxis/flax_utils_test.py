"""Tests for praxis.flax_utils on a plain Flax module's variables."""

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import flax_utils


class FlaxUtilsTest(absltest.TestCase):
  def test_boxes_carry_trainability_and_shapes(self):
    model = nn.Sequential([nn.Dense(3), nn.BatchNorm(use_running_average=True)])
    variables = model.init(jax.random.PRNGKey(0), jnp.ones((2, 4)))
    boxed = flax_utils.convert_to_boxed_params(variables)
    kernel = boxed["params"]["layers_0"]["kernel"]
    self.assertIsInstance(kernel, base_layer.BoxedParam)
    self.assertEqual(tuple(kernel.meta.shape), (4, 3))
    self.assertFalse(base_layer.var_not_trainable(kernel.meta))
    mean = boxed["batch_stats"]["layers_1"]["mean"]
    self.assertTrue(base_layer.var_not_trainable(mean.meta))
    self.assertTrue(base_layer.var_requires_mean_sync(mean.meta))
    np.testing.assert_array_equal(kernel.value, variables["params"]["layers_0"]["kernel"])

  def test_praxis_weight_boxes_pass_through(self):
    # A praxis layer inside the Flax module boxes its own weights (WeightBox): they keep that
    # box, so unboxing once gives plain arrays again.
    inner = base_layer.WeightBox(jnp.ones((2,)), names=(None,))
    boxed = flax_utils.convert_to_boxed_params({"params": {"pax_bn": {"beta": inner}}})
    self.assertIs(boxed["params"]["pax_bn"]["beta"], inner)
    plain = base_layer.maybe_unbox_value(boxed)
    self.assertIsInstance(plain["params"]["pax_bn"]["beta"], jax.Array)

  def test_summaries_unpack_and_repack(self):
    tree = {"loss": jnp.arange(6.0).reshape(3, 2)}
    unpacked = flax_utils.maybe_unpack_summary(tree, True, 3)
    self.assertLen(unpacked["loss"], 3)
    self.assertEqual(unpacked["loss"][1].shape, (1, 2))
    repacked = flax_utils.maybe_repack_summary(unpacked, True, 3)
    self.assertEqual(repacked["loss"].shape, (3, 1, 2))
    self.assertIs(flax_utils.maybe_unpack_summary(tree, False, 3), tree)


if __name__ == "__main__":
  absltest.main()
