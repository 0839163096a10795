"""Tests for flax_compat: flax's TrainState takes params that are not a dict."""

from absl.testing import absltest
import flax.training.train_state
import jax.numpy as jnp
import numpy as np
import optax

from paxml.toolkit import flax_compat

TrainState = flax.training.train_state.TrainState


class FlaxCompatTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    flax_compat.install()
    flax_compat.install()  # A second install must not wrap twice.

  def test_none_params_make_a_step_only_state(self):
    state = TrainState.create(apply_fn=None, params=None, tx=optax.identity())
    self.assertIsNone(state.params)
    self.assertEqual(int(state.step), 0)
    self.assertEqual(int(state.replace(step=7).step), 7)

  def test_tuple_params_are_trained_like_any_tree(self):
    state = TrainState.create(
      apply_fn=None, params=(jnp.ones(2), jnp.float32(3.0)), tx=optax.sgd(0.5)
    )
    state = state.apply_gradients(grads=(jnp.full(2, 2.0), jnp.float32(4.0)))
    self.assertEqual(int(state.step), 1)
    np.testing.assert_allclose(state.params[0], [0.0, 0.0])
    np.testing.assert_allclose(state.params[1], 1.0)

  def test_array_params_are_trained(self):
    state = TrainState.create(apply_fn=None, params=jnp.ones(3), tx=optax.sgd(1.0))
    state = state.apply_gradients(grads=jnp.full(3, 0.25))
    np.testing.assert_allclose(state.params, [0.75] * 3)

  def test_dict_params_still_go_through_flax(self):
    # flax keeps the fp8 collection out of the optimizer: proof it is flax's path.
    params = {"params": {"w": jnp.ones(2)}, "_overwrite_with_gradient": {"s": jnp.zeros(1)}}
    state = TrainState.create(apply_fn=None, params=params, tx=optax.sgd(1.0))
    grads = {"params": {"w": jnp.ones(2)}, "_overwrite_with_gradient": {"s": jnp.full(1, 5.0)}}
    state = state.apply_gradients(grads=grads)
    np.testing.assert_allclose(state.params["params"]["w"], [0.0, 0.0])
    np.testing.assert_allclose(state.params["_overwrite_with_gradient"]["s"], [5.0])


if __name__ == "__main__":
  absltest.main()
