"""Tests of unshare_sharding: shared sharding lists become separate copies, nothing else."""

from absl.testing import absltest

from paxml.tools.fiddle import unshare_sharding
from praxis import pax_fiddle
from praxis.layers import linears


class UnshareShardingTest(absltest.TestCase):
  def test_shared_sharding_is_copied_other_sharing_kept(self):
    wt = ["data", "mdl"]
    shared_dims = pax_fiddle.Config(linears.Linear, input_dims=2, output_dims=3)
    layers = [pax_fiddle.Config(linears.FeedForward, input_dims=2, output_dims=3) for _ in range(2)]
    for layer in layers:
      layer.weight_split_dims_mapping.wt = wt
    config = {"layers": layers, "a": shared_dims, "b": shared_dims}
    out = unshare_sharding.unshare_sharding(config)
    first, second = (l.weight_split_dims_mapping.wt for l in out["layers"])
    self.assertEqual(first, wt)
    self.assertEqual(second, wt)
    self.assertIsNot(first, second)
    self.assertIs(out["a"], out["b"])  # Not a sharding annotation: still shared.

  def test_deep_copy_unshares(self):
    inner = [1, 2]
    copied = unshare_sharding._deep_copy([inner, inner])  # pylint: disable=protected-access
    self.assertEqual(copied, [[1, 2], [1, 2]])
    self.assertIsNot(copied[0], copied[1])


if __name__ == "__main__":
  absltest.main()
