"""Prefix vectorization: a stacked variable is optimized as its separate layers."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

from praxis import optimizer_prefix_vectorization as opt_vec
from praxis import pytypes
from praxis import weight_hparams as wh


def _per_tensor_normalize():
  """Divides each tensor's update by its RMS (a reduction over the whole tensor)."""

  def init(params):
    return optax.EmptyState()

  def update(updates, state, params=None):
    del params
    return jax.tree.map(lambda u: u / jnp.sqrt(jnp.mean(u * u)), updates), state

  return optax.GradientTransformationExtraArgs(init, update)


class PrefixVectorizationTest(absltest.TestCase):
  def test_stacked_layers_are_normalized_one_by_one(self):
    stacked = wh.WeightHParams(shape=[3], repeat_prefix=[2], repeat_prefix_split_dims_mapping=[-1])
    plain = wh.WeightHParams(shape=[2, 3])
    hps = pytypes.NestedMap(stack=stacked, plain=plain)
    g = np.arange(1.0, 7.0, dtype=np.float32).reshape(2, 3)
    grads = pytypes.NestedMap(stack=jnp.asarray(g), plain=jnp.asarray(g))
    tx = opt_vec.get_transformations_with_vectorized_repeat_prefix(_per_tensor_normalize(), hps)
    state = tx.init(grads)
    self.assertEqual(sorted(state.keys()), ["no_prefix", "p#2#i-1"])
    updates, _ = tx.update(grads, state, grads)
    rms_rows = np.sqrt(np.mean(g * g, axis=1, keepdims=True))  # one per layer
    np.testing.assert_allclose(updates.stack, g / rms_rows, rtol=1e-6)
    np.testing.assert_allclose(updates.plain, g / np.sqrt(np.mean(g * g)), rtol=1e-6)

  def test_without_prefixes_the_state_is_the_inner_one(self):
    hps = {"w": wh.WeightHParams(shape=[2])}
    tx = opt_vec.get_transformations_with_vectorized_repeat_prefix(optax.trace(0.5), hps)
    params = {"w": jnp.ones([2])}
    state = tx.init(params)
    self.assertIsInstance(state, optax.TraceState)
    specs = opt_vec.partition_params(tx, hps, state)
    self.assertIs(specs.trace["w"], hps["w"])

  def test_key_encoding_round_trips(self):
    hp = wh.WeightHParams(
      shape=[], repeat_prefix=[2, 2], repeat_prefix_split_dims_mapping=[("data", "mdl"), None]
    )
    key = opt_vec._prefix_key(hp, "#")
    self.assertEqual(key, "p#2.2#tsdata,smdl.")
    self.assertEqual(opt_vec._parse_key(key, "#"), ([2, 2], [("data", "mdl"), None], None))


if __name__ == "__main__":
  absltest.main()
