"""tpmap argument types, replica tools, process gathering (4 fake CPU devices)."""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=4")

from unittest import mock  # pylint: disable=g-import-not-at-top

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from paxml.toolkit import pmap_utils


class TPmapTest(absltest.TestCase):

  def test_each_argtype(self):
    def f(scale, thru, bcast, shard, rng):
      return (scale * shard.sum() + thru + bcast.sum(),
              jax.lax.axis_index("i"), rng)

    g = pmap_utils.tpmap(f, "i", ["static", "thru", "broadcast", "shard", "rng"])
    x = np.arange(8.0)
    total, index, keys = g(2.0, jnp.arange(4.0) * 100, np.ones(3), x, jax.random.PRNGKey(0))
    want = [2.0 * x[2 * d:2 * d + 2].sum() + 100 * d + 3 for d in range(4)]
    np.testing.assert_allclose(total, want)
    np.testing.assert_array_equal(index, [0, 1, 2, 3])
    self.assertEqual(len({tuple(np.asarray(jax.random.key_data(k) if
                                            jnp.issubdtype(k.dtype, jax.dtypes.prng_key)
                                            else k).ravel()) for k in keys}), 4)

  def test_kwargs_and_wrap_return(self):
    g = pmap_utils.tpmap(lambda a, *, b: a.sum() + b, "i", ["shard"], {"b": "broadcast"},
                         wrap_return=lambda out: out.sum())
    self.assertEqual(float(g(np.ones(8), b=1.0)), 8 + 4)

  def test_teaching_errors(self):
    g = pmap_utils.tpmap(lambda a: a, "i", ["shard"])
    with self.assertRaisesRegex(TypeError, "one argtype per positional"):
      g(np.ones(4), np.ones(4))
    with self.assertRaisesRegex(TypeError, "kwargtypes"):
      g(np.ones(4), extra=1)
    with self.assertRaisesRegex(ValueError, "multiple of # of devices"):
      g(np.ones(6))
    with self.assertRaisesRegex(ValueError, "Unknown argtype 'shrad'"):
      pmap_utils.tpmap(lambda a: a, "i", ["shrad"])
    with self.assertRaisesRegex(ValueError, "positionally"):
      pmap_utils.tpmap(lambda a: a, "i", [], {"a": "static"})


class ReplicaTest(absltest.TestCase):

  def test_replicate_unshard_and_integrity(self):
    tree = {"w": jnp.arange(3.0)}
    replicated = pmap_utils.replicate(tree)
    self.assertEqual(replicated["w"].shape, (4, 3))
    self.assertLen(pmap_utils.unshard(replicated), 4)
    pmap_utils.assert_replica_integrity(replicated)
    broken = {"w": replicated["w"].at[2, 1].add(1.0)}
    with self.assertRaisesRegex(AssertionError, r"Replica 2 of /w"):
      pmap_utils.assert_replica_integrity(broken)
    pmap_utils.assert_replica_integrity(broken, atol=1.5)

  def test_gather_from_processes_single_and_patched_multi(self):
    got = pmap_utils.gather_from_jax_processes({"a": np.array([1, 2])})
    self.assertEqual(got["a"].shape, (1, 2))
    with mock.patch.object(jax, "process_count", return_value=2), \
        mock.patch.object(pmap_utils.multihost_utils, "process_allgather",
                          side_effect=lambda t: jax.tree.map(lambda x: np.stack([x, x + 1]), t)):
      got = pmap_utils.gather_from_jax_processes({"a": np.array([1, 2])})
    np.testing.assert_array_equal(got["a"], [[1, 2], [2, 3]])


if __name__ == "__main__":
  absltest.main()
