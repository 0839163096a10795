"""Tests for praxis.layers.repeats (via StackedTransformerRepeated); helpers for checkpoint_policy_test.

The reference is the unrolled StackedTransformer holding the same weights, copied slice by slice
from the repeated stack's [x_times, ...] weights.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis.layers import checkpoint_policy as cp
from praxis.layers import transformers

B, T, D, N, H, F = 2, 5, 8, 2, 3, 16
X_TIMES, BLOCK_LAYERS = 2, 2


def block_config(block_layers=BLOCK_LAYERS, **overrides):
  return transformers.StackedTransformer.HParams(
    num_layers=block_layers, model_dims=D, hidden_dims=F, num_heads=N, dim_per_head=H, **overrides
  )


def repeated(policy=cp.AutodiffCheckpointType.SAVE_NOTHING, block_layers=BLOCK_LAYERS, **overrides):
  return transformers.StackedTransformerRepeated.HParams(
    block=block_config(block_layers, **overrides), x_times=X_TIMES, checkpoint_policy=policy
  ).Instantiate()


def unrolled(block_layers=BLOCK_LAYERS, **overrides):
  return block_config(**overrides).set(num_layers=X_TIMES * block_layers).Instantiate()


def unbox(tree):
  return jax.tree.map(
    lambda a: a.value if hasattr(a, "value") else a, tree, is_leaf=lambda a: hasattr(a, "value")
  )


def to_unrolled(rep_params, block_layers=BLOCK_LAYERS):
  """repeat.sub.x_layers_j[i] -> x_layers_{i * block_layers + j}."""
  sub = rep_params["repeat"]["sub"]
  out = {}
  for i in range(X_TIMES):
    for j in range(block_layers):
      out[f"x_layers_{i * block_layers + j}"] = jax.tree.map(lambda a: a[i], sub[f"x_layers_{j}"])
  return out


def inputs():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
  pad = jnp.asarray(np.array([[0, 0, 0, 0, 1], [0] * T]), jnp.float32)
  ct = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
  return x, pad, ct


def randomized_params(layer, x, pad):
  params = unbox(layer.init(jax.random.key(0), x, pad)["params"])
  leaves, treedef = jax.tree.flatten(params)
  rng = np.random.default_rng(1)
  return jax.tree.unflatten(
    treedef, [jnp.asarray(rng.normal(size=l.shape) * 0.5, l.dtype) for l in leaves]
  )


class RepeatTest(parameterized.TestCase):
  def test_weights_carry_the_layers_axis(self):
    x, pad, _ = inputs()
    boxed = base_layer.init_boxed(repeated(), jax.random.key(0), x, pad)["params"]
    w = boxed["repeat"]["sub"]["x_layers_1"]["self_attention"]["query"]["w"]
    self.assertEqual(w.names, ("layers", "embed", "heads", "kv"))
    self.assertEqual(w.value.shape, (X_TIMES, D, N, H))
    # Each iteration has its own initial weights (the "params" rng is split per iteration).
    self.assertGreater(float(jnp.max(jnp.abs(w.value[0] - w.value[1]))), 1e-3)

  def test_equals_unrolled_outputs_and_gradients(self):
    x, pad, ct = inputs()
    rep, unr = repeated(), unrolled()
    params = randomized_params(rep, x, pad)
    unr_params = to_unrolled(params)
    self.assertEqual(
      jax.tree.map(jnp.shape, unr_params), jax.tree.map(jnp.shape, randomized_params(unr, x, pad))
    )
    np.testing.assert_allclose(
      rep.apply({"params": params}, x, pad),
      unr.apply({"params": unr_params}, x, pad),
      rtol=1e-5,
      atol=1e-5,
    )
    g_rep = jax.grad(lambda p, x: jnp.sum(rep.apply({"params": p}, x, pad) * ct), argnums=(0, 1))(
      params, x
    )
    g_unr = jax.grad(lambda p, x: jnp.sum(unr.apply({"params": p}, x, pad) * ct), argnums=(0, 1))(
      unr_params, x
    )
    np.testing.assert_allclose(g_rep[1], g_unr[1], rtol=1e-4, atol=1e-5)
    # The scan sums the weight gradients in another order than the unrolled stack: on an AMD
    # EPYC host one of them differed by 2.1e-5 (2.1e-4 relative) where an Intel host met 1e-5.
    jax.tree.map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4),
      to_unrolled(g_rep[0]),
      g_unr[0],
    )

  def test_dropout_runs_per_iteration_only_when_not_deterministic(self):
    x, pad, _ = inputs()
    rep = repeated(residual_dropout_prob=0.5)
    params = randomized_params(rep, x, pad)
    eval_a = rep.apply({"params": params}, x, pad)
    np.testing.assert_array_equal(eval_a, rep.apply({"params": params}, x, pad))
    train = rep.apply(
      {"params": params}, x, pad, deterministic=False, rngs={"dropout": jax.random.key(3)}
    )
    self.assertGreater(float(jnp.max(jnp.abs(train - eval_a))), 1e-2)


if __name__ == "__main__":
  absltest.main()
