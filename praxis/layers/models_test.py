"""Tests of praxis.layers.models: LM metrics and ClassificationModel against numpy."""

from absl.testing import absltest
import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import linears
from praxis.layers import models
from praxis.layers import resnets
from praxis.layers import sample_decode
from praxis.layers import transformer_models
from praxis.layers import transformers

NestedMap = pytypes.NestedMap


def np_log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def np_lm_metrics(logits, labels, weights):
  """numpy reference: weighted mean xent, accuracy and the number of predictions."""
  log_probs = np_log_softmax(logits.astype(np.float64))
  xent = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
  num = weights.sum()
  return dict(
    avg_xent=(xent * weights).sum() / num,
    accuracy=((logits.argmax(-1) == labels) * weights).sum() / num,
    num=num,
  )


class LmMetricsTest(absltest.TestCase):
  def test_metrics_match_numpy_with_weights(self):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 7)).astype(np.float32) * 2
    labels = rng.integers(0, 7, size=(3, 5))
    labels[0, :3] = logits[0, :3].argmax(-1)  # some right predictions
    weights = (rng.random((3, 5)) > 0.3).astype(np.float32)
    log_probs = jax.nn.log_softmax(logits)
    xent = -jnp.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
    metrics = models.lm_metrics(
      xent, jnp.argmax(logits, -1), labels, weights, aux_loss=0.25, aux_loss_weight=2.0
    )
    ref = np_lm_metrics(logits, labels, weights)
    self.assertGreater(ref["accuracy"], 0.0)
    for name, value in [
      ("avg_xent", ref["avg_xent"]),
      ("log_pplx", ref["avg_xent"]),
      ("total_loss", ref["avg_xent"] + 0.25),
      ("fraction_of_correct_next_step_preds", ref["accuracy"]),
    ]:
      np.testing.assert_allclose(metrics[name][0], value, rtol=1e-5, err_msg=name)
      np.testing.assert_allclose(metrics[name][1], ref["num"], err_msg=name)
    np.testing.assert_allclose(metrics["num_predictions"][0], ref["num"])
    np.testing.assert_allclose(metrics["num_predictions"][1], 1.0)
    np.testing.assert_allclose(metrics["aux_loss"], (0.25, 2.0))
    # All weights zero: zeros, not NaN.
    empty = models.lm_metrics(xent, jnp.argmax(logits, -1), labels, np.zeros_like(weights))
    self.assertEqual(float(empty["avg_xent"][0]), 0.0)


class ClassificationModelTest(absltest.TestCase):
  """Pax's ClassificationModel with a one-layer network, so that numpy can check it."""

  def setUp(self):
    super().setUp()
    rng = np.random.default_rng(1)
    self.labels = rng.integers(0, 4, size=(6,)).astype(np.int32)
    self.batch = NestedMap(
      image=rng.normal(size=(6, 6)).astype(np.float32),
      label_probs=np.eye(4, dtype=np.float32)[self.labels],
      weight=np.array([1, 1, 0, 1, 1, 1], np.float32),
    )

  def model(self, num_classes=4):
    network = pax_fiddle.Config(
      linears.FeedForward,
      input_dims=6,
      output_dims=5,
      activation_tpl=pax_fiddle.Config(activations.ReLU),
    )
    cfg = pax_fiddle.Config(models.ClassificationModel, name="classifier", network_tpl=network)
    cfg.softmax_tpl.set(input_dims=5, num_classes=num_classes)
    return base_layer.instantiate(cfg)

  def np_forward_and_grads(self, p):
    """numpy forward and hand-derived backward of relu(x W0 + b0) W1 + b1 with softmax xent."""
    x = self.batch.image.astype(np.float64)
    w0, b0 = p["network"]["linear"]["w"], p["network"]["bias"]["b"]
    w1, b1 = p["softmax"]["logits_ffn"]["linear"]["w"], p["softmax"]["logits_ffn"]["bias"]["b"]
    pre = x @ w0 + b0
    h = np.maximum(pre, 0)
    logits = h @ w1 + b1
    probs = np.exp(np_log_softmax(logits))
    onehot = self.batch.label_probs
    w = self.batch.weight
    xent = -(onehot * np.log(probs)).sum(-1)
    loss = (xent * w).sum() / w.sum()
    dlogits = (probs - onehot) * w[:, None] / w.sum()  # [B, C]
    dh = dlogits @ w1.T
    dpre = dh * (pre > 0)
    grads = {"w1": h.T @ dlogits, "b1": dlogits.sum(0), "w0": x.T @ dpre, "b0": dpre.sum(0)}
    accuracy = ((logits.argmax(-1) == self.labels) * w).sum() / w.sum()
    return loss, accuracy, grads

  def test_loss_accuracy_and_gradient_match_numpy(self):
    model = self.model()
    variables = model.init(jax.random.key(0), self.batch)
    params = flax.core.unfreeze(variables["params"])
    # A non-zero bias so that a dropped bias would show.
    params["softmax"]["logits_ffn"]["bias"]["b"] = np.linspace(-0.5, 0.5, 4).astype(np.float32)

    def loss_fn(p):
      metrics, _ = model.apply({"params": p}, self.batch)
      return metrics["total_loss"][0], metrics

    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    np_params = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    ref_loss, ref_acc, ref_grads = self.np_forward_and_grads(np_params)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    np.testing.assert_allclose(metrics["avg_xent"][0], ref_loss, rtol=1e-5)
    np.testing.assert_allclose(metrics["accuracy"][0], ref_acc, rtol=1e-6)
    np.testing.assert_allclose(metrics["accuracy"][1], 5.0)  # the weights, not the batch size
    np.testing.assert_allclose(metrics["error"][0], 1 - ref_acc, rtol=1e-6)
    self.assertNotIn("acc5", metrics)  # 4 classes: no top-5
    for name, got in [
      ("w1", grads["softmax"]["logits_ffn"]["linear"]["w"]),
      ("b1", grads["softmax"]["logits_ffn"]["bias"]["b"]),
      ("w0", grads["network"]["linear"]["w"]),
      ("b0", grads["network"]["bias"]["b"]),
    ]:
      np.testing.assert_allclose(got, ref_grads[name], rtol=1e-4, atol=1e-6, err_msg=name)

  def test_top5_and_predict(self):
    model = self.model(num_classes=7)
    batch = NestedMap(image=self.batch.image, label_probs=np.eye(7, dtype=np.float32)[self.labels])
    variables = model.init(jax.random.key(2), batch)
    metrics, per_example = model.apply(variables, batch)
    logits = np.asarray(per_example.scores)  # [B, 7]
    rank = (logits > np.take_along_axis(logits, self.labels[:, None], -1)).sum(-1)  # [B]
    np.testing.assert_allclose(metrics["acc5"][0], np.mean(rank < 5), rtol=1e-6)
    np.testing.assert_allclose(metrics["error5"][0], 1 - np.mean(rank < 5), rtol=1e-6)
    predicted = model.apply(variables, batch, method=model.predict)
    np.testing.assert_allclose(predicted.logits, logits, rtol=1e-6)
    np.testing.assert_allclose(predicted.logp, np_log_softmax(logits), rtol=1e-5, atol=1e-6)

  def test_default_network_is_resnet50(self):
    cfg = pax_fiddle.Config(models.ClassificationModel)
    self.assertIs(cfg.network_tpl.cls, resnets.ResNet)
    self.assertEqual(tuple(cfg.network_tpl.blocks), (3, 4, 6, 3))


V = 11


def lm_model_config(seqlen=10, z_loss_weight=0.0, **decoder_kwargs):
  lm = transformer_models.TransformerLm.HParams(
    model_dims=16,
    vocab_size=V,
    stacked_transformer_tpl=transformers.StackedTransformer.HParams(
      num_layers=2, hidden_dims=32, num_heads=2, dim_per_head=8
    ),
  )
  lm.softmax_tpl.z_loss_weight = z_loss_weight
  decoder = sample_decode.DecoderHParams(seqlen=seqlen, **decoder_kwargs)
  return models.LanguageModel.HParams(lm_tpl=lm, decoder_tpl=decoder)


def lm_batch(seed=0, b=3, t=8):
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, V, size=(b, t)).astype(np.int32)
  paddings = np.zeros((b, t), np.float32)
  paddings[1, -3:] = 1.0
  weights = np.ones((b, t), np.float32)
  weights[2, 0] = 0.0
  return NestedMap(ids=ids, labels=np.roll(ids, -1, axis=1), paddings=paddings, weights=weights)


def lm_logits(model, variables, ids, paddings):
  return model.apply(variables, ids, paddings, method=lambda m, i, p: m.lm(i, p).logits)


class LanguageModelTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # One model (with a z-loss) and its full-forward logits, shared by the tests below.
    cls.model = lm_model_config(seqlen=10, z_loss_weight=0.1).Instantiate()
    cls.batch = lm_batch()
    # mutable=True: Pax's init returns only params and non_trainable unless asked for more.
    cls.variables = cls.model.init(jax.random.key(0), cls.batch, mutable=True)  # with aux loss
    cls.params_only = {"params": cls.variables["params"]}
    cls.full = staticmethod(
      jax.jit(lambda ids: lm_logits(cls.model, cls.params_only, ids, jnp.zeros(ids.shape)))
    )  # [B, T, V]

  def test_metrics_and_z_loss_match_numpy_on_the_models_logits(self):
    batch = self.batch
    logits = np.asarray(
      lm_logits(self.model, self.params_only, batch.ids, batch.paddings), np.float64
    )
    weights = batch.weights * (1.0 - batch.paddings)  # padded positions never count
    ref = np_lm_metrics(logits, batch.labels, weights)
    self.assertEqual(ref["num"], 3 * 8 - 3 - 1)
    log_z = np.log(np.exp(logits).sum(-1))
    expected_aux = 0.1 * (log_z**2 * weights).sum() / weights.sum()
    self.assertIn(base_layer.AUX_LOSS, self.variables)
    apply = jax.jit(self.model.apply, static_argnames="mutable")
    for name, variables, mutable in [
      ("collected", self.params_only, True),
      ("collected, init's aux loss passed in", self.variables, True),
      ("not mutable", self.params_only, False),
    ]:
      if mutable:
        (metrics, per_example), _ = apply(variables, batch, mutable=(base_layer.AUX_LOSS,))
      else:
        metrics, per_example = apply(variables, batch)
      np.testing.assert_allclose(metrics["aux_loss"][0], expected_aux, rtol=1e-4, err_msg=name)
      np.testing.assert_allclose(
        metrics["total_loss"][0], ref["avg_xent"] + expected_aux, rtol=1e-4, err_msg=name
      )
    np.testing.assert_allclose(metrics["avg_xent"][0], ref["avg_xent"], rtol=1e-5)
    np.testing.assert_allclose(metrics["log_pplx"][0], ref["avg_xent"], rtol=1e-5)
    np.testing.assert_allclose(
      metrics["fraction_of_correct_next_step_preds"][0], ref["accuracy"], rtol=1e-6
    )
    np.testing.assert_allclose(metrics["num_predictions"][0], ref["num"])
    np.testing.assert_allclose(metrics["avg_xent"][1], ref["num"])
    np.testing.assert_allclose(per_example.num_predictions, weights.sum(-1))

  def test_scores_eval_sample_weights_and_return_predictions(self):
    # Pax's per-example score is minus the weighted sum of the token cross-entropies; with
    # apply_eval_sample_weights a row of weight 0 counts for nothing, so two halves of a batch
    # add up to the whole.
    metrics, out = self.model.apply(self.params_only, self.batch)
    np.testing.assert_allclose(out.scores, -out.per_sequence_xent, rtol=1e-6)
    self.assertTrue(np.all(np.asarray(out.scores) < 0))
    weighted = self.model.clone(apply_eval_sample_weights=True)
    parts = []
    for rows in ([1.0, 0.0, 0.0], [0.0, 1.0, 1.0]):
      batch = NestedMap(self.batch, eval_sample_weights=np.array(rows, np.float32))
      parts.append(weighted.apply(self.params_only, batch))
    np.testing.assert_allclose(parts[0][1].scores + parts[1][1].scores, out.scores, rtol=1e-5)
    np.testing.assert_allclose(
      parts[0][0]["num_predictions"][0] + parts[1][0]["num_predictions"][0],
      metrics["num_predictions"][0],
    )
    total = sum(p[0]["avg_xent"][0] * p[0]["avg_xent"][1] for p in parts)
    np.testing.assert_allclose(total / metrics["avg_xent"][1], metrics["avg_xent"][0], rtol=1e-5)
    with self.assertRaisesRegex(ValueError, "eval_sample_weights"):
      weighted.apply(self.params_only, self.batch)
    _, predictions = self.model.clone(return_predictions=True).apply(self.params_only, self.batch)
    self.assertEqual(predictions.logits.shape, (3, 8, V))

  def test_count_tokens_adds_the_unpadded_tokens_in_millions(self):
    model = self.model.clone(count_tokens=True)
    variables = model.init(jax.random.key(0), self.batch)
    count = variables[base_layer.NON_TRAINABLE]["token_counter"]["approx_total_tokens_mm"]
    self.assertEqual(float(count), 0.0)
    _, updated = model.apply(variables, self.batch, mutable=[base_layer.NON_TRAINABLE])
    new = updated[base_layer.NON_TRAINABLE]["token_counter"]["approx_total_tokens_mm"]
    np.testing.assert_allclose(float(new), (3 * 8 - 3) / 1e6, rtol=1e-5)  # 3 padded positions

  def reference_greedy(self, ids, prefix_lengths, seqlen, eos_id, max_new):
    """Decoding without a cache: rerun the full model on the sequence so far, take the argmax.

    The model is causal, so zeros after the sequence do not change the logits at its end; a
    fixed length compiles once.
    """
    out = []
    for row, plen in zip(ids, prefix_lengths):
      seq = list(row[:plen])
      while len(seq) < seqlen and len(seq) - plen < max_new:
        logits = self.full(np.array([seq + [0] * (seqlen - len(seq))], np.int32))
        seq.append(int(jnp.argmax(logits[0, len(seq) - 1])))
        if seq[-1] == eos_id:
          break
      out.append(seq)
    return out

  def check_decode(self, eos_id=None, max_decode_steps=None):
    # Pax counts max_decode_steps from each row's prompt only with fprop_for_prefix (without
    # it the loop stops max_decode_steps positions after position 0, prompt copies included).
    hp = sample_decode.DecoderHParams(
      seqlen=10,
      eos_id=eos_id,
      max_decode_steps=max_decode_steps,
      fprop_for_prefix=max_decode_steps is not None,
    )
    model = self.model.clone(decoder_tpl=hp)
    batch = lm_batch(seed=3)
    batch.prefix_lengths = np.array([4, 2, 6], np.int32)
    metrics, out, _ = jax.jit(lambda v, b: model.apply(v, b, method="decode"))(
      self.params_only, batch
    )
    # Pax's form: one sample per row; logprobs 1.0 outside the fed and generated tokens.
    out = jax.tree.map(lambda x: x[:, 0] if x.ndim >= 2 and x.shape[1] == 1 else x, out)
    ref = self.reference_greedy(
      batch.ids, batch.prefix_lengths, 10, eos_id, max_new=max_decode_steps or 100
    )
    log_probs = jax.nn.log_softmax(self.full(np.asarray(out.output_ids)), -1)  # [B, S, V]
    for b, seq in enumerate(ref):
      self.assertEqual(int(out.decode_lengths[b]), len(seq), f"row {b}")
      np.testing.assert_array_equal(out.output_ids[b, : len(seq)], seq, err_msg=f"row {b}")
      np.testing.assert_array_equal(out.output_ids[b, len(seq) :], 0)
      for pos in range(batch.prefix_lengths[b], len(seq)):
        self.assertAlmostEqual(
          float(out.logprobs[b, pos]), float(log_probs[b, pos - 1, seq[pos]]), places=4
        )
    np.testing.assert_allclose(metrics["num_decoded"][0], 3)
    return out, ref

  def test_greedy_decode_equals_rerunning_the_full_model_and_stops_at_eos_and_max_steps(self):
    free, _ = self.check_decode()
    np.testing.assert_array_equal(free.decode_lengths, 10)
    # An EOS that row 1 (prompt of 2) emits before the end of its buffer: it stops right after
    # the first one.
    eos = int(free.output_ids[1, 3])
    out, _ = self.check_decode(eos_id=eos)
    first_eos = 2 + list(free.output_ids[1, 2:]).index(eos)
    self.assertEqual(int(out.decode_lengths[1]), first_eos + 1)
    out, _ = self.check_decode(max_decode_steps=2)
    np.testing.assert_array_equal(out.decode_lengths, np.array([4, 2, 6]) + 2)

  def test_prompt_lengths_default_to_the_unpadded_ids(self):
    model = self.model.clone(
      decoder_tpl=sample_decode.DecoderHParams(
        seqlen=10, eos_id=None, max_decode_steps=1, fprop_for_prefix=True
      )
    )
    batch = lm_batch()  # row 1 has 3 padded positions
    _, out, _ = model.apply(self.params_only, batch, method="decode")
    np.testing.assert_array_equal(out.prefix_lengths[:, 0], [8, 5, 8])
    np.testing.assert_array_equal(out.decode_lengths[:, 0], [9, 6, 9])
    np.testing.assert_array_equal(out.output_ids[1, 0, :5], batch.ids[1, :5])

  def test_max_decode_steps_without_fprop_for_prefix_counts_from_position_0(self):
    # Pax's loop: max_decode_steps extend steps from position 0 (positions 1 and 2 written),
    # prompt copies included; no row reaches 2 new tokens, so every decode length stays seqlen.
    model = self.model.clone(
      decoder_tpl=sample_decode.DecoderHParams(seqlen=10, eos_id=None, max_decode_steps=2)
    )
    batch = lm_batch(seed=3)
    batch.prefix_lengths = np.array([4, 2, 6], np.int32)
    _, out, _ = model.apply(self.params_only, batch, method="decode")
    ids = np.asarray(out.output_ids[:, 0])  # [B, S]
    np.testing.assert_array_equal(ids[0, :3], batch.ids[0, :3])  # prompt copies only
    np.testing.assert_array_equal(ids[:, 3:], 0)
    np.testing.assert_array_equal(out.decode_lengths[:, 0], [10, 10, 10])

  def test_sampling_needs_a_random_rng_and_uses_it(self):
    model = self.model.clone(
      decoder_tpl=sample_decode.DecoderHParams(seqlen=10, temperature=1.0, eos_id=None)
    )
    batch = lm_batch()
    batch.prefix_lengths = np.array([1, 1, 1], np.int32)
    with self.assertRaisesRegex(ValueError, "needs a 'random' rng"):
      model.apply(self.params_only, batch, method="decode")
    decode = jax.jit(
      lambda key: (
        model.apply(self.params_only, batch, method="decode", rngs={"random": key})[1].output_ids
      )
    )
    first, second, again = (
      decode(jax.random.key(0)),
      decode(jax.random.key(1)),
      decode(jax.random.key(0)),
    )
    self.assertFalse(np.array_equal(first, second))
    np.testing.assert_array_equal(first, again)

  def test_dropout_runs_only_with_a_dropout_rng(self):
    cfg = lm_model_config()
    cfg.lm_tpl.stacked_transformer_tpl.dropout_prob = 0.5
    model = cfg.Instantiate()
    apply = jax.jit(
      lambda rngs: model.apply(self.params_only, self.batch, rngs=rngs)[0]["avg_xent"][0]
    )
    plain, _ = self.model.apply(self.params_only, self.batch)  # the same weights, no dropout
    np.testing.assert_allclose(apply({}), plain["avg_xent"][0], rtol=1e-6)
    with_dropout = [float(apply({"dropout": jax.random.key(k)})) for k in (0, 1)]
    self.assertNotAlmostEqual(with_dropout[0], float(plain["avg_xent"][0]), places=3)
    self.assertNotAlmostEqual(with_dropout[0], with_dropout[1], places=3)

  def test_a_tiny_lm_learns_a_repeating_pattern(self):
    period, t, b = 5, 12, 8
    rng = np.random.default_rng(0)
    seqs = (rng.integers(0, period, size=(b, 1)) + np.arange(t + 1)) % period + 3  # [B, T + 1]
    batch = NestedMap(
      ids=seqs[:, :-1].astype(np.int32),
      labels=seqs[:, 1:].astype(np.int32),
      paddings=np.zeros((b, t), np.float32),
      weights=np.ones((b, t), np.float32),
    )
    model = lm_model_config(seqlen=t, eos_id=None).Instantiate()
    params = model.init(jax.random.key(0), batch)["params"]
    opt = optax.adam(1e-2)
    opt_state = opt.init(params)

    @jax.jit
    def step(params, opt_state):
      def loss_fn(p):
        metrics, _ = model.apply({"params": p}, batch)
        return metrics["total_loss"][0], metrics

      (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
      updates, opt_state = opt.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state, loss, metrics

    losses = []
    for _ in range(40):
      params, opt_state, loss, metrics = step(params, opt_state)
      losses.append(float(loss))
    self.assertGreater(losses[0], 1.5)  # about log(11) at the start
    self.assertLess(losses[-1], 0.1 * losses[0], losses)
    self.assertGreater(float(metrics["fraction_of_correct_next_step_preds"][0]), 0.95)
    # Greedy decoding now continues the pattern from a two-token prompt.
    prompt = NestedMap(
      ids=batch.ids, paddings=batch.paddings, prefix_lengths=np.full((b,), 2, np.int32)
    )
    _, out, _ = model.apply({"params": params}, prompt, method="decode")
    np.testing.assert_array_equal(out.output_ids[:, 0], seqs[:, :-1])  # [B, 1 sample, T]


if __name__ == "__main__":
  absltest.main()
