"""py_utils.maybe_unreplicate_for_fully_replicated / _first_shard: one copy of pmap-replicated data."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import py_utils


class UnreplicateTest(absltest.TestCase):
  def test_pmap_replicated_state_comes_back_as_one_copy(self):
    state = {"w": jnp.arange(6.0).reshape(2, 3), "step": jnp.array(3)}
    n = jax.local_device_count()
    replicated = jax.pmap(lambda t: t)(jax.tree.map(lambda a: jnp.stack([a] * n), state))
    self.assertEqual(replicated["w"].shape, (jax.local_device_count(), 2, 3))
    one = py_utils.maybe_unreplicate_for_fully_replicated(replicated)
    np.testing.assert_array_equal(one["w"], state["w"])
    np.testing.assert_array_equal(one["step"], 3)

  def test_pmap_outputs_first_shard(self):
    out = jax.pmap(lambda x: x * 2)(jnp.ones((jax.local_device_count(), 4)))
    np.testing.assert_array_equal(py_utils.maybe_unreplicate_for_first_shard(out), 2 * np.ones(4))

  def test_scalars_and_host_values_pass_through(self):
    data = {"s": jnp.array(1.5), "n": np.ones((2, 2)), "i": 7}
    out = py_utils.maybe_unreplicate_for_fully_replicated(data)
    self.assertEqual(float(out["s"]), 1.5)
    self.assertIs(out["n"], data["n"])
    self.assertEqual(out["i"], 7)


if __name__ == "__main__":
  absltest.main()
