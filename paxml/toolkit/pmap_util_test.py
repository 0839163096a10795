"""Tests for pmap_util on 4 fake CPU devices."""

import os

os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
)

from absl.testing import absltest  # pylint: disable=g-import-not-at-top
import flax.jax_utils
import jax
import jax.numpy as jnp
import numpy as np

from paxml.toolkit import pmap_util


class TpmapTest(absltest.TestCase):
  def test_argtypes(self):
    def f(static, thru, bcast, shard, rng):
      return static * thru + bcast + shard.sum(), rng

    g = pmap_util.tpmap(f, "i", ["static", "thru", "broadcast", "shard", "rng"])
    out, keys = g(2, jnp.arange(4.0), 10.0, jnp.arange(8.0), jax.random.PRNGKey(0))
    # Device d gets thru[d], shard rows 2d and 2d + 1.
    np.testing.assert_allclose(out, [2 * d + 10 + (4 * d + 1) for d in range(4)])
    self.assertLen({tuple(np.asarray(k).ravel()) for k in keys}, 4)  # distinct keys

  def test_errors(self):
    g = pmap_util.tpmap(lambda a: a, "i", ["shard"])
    with self.assertRaisesRegex(ValueError, "multiple of # of devices"):
      g(jnp.arange(6.0))
    with self.assertRaisesRegex(ValueError, "argtypes"):
      g(jnp.arange(4.0), jnp.arange(4.0))
    with self.assertRaisesRegex(ValueError, "Unknown argtype"):
      pmap_util.tpmap(lambda a: a, "i", ["shrad"])
    with self.assertRaisesRegex(ValueError, "positional"):
      pmap_util.tpmap(lambda a: a, "i", [], {"a": "static"})


class ReplicaToolsTest(absltest.TestCase):
  def test_unshard_gather_and_integrity(self):
    tree = {"w": jnp.arange(3.0)}
    replicated = flax.jax_utils.replicate(tree)
    self.assertLen(pmap_util.unshard(replicated), 4)
    gathered = pmap_util.gather_from_jax_processes({"a": np.array([1, 2])})
    self.assertIsInstance(gathered, list)  # one tree per process
    self.assertLen(gathered, 1)
    np.testing.assert_array_equal(gathered[0]["a"], [1, 2])
    pmap_util.assert_replica_integrity(replicated)
    broken = {"w": replicated["w"].at[2].add(1.0)}
    with self.assertRaisesRegex(AssertionError, "2-th replica of /w"):
      pmap_util.assert_replica_integrity(broken)
    pmap_util.assert_replica_integrity(broken, atol=1.5)

  def test_unreplicate_takes_row_zero_however_the_axis_is_laid_out(self):
    tree = {"w": jnp.arange(3.0), "step": jnp.int32(5)}
    sharded = jax.pmap(lambda t: t)(flax.jax_utils.replicate(tree))
    # A jit output keeps the device axis but is not sharded over devices (as
    # under chex's fake pmap); flax's unreplicate returned it whole.
    unsharded = jax.jit(lambda t: jax.tree.map(lambda x: jnp.stack([x] * 4), t))(tree)
    self.assertTrue(unsharded["w"].sharding.is_fully_replicated)
    for replicated in (sharded, unsharded):
      got = pmap_util.unreplicate(replicated)
      self.assertEqual(got["w"].shape, (3,))
      np.testing.assert_array_equal(got["w"], [0.0, 1.0, 2.0])
      self.assertEqual(int(got["step"]), 5)


if __name__ == "__main__":
  absltest.main()
