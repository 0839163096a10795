"""Tests of TransformerLm: wiring against a hand composition, tied/untied weights, KV cache."""

from absl.testing import absltest
from absl.testing import parameterized
import flax
import jax
import jax.numpy as jnp
import numpy as np

from praxis import pytypes
from praxis.layers import attentions
from praxis.layers import embedding_softmax
from praxis.layers import transformer_models
from praxis.layers import transformers

NestedMap = pytypes.NestedMap
B, T, D, V = 2, 7, 16, 13


def stack_config(**kwargs):
  cfg = transformers.StackedTransformer.HParams(
    num_layers=2, hidden_dims=32, num_heads=2, dim_per_head=8
  )
  return cfg.set(**kwargs)


def lm_config(kind="tied", **kwargs):
  """kind: tied (sinusoidal), untied, trainable (position table), rotary, repeated."""
  if kind == "untied":
    cfg = transformer_models.TransformerLm.untied_config(model_dims=D, vocab_size=V)
  else:
    cfg = transformer_models.TransformerLm.HParams(model_dims=D, vocab_size=V)
  cfg.stacked_transformer_tpl = stack_config()
  if kind == "trainable":
    cfg.position_emb_tpl = embedding_softmax.TrainablePositionalEmbedding.HParams(max_seq_length=T)
  elif kind == "rotary":
    cfg.position_emb_tpl = None
    cfg.stacked_transformer_tpl = rotary_stack_config()
  elif kind == "repeated":
    cfg.stacked_transformer_tpl = transformers.StackedTransformerRepeated.HParams(
      block=stack_config(num_layers=1), x_times=2
    )
  return cfg.set(**kwargs)


def rotary_stack_config():
  cfg = stack_config()
  cfg.transformer_layer_params_tpl.tr_atten_tpl.use_rotary_position_emb = True
  return cfg


def unbox(tree):
  return flax.core.unfreeze(flax.linen.meta.unbox(tree))


def np_layer_norm(x, scale, bias, eps=1e-6):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * (1 + scale) + bias  # Pax's LayerNorm: 1 + scale


def np_sinusoid(positions, dims):
  half = dims // 2
  inv = np.exp(-np.log(1e4) / (half - 1) * np.arange(half))
  angles = positions[..., None] * inv
  return np.concatenate([np.sin(angles), np.cos(angles)], -1)


class TransformerLmTest(parameterized.TestCase):
  def setUp(self):
    super().setUp()
    rng = np.random.default_rng(0)
    self.ids = rng.integers(0, V, size=(B, T)).astype(np.int32)
    self.paddings = np.zeros((B, T), np.float32)
    self.paddings[1, -2:] = 1.0

  @parameterized.parameters("tied", "untied")
  def test_logits_match_a_hand_composition_of_the_pieces(self, kind):
    model = lm_config(kind).Instantiate()
    variables = model.init(jax.random.key(0), self.ids, self.paddings)
    params = unbox(variables["params"])
    # Non-trivial LN and bias values so that a skipped piece shows.
    rng = np.random.default_rng(1)
    params["final_ln"] = jax.tree.map(
      lambda a: rng.normal(size=a.shape).astype(np.float32) * 0.3, params["final_ln"]
    )
    params["softmax"]["logits_ffn"]["bias"]["b"] = rng.normal(size=V).astype(np.float32)
    logits = model.apply({"params": params}, self.ids, self.paddings).logits  # [B, T, V]

    w = np.asarray(params["softmax"]["logits_ffn"]["linear"]["w"])  # [D, V]
    if kind == "tied":
      self.assertNotIn("embedding_lookup", params)
      emb = w.T[self.ids]
    else:
      emb = np.asarray(params["embedding_lookup"]["emb_var"])[self.ids]
      self.assertEqual(params["embedding_lookup"]["emb_var"].shape, (V, D))
    emb = emb + np_sinusoid(np.arange(T, dtype=np.float64)[None], D)
    stack = stack_config(model_dims=D).Instantiate()
    hidden = np.asarray(
      stack.apply({"params": params["transformer"]}, jnp.asarray(emb, jnp.float32), self.paddings)
    )
    ln = params["final_ln"]
    normed = np_layer_norm(hidden, np.asarray(ln["scale"]), np.asarray(ln["bias"]))
    expected = normed @ w + np.asarray(params["softmax"]["logits_ffn"]["bias"]["b"])
    np.testing.assert_allclose(logits, expected, rtol=2e-4, atol=2e-4)

  def test_tied_weight_gets_the_gradient_of_both_uses(self):
    model = lm_config("tied").Instantiate()
    params = unbox(model.init(jax.random.key(0), self.ids, self.paddings)["params"])
    labels = NestedMap(class_ids=jnp.roll(self.ids, -1, axis=1), class_weights=1.0 - self.paddings)

    def loss(p):
      return model.apply({"params": p}, self.ids, self.paddings, labels=labels).avg_xent

    grad_w = jax.grad(loss)(params)["softmax"]["logits_ffn"]["linear"]["w"]  # [D, V]
    # Split the tied weight into two copies: one only embeds, one only produces logits.
    untied = lm_config("untied").Instantiate()

    def untied_loss(emb_var, w):
      p = {k: v for k, v in params.items()}
      p["embedding_lookup"] = {"emb_var": emb_var}
      p["softmax"] = {
        "logits_ffn": {"linear": {"w": w}, "bias": params["softmax"]["logits_ffn"]["bias"]}
      }
      return untied.apply({"params": p}, self.ids, self.paddings, labels=labels).avg_xent

    w = params["softmax"]["logits_ffn"]["linear"]["w"]
    g_emb, g_softmax = jax.grad(untied_loss, argnums=(0, 1))(w.T, w)
    self.assertGreater(float(jnp.abs(g_emb).max()), 1e-4)
    np.testing.assert_allclose(grad_w, g_emb.T + g_softmax, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(loss(params), untied_loss(w.T, w), rtol=1e-6)

  @parameterized.parameters("tied", "untied", "trainable", "rotary", "repeated")
  def test_extend_step_with_the_cache_gives_the_full_forward_logits(self, kind):
    model = lm_config(kind).Instantiate()
    variables = model.init(jax.random.key(0), self.ids, self.paddings)
    full_logits = model.apply(variables, self.ids, np.zeros_like(self.paddings)).logits  # [B, T, V]
    # Prefill on a buffer whose positions >= 3 are junk; extend_step rewrites them in order.
    prefix = 3
    buffer = np.where(np.arange(T) < prefix, self.ids, (self.ids + 5) % V)
    _, state = model.apply(
      variables, buffer, np.zeros_like(self.paddings), mutable=[attentions.DECODER_CACHE]
    )
    self.assertIn(attentions.DECODER_CACHE, state)
    extend = jax.jit(
      lambda v, ids, t: model.apply(
        v, ids, time_step=t, method="extend_step", mutable=[attentions.DECODER_CACHE]
      )
    )
    for t in range(prefix - 1, T):
      out, state = extend({**variables, **state}, self.ids[:, t], t)
      logits = out.logits
      np.testing.assert_allclose(
        logits, full_logits[:, t], rtol=1e-4, atol=1e-4, err_msg=f"{kind} step {t}"
      )
    self.assertGreater(float(jnp.abs(full_logits[:, 3] - full_logits[:, 4]).max()), 1e-3)

  def test_packed_segments_give_the_logits_of_each_segment_alone(self):
    packed = lm_config("tied", packed_input=True).Instantiate()
    alone = lm_config("tied").Instantiate()
    segment_ids = np.array([[1, 1, 1, 2, 2, 2, 2]] * B, np.int32)
    segment_pos = np.array([[0, 1, 2, 0, 1, 2, 3]] * B, np.int32)
    no_pad = np.zeros((B, T), np.float32)
    variables = packed.init(
      jax.random.key(0), self.ids, no_pad, segment_ids=segment_ids, segment_pos=segment_pos
    )
    logits = packed.apply(
      variables, self.ids, no_pad, segment_ids=segment_ids, segment_pos=segment_pos
    ).logits  # [B, T, V]
    first = alone.apply(variables, self.ids[:, :3], no_pad[:, :3]).logits
    second = alone.apply(variables, self.ids[:, 3:], no_pad[:, 3:]).logits
    np.testing.assert_allclose(logits[:, :3], first, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(logits[:, 3:], second, rtol=1e-4, atol=1e-5)
    # Without the segments, the second segment would see the first.
    unpacked = alone.apply(variables, self.ids, no_pad).logits
    self.assertGreater(float(jnp.abs(unpacked[:, 3:] - second).max()), 1e-3)

  def test_bad_configs_are_reported(self):
    with self.assertRaisesRegex(ValueError, "positive model_dims and vocab_size"):
      transformer_models.TransformerLm.HParams().Instantiate().init(
        jax.random.key(0), self.ids, self.paddings
      )
    cfg = lm_config("tied", packed_input=True)
    with self.assertRaisesRegex(ValueError, "needs both segment_ids and segment_pos, or neither"):
      cfg.Instantiate().init(
        jax.random.key(0), self.ids, self.paddings, segment_ids=np.ones_like(self.ids)
      )
    cfg = lm_config("tied")
    cfg.softmax_tpl = embedding_softmax.FullSoftmax.HParams()
    with self.assertRaisesRegex(ValueError, "cannot embed ids"):
      cfg.Instantiate().init(jax.random.key(0), self.ids, self.paddings)

  def test_packed_input_without_segments_folds_paddings(self):
    # As Pax: each row is one segment, its padded positions segment 0.
    model = lm_config("tied", packed_input=True).Instantiate()
    paddings = np.zeros((B, T), np.float32)
    paddings[:, -2:] = 1.0
    variables = model.init(jax.random.key(0), self.ids, paddings)
    implicit = model.apply(variables, self.ids, paddings).logits
    explicit = model.apply(
      variables,
      self.ids,
      paddings,
      segment_ids=(1 - paddings).astype(np.int32),
      segment_pos=np.broadcast_to(np.arange(T, dtype=np.int32), (B, T)),
    ).logits
    np.testing.assert_allclose(implicit, explicit, atol=1e-6)

  def test_paxs_extend_step_counter_and_recorded_activations(self):
    # Pax's protocol: prefill an all-padded buffer, then extend_step(ids [B]) without a
    # time_step; the cache counts the positions itself.
    model = lm_config(record_activations_in_xent_output=True).Instantiate()
    zeros = np.zeros((B, T), np.float32)
    variables = model.init(jax.random.key(0), self.ids, zeros)
    full = model.apply(variables, self.ids, zeros)
    self.assertEqual(full.activations.shape, (B, T, D))
    _, state = model.apply(
      variables,
      np.zeros_like(self.ids),
      np.ones((B, T), np.float32),
      mutable=[attentions.DECODER_CACHE],
    )
    step = jax.jit(
      lambda v, ids: model.apply(v, ids, method="extend_step", mutable=[attentions.DECODER_CACHE])
    )
    for t in range(T):
      out, state = step({**variables, **state}, self.ids[:, t])
      np.testing.assert_allclose(out.logits, full.logits[:, t], rtol=1e-4, atol=1e-4)
      np.testing.assert_allclose(out.activations, full.activations[:, t], rtol=1e-4, atol=1e-4)
    self.assertEqual(int(state[attentions.DECODER_CACHE]["time_step"]), T)

  def test_model_type_decides_what_a_position_sees(self):
    # Changing the last token changes the first position's logits only in a bidirectional LM.
    changed = self.ids.copy()
    changed[:, -1] = (changed[:, -1] + 1) % V
    zeros = np.zeros((B, T), np.float32)
    for model_type, sees_future in [
      (transformer_models.LanguageModelType.CAUSAL, False),
      (transformer_models.LanguageModelType.BIDIRECTIONAL, True),
    ]:
      model = lm_config(model_type=model_type).Instantiate()
      variables = model.init(jax.random.key(0), self.ids, zeros)
      first = [model.apply(variables, ids, zeros).logits[:, 0] for ids in (self.ids, changed)]
      self.assertEqual(not np.allclose(first[0], first[1], atol=1e-6), sees_future, model_type)
    # PREFIX: the first 3 positions (the prompt) see each other, the rest are causal.
    model = lm_config(model_type=transformer_models.LanguageModelType.PREFIX).Instantiate()
    causal = np.broadcast_to((np.arange(T) >= 3).astype(np.int32), (B, T))
    variables = model.init(jax.random.key(0), self.ids, zeros, causal_attention_mask=causal)

    def logits_after_changing(pos):
      ids = self.ids.copy()
      ids[:, pos] = (ids[:, pos] + 1) % V
      return model.apply(variables, ids, zeros, causal_attention_mask=causal).logits

    base = model.apply(variables, self.ids, zeros, causal_attention_mask=causal).logits
    self.assertFalse(np.allclose(logits_after_changing(2)[:, 0], base[:, 0], atol=1e-6))
    np.testing.assert_allclose(logits_after_changing(3)[:, :3], base[:, :3], atol=1e-6)
    np.testing.assert_allclose(logits_after_changing(5)[:, :5], base[:, :5], atol=1e-6)
    self.assertFalse(np.allclose(logits_after_changing(4)[:, 5], base[:, 5], atol=1e-6))
    with self.assertRaisesRegex(ValueError, "causal_attention_mask"):
      model.apply(variables, self.ids, zeros)


if __name__ == "__main__":
  absltest.main()
