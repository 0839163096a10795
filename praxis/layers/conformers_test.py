"""Tests for the Conformer: Pax's variable tree, residual structure, and the context window."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import conformers


def _eval_context():
  return base_layer.JaxContext.new_context(hparams=base_layer.JaxContext.HParams(do_eval=True))


class ConformerTest(absltest.TestCase):
  def test_tree_and_shapes(self):
    layer = pax_fiddle.Config(
      conformers.Conformer, name="c", input_dims=8, model_dims=8, kernel_size=3, atten_num_heads=2
    ).Instantiate()
    x = jax.random.normal(jax.random.key(0), (2, 5, 8))
    paddings = jnp.zeros((2, 5)).at[1, 3:].set(1.0)
    with _eval_context():
      v = layer.init(jax.random.key(1), x, paddings)
      y = layer.apply(v, x, paddings)
    self.assertEqual(y.shape, (2, 5, 8))
    self.assertEqual(
      sorted(v["params"]), ["fflayer_end", "fflayer_start", "final_ln", "lconv", "trans_atten"]
    )
    self.assertEqual(sorted(v["params"]["trans_atten"]), ["norm", "self_atten"])
    self.assertEqual(v["params"]["fflayer_start"]["ffn_layer1"]["linear"]["w"].shape, (8, 32))

  def test_blocks_are_residual(self):
    # With every block's output projection zeroed, each block passes its input through, and
    # the layer is final_ln(x).
    layer = pax_fiddle.Config(
      conformers.Conformer, name="c", input_dims=4, model_dims=4, kernel_size=3, atten_num_heads=1
    ).Instantiate()
    x = jax.random.normal(jax.random.key(0), (1, 3, 4))
    paddings = jnp.zeros((1, 3))
    with _eval_context():
      v = layer.init(jax.random.key(1), x, paddings)
      p = jax.tree_util.tree_map(lambda a: a, v["params"])
      for ff in ("fflayer_start", "fflayer_end"):
        p[ff]["ffn_layer2"] = jax.tree_util.tree_map(jnp.zeros_like, p[ff]["ffn_layer2"])
      p["lconv"]["linear_end"] = jax.tree_util.tree_map(jnp.zeros_like, p["lconv"]["linear_end"])
      p["trans_atten"]["self_atten"]["post"] = jax.tree_util.tree_map(
        jnp.zeros_like, p["trans_atten"]["self_atten"]["post"]
      )
      y = layer.apply({**v, "params": p}, x, paddings)
    xn = np.asarray(x)
    want = (xn - xn.mean(-1, keepdims=True)) / np.sqrt(xn.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)

  def test_context_window_of_one_is_per_position(self):
    cfg = pax_fiddle.Config(
      conformers.DotProductAttentionWithContext,
      name="a",
      input_dim=4,
      hidden_dim=4,
      num_heads=2,
      left_context=1,
      right_context=0,
    )
    layer = cfg.Instantiate()
    x = jax.random.normal(jax.random.key(0), (1, 3, 4))
    mask = jnp.zeros((1, 1, 1, 3))
    v = layer.init(jax.random.key(1), x, x, x, mask)
    out = layer.apply(v, x, x, x, mask)[0]
    for t in range(3):
      xt = x[:, t : t + 1]
      single = layer.apply(v, xt, xt, xt, jnp.zeros((1, 1, 1, 1)))[0]
      np.testing.assert_allclose(out[:, t], single[:, 0], rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
  absltest.main()
