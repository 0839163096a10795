"""Tests of remove_sharding on a config of praxis layers."""

from absl.testing import absltest
import fiddle as fdl

from paxml.tools.fiddle import remove_sharding
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import linears


def _config():
  config = pax_fiddle.Config(linears.FeedForward, input_dims=4, output_dims=8)
  config.weight_split_dims_mapping.wt = ["data", "mdl"]
  config.activation_split_dims_mapping.out = ["data", None]
  return config


class RemoveShardingTest(absltest.TestCase):
  def test_unsets_the_fields(self):
    removed = remove_sharding.remove_sharding(_config())
    arguments = fdl.ordered_arguments(removed)
    self.assertNotIn("weight_split_dims_mapping", arguments)
    self.assertNotIn("activation_split_dims_mapping", arguments)
    self.assertEqual((removed.input_dims, removed.output_dims), (4, 8))
    # The input config is not changed.
    self.assertEqual(_config().weight_split_dims_mapping.wt, ["data", "mdl"])

  def test_replace_with_default_and_nested_sharding_configs(self):
    replaced = remove_sharding.remove_sharding(_config(), replace_with_default=True)
    self.assertIsNone(replaced.weight_split_dims_mapping.wt)
    sharding = pax_fiddle.Config(base_layer.BaseLayer.WeightSharding, wt=["x"])
    self.assertEqual(
      remove_sharding.remove_sharding({"s": sharding, "k": 1}),
      {"k": 1}
      | {
        "s": remove_sharding._REMOVED  # pylint: disable=protected-access
      },
    )
    # Built, the defaulted config works as a layer with no sharding.
    layer = pax_fiddle.build(replaced)
    self.assertIsNone(layer.weight_split_dims_mapping.wt)


if __name__ == "__main__":
  absltest.main()
