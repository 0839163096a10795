"""Tests for TransformerFeedForwardMoe: Pax's variable tree, top-2 mixing against a numpy
reference, capacity drops, the aux loss it records, and MoE in a StackedTransformer."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import gshard_utils
from praxis import pax_fiddle
from praxis.layers import normalizations
from praxis.layers import transformer_moe
from praxis.layers import transformers

B, T, D, H, E = 2, 4, 6, 5, 3


def moe_layer(**kwargs):
  cfg = pax_fiddle.Config(
    transformer_moe.TransformerFeedForwardMoe,
    name="moe",
    input_dims=D,
    hidden_dims=H,
    num_experts=E,
    num_groups=1,
    moe_load_balance_loss_weight=0.5,
    ln_tpl=pax_fiddle.Config(normalizations.RmsNorm, direct_scale=True),
  )
  return base_layer.instantiate(cfg.set(**kwargs))


def numpy_top2(params, x):
  """x [N, D] -> the two best experts' outputs mixed by their renormalised gates [N, D]."""
  h = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-6) * params["layer_norm"]["scale"]
  logits = h @ params["gate"]  # [N, E]
  gates = np.exp(logits - logits.max(-1, keepdims=True))
  gates /= gates.sum(-1, keepdims=True)
  out = np.zeros_like(x)
  for n in range(x.shape[0]):
    best = np.argsort(gates[n])[::-1][:2]
    for e in best:
      expert = np.maximum(h[n] @ params["wi_0"][e], 0) @ params["wo_0"][e]  # ReLU, Pax's default
      out[n] += gates[n, e] / gates[n, best].sum() * expert
  return x + out


class TransformerFeedForwardMoeTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.x = jnp.asarray(np.random.default_rng(0).normal(size=(B, T, D)), jnp.float32)

  def test_variable_tree(self):
    params = moe_layer(use_gated_activation=True).init(jax.random.PRNGKey(0), self.x)["params"]
    shapes = jax.tree_util.tree_map(lambda a: a.shape, params)
    self.assertEqual(
      shapes,
      {
        "gate": (D, E),
        "wi_0": (E, D, H),
        "wi_gate_0": (E, D, H),
        "wo_0": (E, H, D),
        "layer_norm": {"scale": (D,)},
      },
    )
    # GShard's fan-in init: U(+-sqrt(3 / D)) for the gate.
    self.assertLessEqual(float(jnp.abs(params["gate"]).max()), (3.0 / D) ** 0.5)

  def test_ample_capacity_matches_numpy_top2(self):
    layer = moe_layer(expert_capacity_dim=B * T)  # every token fits its two experts
    variables = layer.init(jax.random.PRNGKey(1), self.x)
    out = layer.apply(variables, self.x)
    params = jax.tree_util.tree_map(np.asarray, variables["params"])
    expected = numpy_top2(params, np.asarray(self.x).reshape(B * T, D)).reshape(B, T, D)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    # dense_top2 (no capacity) computes the same mixture.
    dense = moe_layer(expert_capacity_dim=B * T, gating_func="dense_top2")
    np.testing.assert_allclose(dense.apply(variables, self.x), expected, rtol=1e-4, atol=1e-5)

  def test_capacity_one_drops_tokens(self):
    """With one slot per expert only E tokens get an expert; the rest pass through unchanged."""
    layer = moe_layer(expert_capacity_dim=1, unadjusted_expert_capacity_factor=0.0)
    variables = layer.init(jax.random.PRNGKey(2), self.x)
    out = layer.apply(variables, self.x)
    changed = np.any(np.abs(np.asarray(out - self.x)) > 1e-7, axis=-1)  # [B, T]
    self.assertGreater(changed.sum(), 0)
    self.assertLessEqual(changed.sum(), E)

  def test_aux_loss_is_weighted_gshard_loss(self):
    layer = moe_layer(expert_capacity_dim=2)
    paddings = jnp.asarray([[0, 0, 0, 1], [0, 0, 1, 1]], jnp.float32)
    variables = layer.init(jax.random.PRNGKey(3), self.x, paddings)
    out, updated = layer.apply(variables, self.x, paddings, mutable=[base_layer.AUX_LOSS])
    ((value, weight),) = updated[base_layer.AUX_LOSS]["aux_moe_load_balance_loss"]
    params = variables["params"]
    h = normalizations.RmsNorm(name="n", dim=D, direct_scale=True).apply(
      {"params": params["layer_norm"]}, self.x
    )
    logits = jnp.einsum("btd,de->bte", h, params["gate"]).reshape(1, B * T, E)
    aux, _, _, _ = gshard_utils.top2_gating_on_logits(
      paddings.reshape(1, B * T), logits, E, 2, jnp.float32
    )
    np.testing.assert_allclose(value, 0.5 * aux, rtol=1e-5)
    self.assertEqual(float(weight), 1.0)
    np.testing.assert_array_equal(out[1, 2:], self.x[1, 2:])  # padded: the residual only

  def test_bad_config_says_what_to_fix(self):
    with self.assertRaisesRegex(ValueError, "gating_func 'top3'"):
      moe_layer(gating_func="top3").init(jax.random.PRNGKey(0), self.x)
    with self.assertRaisesRegex(ValueError, "routing groups do not divide"):
      moe_layer(num_groups=3).init(jax.random.PRNGKey(0), self.x)


class StackedMoeTest(absltest.TestCase):
  def test_moe_layers_get_the_stack_routing(self):
    cfg = pax_fiddle.Config(
      transformers.StackedTransformer,
      name="stack",
      num_layers=2,
      model_dims=D,
      hidden_dims=8,
      num_heads=2,
      moe_layers=[1],
      num_experts=E,
      num_groups=2,
      gating_func="top2",
    )
    cfg.moe_layer_tpl.set(hidden_dims=H, gating_func="expert_choice")  # the stack's wins (Pax)
    stack = base_layer.instantiate(cfg)
    x = jnp.ones((B, T, D))
    paddings = jnp.zeros((B, T))
    variables = stack.init(jax.random.PRNGKey(0), x, paddings)
    ff0 = variables["params"]["x_layers_0"]["ff_layer"]
    ff1 = variables["params"]["x_layers_1"]["ff_layer"]
    self.assertIn("ffn_layer1", ff0)
    self.assertEqual(ff1["wi_0"].shape, (E, D, H))
    _, updated = stack.apply(variables, x, paddings, mutable=[base_layer.AUX_LOSS])
    self.assertEqual(list(updated[base_layer.AUX_LOSS]), ["x_layers_1"])


if __name__ == "__main__":
  absltest.main()
