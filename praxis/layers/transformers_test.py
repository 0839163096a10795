"""Tests for praxis.layers.transformers.

TransformerFeedForward is checked against numpy (forward) and a jax.numpy transcription of the
same formulas (gradient). The Transformer layer is checked for its wiring: numpy layer norms
around the attention and feed-forward sub-layers applied on their own (attention is checked
against numpy in attentions_test). The stack is checked by behaviour: decoding step by step
equals the full forward, a packed row equals its documents run alone, padded and future
positions do not leak.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis.layers import activations
from praxis.layers import attentions
from praxis.layers import transformers

B, T, D, F = 2, 6, 8, 12


def unbox(tree):
  return jax.tree.map(
    lambda a: a.value if hasattr(a, "value") else a, tree, is_leaf=lambda a: hasattr(a, "value")
  )


def randomize(params, seed):
  """Replaces every weight by noise, so no weight can be silently ignored or swapped."""
  leaves, treedef = jax.tree.flatten(unbox(params))
  rng = np.random.default_rng(seed)
  return jax.tree.unflatten(
    treedef, [jnp.asarray(rng.normal(size=l.shape) * 0.5, l.dtype) for l in leaves]
  )


def layer_norm(xp, p, x):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / xp.sqrt(var + 1e-6) * (1 + p["scale"]) + p["bias"]  # Pax: 1 + scale


def ff_ref(xp, p, x, pad, *, act, gated, policy):
  if policy == "pre":
    h_in = layer_norm(xp, p["layer_norm"], x)
  elif policy == "primer_hybrid":
    h_in = layer_norm(xp, p["pre_layer_norm"], x)
  else:
    h_in = x

  def dense(name, v):
    return v @ p[name]["linear"]["w"] + p[name]["bias"]["b"]

  if gated:  # Pax's: the activation is on the gate, ffn_layer1 stays linear
    h = act(dense("ffn_layer1_gate", h_in)) * dense("ffn_layer1", h_in)
  else:
    h = act(dense("ffn_layer1", h_in))
  h = h * (1.0 - pad[..., None])
  out = dense("ffn_layer2", h) * (1.0 - pad[..., None])
  if policy == "primer_hybrid":
    out = layer_norm(xp, p["post_layer_norm"], out)
  elif policy == "post":  # Pax's "post": the norm is on the branch
    out = layer_norm(xp, p["layer_norm"], out)
  out = x + out
  if policy == "post_skip":
    out = layer_norm(xp, p["layer_norm"], out)
  return out


def np_gelu(x):
  from math import erf  # pylint: disable=import-outside-toplevel

  return 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


class TransformerFeedForwardTest(parameterized.TestCase):
  @parameterized.named_parameters(
    ("relu_pre", "relu", False, "pre"),
    ("gelu_gated_pre", "gelu", True, "pre"),
    ("relu_post", "relu", False, "post"),
    ("relu_post_skip", "relu", False, "post_skip"),
    ("gelu_gated_primer_hybrid", "gelu", True, "primer_hybrid"),
  )
  def test_matches_numpy(self, act, gated, policy):
    act_tpl = (
      activations.ReLU.HParams() if act == "relu" else activations.GELU.HParams(approximate=False)
    )
    layer = transformers.TransformerFeedForward.HParams(
      input_dims=D,
      hidden_dims=F,
      activation_tpl=act_tpl,
      use_gated_activation=gated,
      norm_policy=policy,
    ).Instantiate()
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    pad = jnp.asarray(np.array([[0, 0, 0, 0, 1, 1], [0] * T]), jnp.float32)
    params = randomize(layer.init(jax.random.key(0), x, pad)["params"], 1)
    out = layer.apply({"params": params}, x, pad)
    np_act = (lambda v: np.maximum(v, 0)) if act == "relu" else np_gelu
    p64 = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    want = ff_ref(
      np,
      p64,
      np.asarray(x, np.float64),
      np.asarray(pad, np.float64),
      act=np_act,
      gated=gated,
      policy=policy,
    )
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)

    ct = jnp.asarray(rng.normal(size=out.shape), jnp.float32)
    jnp_act = jax.nn.relu if act == "relu" else (lambda v: jax.nn.gelu(v, approximate=False))
    grads = jax.grad(lambda p, x: jnp.sum(layer.apply({"params": p}, x, pad) * ct), argnums=(0, 1))(
      params, x
    )
    ref = jax.grad(
      lambda p, x: jnp.sum(ff_ref(jnp, p, x, pad, act=jnp_act, gated=gated, policy=policy) * ct),
      argnums=(0, 1),
    )(params, x)
    for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(ref)):
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

  def test_residual_dropout_only_when_not_deterministic(self):
    layer = transformers.TransformerFeedForward.HParams(
      input_dims=D, hidden_dims=F, residual_dropout_prob=0.5
    ).Instantiate()
    x = jnp.asarray(np.random.default_rng(3).normal(size=(B, T, D)), jnp.float32)
    variables = layer.init(jax.random.key(0), x)
    np.testing.assert_array_equal(layer.apply(variables, x), layer.apply(variables, x))
    train = layer.apply(variables, x, deterministic=False, rngs={"dropout": jax.random.key(1)})
    eval_out = layer.apply(variables, x)
    # Dropped output entries leave exactly the residual input; kept ones are doubled.
    branch, eval_branch = np.asarray(train - x), np.asarray(eval_out - x)
    dropped = branch == 0.0
    self.assertGreater(dropped.mean(), 0.3)
    self.assertLess(dropped.mean(), 0.7)
    np.testing.assert_allclose(branch[~dropped], 2.0 * eval_branch[~dropped], rtol=1e-4, atol=1e-5)


class TransformerLayerTest(parameterized.TestCase):
  @parameterized.parameters("pre", "post", "post_skip", "primer_hybrid")
  def test_wiring_of_norms_attention_and_ffn(self, policy):
    layer = transformers.Transformer.HParams(
      input_dims=D, hidden_dims=F, num_heads=2, norm_policy=policy
    ).Instantiate()
    atten = attentions.DotProductAttention.HParams(
      input_dim=D, hidden_dim=D, num_heads=2
    ).Instantiate()
    ffn = transformers.TransformerFeedForward.HParams(
      input_dims=D, hidden_dims=F, norm_policy=policy
    ).Instantiate()
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    pad = jnp.asarray(np.array([[0] * T, [0, 0, 0, 1, 1, 1]]), jnp.float32)
    mask = attentions.merge_masks(
      attentions.causal_mask(x), attentions.convert_paddings_to_mask(pad)
    )
    params = randomize(layer.init(jax.random.key(0), x, pad, mask)["params"], 3)

    def ref(p, x):
      def attend(v):
        return atten.apply({"params": p["self_attention"]}, v, v, v, mask)[0]

      def ln(name, v):
        return layer_norm(jnp, p[name], v)

      if policy == "pre":
        y = x + attend(ln("layer_norm", x))
      elif policy == "post":
        y = x + ln("layer_norm", attend(x))
      elif policy == "post_skip":
        y = ln("layer_norm", x + attend(x))
      else:
        y = x + ln("post_layer_norm", attend(ln("pre_layer_norm", x)))
      return ffn.apply({"params": p["ff_layer"]}, y, pad)

    def got(p, x):
      return layer.apply({"params": p}, x, pad, mask)[0]

    np.testing.assert_allclose(got(params, x), ref(params, x), rtol=1e-5, atol=1e-5)
    ct = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    g1 = jax.grad(lambda p, x: jnp.sum(got(p, x) * ct), argnums=(0, 1))(params, x)
    g2 = jax.grad(lambda p, x: jnp.sum(ref(p, x) * ct), argnums=(0, 1))(params, x)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)

  def test_cross_attention_wiring(self):
    layer = transformers.Transformer.HParams(
      input_dims=D, hidden_dims=F, num_heads=2, use_cross_attention=True
    ).Instantiate()
    atten = attentions.DotProductAttention.HParams(
      input_dim=D, hidden_dim=D, num_heads=2
    ).Instantiate()
    ffn = transformers.TransformerFeedForward.HParams(input_dims=D, hidden_dims=F).Instantiate()
    rng = np.random.default_rng(12)
    x = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    enc = jnp.asarray(rng.normal(size=(B, 5, D)), jnp.float32)
    pad = jnp.zeros((B, T))
    mask = attentions.causal_mask(x)
    cross_mask = attentions.convert_paddings_to_mask(
      jnp.array([[0, 0, 0, 1, 1], [0] * 5], jnp.float32)
    )
    params = randomize(layer.init(jax.random.key(0), x, pad, mask, enc, cross_mask)["params"], 13)
    self.assertIn("cross_layer_norm", params)
    out, probs = layer.apply({"params": params}, x, pad, mask, enc, cross_mask)

    def ln(name, v):
      return layer_norm(jnp, params[name], v)

    y = x + atten.apply({"params": params["self_attention"]}, *([ln("layer_norm", x)] * 3), mask)[0]
    y = (
      y
      + atten.apply(
        {"params": params["cross_attention"]}, ln("cross_layer_norm", y), enc, enc, cross_mask
      )[0]
    )
    want = ffn.apply({"params": params["ff_layer"]}, y, pad)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    # The padded encoder positions get no attention.
    np.testing.assert_array_equal(np.asarray(probs.cross_atten)[0, :, :, 3:], 0.0)


def stack_config(**overrides):
  cfg = transformers.StackedTransformer.HParams(
    num_layers=2, model_dims=D, hidden_dims=F, num_heads=4, dim_per_head=4, num_kv_heads=2
  )
  cfg.transformer_layer_params_tpl.tr_atten_tpl.use_rotary_position_emb = True
  return cfg.set(**overrides)


def repeated_config(**overrides):
  return transformers.StackedTransformerRepeated.HParams(
    block=stack_config(num_layers=1, **overrides), x_times=2
  )


class StackedTransformerTest(parameterized.TestCase):
  @parameterized.named_parameters(("unrolled", stack_config), ("repeated", repeated_config))
  def test_extend_step_reproduces_forward(self, make_config):
    stack = make_config().Instantiate()
    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    # Row 1 is left-padded (a right-aligned prompt): its first two positions stay hidden.
    pad = jnp.asarray(np.array([[0] * T, [1, 1, 0, 0, 0, 0]]), jnp.float32)
    params = randomize(stack.init(jax.random.key(0), x, pad)["params"], 5)
    full = stack.apply({"params": params}, x, pad)  # [B, T, D]
    prefix = 3
    # The prefill sees the prompt, then padded junk where the decoded steps will go.
    junk = x.at[:, prefix:].set(jnp.asarray(rng.normal(size=(B, T - prefix, D)), jnp.float32))
    prefill, cache = stack.apply(
      {"params": params}, junk, pad.at[:, prefix:].set(1.0), mutable=[attentions.DECODER_CACHE]
    )
    # Padded queries (row 1's first two) see no key; their outputs are meaningless.
    real = np.asarray(pad[:, :prefix]) == 0
    np.testing.assert_allclose(
      np.asarray(prefill[:, :prefix])[real],
      np.asarray(full[:, :prefix])[real],
      rtol=1e-5,
      atol=1e-5,
    )

    @jax.jit
    def step(cache, x_t, t):
      return stack.apply(
        {"params": params, **cache},
        x_t,
        time_step=t,
        method=stack.extend_step,
        mutable=[attentions.DECODER_CACHE],
      )

    for t in range(prefix, T):
      out_t, cache = step(cache, x[:, t], jnp.asarray(t))
      np.testing.assert_allclose(out_t, full[:, t], rtol=1e-5, atol=1e-5, err_msg=f"step {t}")

  def test_packed_row_equals_documents_alone(self):
    stack = stack_config(packed_input=True).Instantiate()
    rng = np.random.default_rng(6)
    doc_a = jnp.asarray(rng.normal(size=(1, 4, D)), jnp.float32)
    doc_b = jnp.asarray(rng.normal(size=(1, 2, D)), jnp.float32)
    packed = jnp.concatenate([doc_a, doc_b], axis=1)  # [1, 6, D]
    seg_ids = jnp.array([[1, 1, 1, 1, 2, 2]])
    seg_pos = jnp.array([[0, 1, 2, 3, 0, 1]])
    zeros = jnp.zeros((1, T))
    params = randomize(
      stack.init(jax.random.key(0), packed, zeros, segment_ids=seg_ids, segment_pos=seg_pos)[
        "params"
      ],
      7,
    )
    out = stack.apply({"params": params}, packed, zeros, segment_ids=seg_ids, segment_pos=seg_pos)
    alone = transformers.StackedTransformer.HParams(
      **{
        k: getattr(stack, k)
        for k in (
          "num_layers",
          "model_dims",
          "hidden_dims",
          "num_heads",
          "dim_per_head",
          "num_kv_heads",
          "transformer_layer_params_tpl",
        )
      }
    ).Instantiate()
    out_a = alone.apply({"params": params}, doc_a, jnp.zeros((1, 4)))
    out_b = alone.apply({"params": params}, doc_b, jnp.zeros((1, 2)))
    np.testing.assert_allclose(out[:, :4], out_a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[:, 4:], out_b, rtol=1e-5, atol=1e-5)
    with self.assertRaisesRegex(ValueError, "needs segment_ids"):
      stack.apply({"params": params}, packed, zeros)

  def test_no_leak_from_padded_or_future_positions(self):
    rng = np.random.default_rng(8)
    x = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    pad = jnp.asarray(np.array([[0, 0, 0, 0, 1, 1], [0] * T]), jnp.float32)
    # A constant shift would vanish in the layer norms: perturb with noise.
    noise = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    changed = x.at[0, 4:].add(noise[0, 4:])  # padded positions of row 0 (the future of 0..3)
    for causal in (True, False):
      stack = stack_config(mask_self_attention=causal).Instantiate()
      params = randomize(stack.init(jax.random.key(0), x, pad)["params"], 9)
      out = stack.apply({"params": params}, x, pad)
      np.testing.assert_allclose(
        stack.apply({"params": params}, changed, pad)[0, :4], out[0, :4], rtol=1e-5, atol=1e-6
      )
      # A change of position 3 must reach position 2 only without the causal mask.
      moved = stack.apply({"params": params}, x.at[0, 3].add(noise[0, 3]), pad)
      reached = float(jnp.max(jnp.abs(moved[0, 2] - out[0, 2])))
      if causal:
        self.assertEqual(reached, 0.0)
      else:
        self.assertGreater(reached, 1e-4)

  def test_cross_attention_extend_step_reproduces_forward(self):
    stack = transformers.StackedTransformer.HParams(
      num_layers=2, model_dims=D, hidden_dims=F, num_heads=2, use_cross_attention=True
    ).Instantiate()
    rng = np.random.default_rng(14)
    x = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    enc = jnp.asarray(rng.normal(size=(B, 5, D)), jnp.float32)
    enc_pad = jnp.asarray([[0, 0, 0, 1, 1], [0] * 5], jnp.float32)
    pad = jnp.zeros((B, T))
    params = randomize(
      stack.init(jax.random.key(0), x, pad, cross_inputs=enc, cross_paddings=enc_pad)["params"], 15
    )
    full = stack.apply({"params": params}, x, pad, cross_inputs=enc, cross_paddings=enc_pad)
    # The prefill caches the encoder's keys/values; its own inputs are all padding.
    _, cache = stack.apply(
      {"params": params},
      jnp.zeros_like(x),
      jnp.ones_like(pad),
      cross_inputs=enc,
      cross_paddings=enc_pad,
      mutable=[attentions.DECODER_CACHE],
    )
    for t in range(T):
      out_t, cache = stack.apply(
        {"params": params, **cache},
        x[:, t],
        time_step=t,
        cross_paddings=enc_pad,
        method=stack.extend_step,
        mutable=[attentions.DECODER_CACHE],
      )
      np.testing.assert_allclose(out_t, full[:, t], rtol=1e-5, atol=1e-5, err_msg=f"step {t}")

  def test_remat_and_list_of_layer_templates_keep_the_outputs(self):
    stack = stack_config(num_layers=4)
    x = jnp.asarray(np.random.default_rng(16).normal(size=(B, T, D)), jnp.float32)
    pad = jnp.zeros((B, T))
    ref = stack.Instantiate()
    params = randomize(ref.init(jax.random.key(0), x, pad)["params"], 17)
    want = ref.apply({"params": params}, x, pad)
    rematted = stack.clone().set(remat=True).Instantiate()
    np.testing.assert_allclose(rematted.apply({"params": params}, x, pad), want, rtol=1e-6)
    two = stack.clone()
    two.transformer_layer_params_tpl = [two.transformer_layer_params_tpl.clone() for _ in range(2)]
    np.testing.assert_allclose(two.Instantiate().apply({"params": params}, x, pad), want, rtol=1e-6)


if __name__ == "__main__":
  absltest.main()
