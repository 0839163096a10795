"""Numeric tests of the Transformer LM against plain-numpy references."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from praxis import transformer_lm

_VOCAB = 13
_DIMS = 8
_HEADS = 2
_HIDDEN = 16
_MAX_LEN = 7


def _model(num_layers=1, **overrides):
  kwargs = dict(
      vocab_size=_VOCAB,
      model_dims=_DIMS,
      num_layers=num_layers,
      num_heads=_HEADS,
      hidden_dims=_HIDDEN,
      max_seq_len=_MAX_LEN,
  )
  kwargs.update(overrides)
  return transformer_lm.TransformerLm(**kwargs)


def _random_params(model, ids, seed=0):
  """Initialises, then replaces every weight with noise.

  LayerNorm scales start at 1 and biases at 0; with those values a reference
  that forgot them would still match, so the test randomises everything.
  """
  # Unboxed: the weights carry logical-axis metadata, which the numpy reference does not want.
  params = nn.unbox(model.init(jax.random.PRNGKey(seed), ids)["params"])
  leaves, treedef = jax.tree.flatten(params)
  rng = np.random.default_rng(seed)
  noisy = [rng.normal(0.0, 0.5, size=x.shape).astype(np.float32) for x in leaves]
  return jax.tree.unflatten(treedef, noisy)


# ----- Plain numpy reference, written from the math, not from the module. -----


def _np_layer_norm(x, scale, bias, eps=1e-6):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * scale + bias


def _np_gelu(x):  # The tanh approximation, flax's default.
  return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _np_attention(q, k, v):
  """q, k, v: [B, T, N, H]. Loops over positions; no mask trick."""
  b, t, n, h = q.shape
  out = np.zeros_like(q)
  for bi in range(b):
    for ni in range(n):
      for ti in range(t):
        # Only keys 0..ti exist for query ti.
        scores = np.array(
            [q[bi, ti, ni] @ k[bi, si, ni] / math.sqrt(h) for si in range(ti + 1)]
        )
        weights = np.exp(scores - scores.max())
        weights /= weights.sum()
        out[bi, ti, ni] = sum(
            weights[si] * v[bi, si, ni] for si in range(ti + 1)
        )
  return out


def _np_sinusoids(t, d):
  half = d // 2
  pos = np.arange(t)[:, None]
  freq = 1.0 / 10000.0 ** (np.arange(half) / half)
  return np.concatenate([np.sin(pos * freq), np.cos(pos * freq)], axis=-1)


def _np_one_layer_lm(p, ids, learned_positions):
  """Forward pass of a 1-layer model from its params, in float64 numpy."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), p)
  table = p["embedding"]["embedding"]  # [V, D]
  t = ids.shape[1]
  x = table[ids] * math.sqrt(_DIMS)
  x = x + (p["position"]["embedding"][:t] if learned_positions
           else _np_sinusoids(t, _DIMS))
  blk = p["block_0"]
  h = _np_layer_norm(x, **blk["attention_norm"])
  att = blk["attention"]
  q = np.einsum("btd,dnh->btnh", h, att["query"])
  k = np.einsum("btd,dnh->btnh", h, att["key"])
  v = np.einsum("btd,dnh->btnh", h, att["value"])
  x = x + np.einsum("btnh,nhd->btd", _np_attention(q, k, v), att["out"])
  h = _np_layer_norm(x, **blk["mlp_norm"])
  mlp = blk["mlp"]
  h = _np_gelu(h @ mlp["wi"]["kernel"] + mlp["wi"]["bias"])
  x = x + h @ mlp["wo"]["kernel"] + mlp["wo"]["bias"]
  x = _np_layer_norm(x, **p["final_norm"])
  return x @ table.T


class TransformerLmTest(parameterized.TestCase):

  @parameterized.parameters(
      transformer_lm.PositionEmbedding.LEARNED,
      transformer_lm.PositionEmbedding.SINUSOIDAL,
  )
  def test_logits_shape(self, position_embedding):
    model = _model(num_layers=2, position_embedding=position_embedding)
    ids = jnp.zeros((3, 5), jnp.int32)
    variables = model.init(jax.random.PRNGKey(0), ids)
    self.assertEqual(model.apply(variables, ids).shape, (3, 5, _VOCAB))

  def test_causal_attention_matches_numpy(self):
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(2, 5, 3, 4)).astype(np.float32) for _ in range(3))
    got = transformer_lm.causal_self_attention(q, k, v)
    np.testing.assert_allclose(got, _np_attention(q, k, v), rtol=1e-5, atol=1e-5)

  @parameterized.parameters(True, False)
  def test_one_layer_model_matches_numpy(self, learned_positions):
    kind = (transformer_lm.PositionEmbedding.LEARNED if learned_positions
            else transformer_lm.PositionEmbedding.SINUSOIDAL)
    model = _model(position_embedding=kind)
    ids = np.random.default_rng(2).integers(0, _VOCAB, size=(2, 6))
    params = _random_params(model, ids)
    got = model.apply({"params": params}, ids)
    want = _np_one_layer_lm(params, ids, learned_positions)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)

  @parameterized.parameters(1, 3, 5)
  def test_causality(self, t):
    model = _model(num_layers=2)
    ids = np.random.default_rng(3).integers(0, _VOCAB, size=(2, 7))
    params = _random_params(model, ids)
    changed = ids.copy()
    changed[:, t] = (ids[:, t] + 1) % _VOCAB
    before = np.asarray(model.apply({"params": params}, ids))
    after = np.asarray(model.apply({"params": params}, changed))
    # Positions before t never see token t.
    np.testing.assert_array_equal(before[:, :t], after[:, :t])
    # Position t and later do (position t through its own embedding).
    for pos in range(t, ids.shape[1]):
      self.assertGreater(np.abs(before[:, pos] - after[:, pos]).max(), 1e-4,
                         msg=f"logits at {pos} ignore the token at {t}")

  def test_segment_pos_selects_position_embedding(self):
    model = _model()
    ids = np.array([[4, 4, 4]])
    params = _random_params(model, ids)
    default = model.apply({"params": params}, ids)
    explicit = model.apply({"params": params}, ids, np.array([[0, 1, 2]]))
    shifted = model.apply({"params": params}, ids, np.array([[2, 3, 4]]))
    np.testing.assert_array_equal(default, explicit)
    self.assertGreater(np.abs(np.asarray(default - shifted)).max(), 1e-3)

  def test_dropout_only_when_not_deterministic(self):
    model = _model(dropout_rate=0.5)
    ids = np.random.default_rng(4).integers(0, _VOCAB, size=(2, 6))
    params = _random_params(model, ids)
    eval_a = model.apply({"params": params}, ids)
    eval_b = model.apply({"params": params}, ids, deterministic=True)
    train = model.apply({"params": params}, ids, deterministic=False,
                        rngs={"dropout": jax.random.PRNGKey(0)})
    np.testing.assert_array_equal(eval_a, eval_b)
    self.assertGreater(np.abs(np.asarray(train - eval_a)).max(), 1e-3)

  def test_too_long_sequence_is_rejected(self):
    model = _model()
    ids = jnp.zeros((1, _MAX_LEN + 1), jnp.int32)
    with self.assertRaisesRegex(ValueError, "exceeds max_seq_len=7"):
      model.init(jax.random.PRNGKey(0), ids)

  def test_heads_must_divide_dims(self):
    with self.assertRaisesRegex(ValueError, "num_heads=3 must divide"):
      _model(num_heads=3).init(jax.random.PRNGKey(0), jnp.zeros((1, 2), jnp.int32))


class LmLossTest(absltest.TestCase):

  def test_matches_numpy_cross_entropy_and_accuracy(self):
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(2, 4, _VOCAB)).astype(np.float32)
    labels = rng.integers(0, _VOCAB, size=(2, 4))
    labels[0, 0] = logits[0, 0].argmax()  # At least one correct prediction.
    weights = np.array([[1, 1, 0, 1], [0, 1, 1, 1]], np.float32)

    loss, accuracy = transformer_lm.lm_loss(logits, labels, weights)

    xents, hits = [], []
    for b in range(2):
      for t in range(4):
        if weights[b, t]:
          z = logits[b, t].astype(np.float64)
          log_norm = math.log(np.exp(z - z.max()).sum()) + z.max()
          xents.append(log_norm - z[labels[b, t]])
          hits.append(float(z.argmax() == labels[b, t]))
    self.assertAlmostEqual(float(loss), np.mean(xents), places=5)
    self.assertAlmostEqual(float(accuracy), np.mean(hits), places=6)
    self.assertGreater(float(accuracy), 0.0)

  def test_uniform_logits_give_log_vocab(self):
    logits = np.zeros((1, 3, _VOCAB), np.float32)
    loss, _ = transformer_lm.lm_loss(logits, np.zeros((1, 3), int),
                                     np.ones((1, 3)))
    self.assertAlmostEqual(float(loss), math.log(_VOCAB), places=5)

  def test_all_padding_is_zero_not_nan(self):
    logits = np.ones((1, 2, _VOCAB), np.float32)
    loss, accuracy = transformer_lm.lm_loss(logits, np.zeros((1, 2), int),
                                            np.zeros((1, 2)))
    self.assertEqual(float(loss), 0.0)
    self.assertEqual(float(accuracy), 0.0)


class LmModelTest(absltest.TestCase):
  """The trainer-facing wrapper: metrics as (value, weight), greedy decode, axis annotations."""

  def setUp(self):
    super().setUp()
    self.lm = _model(num_layers=1)
    self.model = transformer_lm.LmModel(lm=self.lm, decode_prefix_len=2)
    rng = np.random.default_rng(6)
    ids = rng.integers(0, _VOCAB, size=(2, 6)).astype(np.int32)
    self.batch = transformer_lm.NestedMap(
        ids=ids, labels=np.roll(ids, -1, axis=1),
        weights=np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 1, 1]], np.float32),
        paddings=np.zeros((2, 6), np.float32))
    self.params = {"lm": _random_params(self.lm, ids)}

  def test_metrics_match_lm_loss(self):
    metrics, per_example = self.model.apply({"params": self.params}, self.batch)
    logits = self.lm.apply({"params": self.params["lm"]}, self.batch.ids)
    loss, accuracy = transformer_lm.lm_loss(logits, self.batch.labels, self.batch.weights)
    self.assertAlmostEqual(float(metrics["total_loss"][0]), float(loss), places=5)
    self.assertEqual(float(metrics["total_loss"][1]), 10.0)  # Sum of the weights.
    self.assertAlmostEqual(float(metrics["fraction_of_correct_next_step_preds"][0]),
                           float(accuracy), places=6)
    self.assertEqual(float(metrics["num_predictions"][0]), 10.0)
    # Per-token cross-entropies sum to loss * weight, and are 0 where the weight is.
    self.assertAlmostEqual(float(per_example.per_token_xent.sum()), float(loss) * 10, places=4)
    self.assertEqual(float(per_example.per_token_xent[0, 5]), 0.0)

  def test_paddings_remove_positions(self):
    padded = transformer_lm.NestedMap(self.batch, paddings=np.ones((2, 6), np.float32))
    metrics, _ = self.model.apply({"params": self.params}, padded)
    self.assertEqual(float(metrics["num_predictions"][0]), 0.0)
    self.assertEqual(float(metrics["total_loss"][0]), 0.0)

  def test_greedy_decode_matches_a_step_by_step_reference(self):
    _, out = self.model.apply({"params": self.params}, self.batch, method="decode")
    tokens = np.array(self.batch.ids[:, :2])
    for _ in range(2, 6):
      logits = self.lm.apply({"params": self.params["lm"]}, tokens)
      tokens = np.concatenate([tokens, np.argmax(logits[:, -1], -1)[:, None]], axis=1)
    np.testing.assert_array_equal(out.output_ids, tokens)
    np.testing.assert_array_equal(out.prefix_ids, self.batch.ids[:, :2])

  def test_weights_carry_logical_axes(self):
    boxed = self.model.init(jax.random.PRNGKey(0), self.batch)["params"]
    specs = nn.get_partition_spec(boxed)
    self.assertEqual(tuple(specs["lm"]["embedding"]["embedding"]), ("vocab", "embed"))
    self.assertEqual(tuple(specs["lm"]["block_0"]["attention"]["query"]),
                     ("embed", "heads", "kv"))
    self.assertEqual(tuple(specs["lm"]["block_0"]["mlp"]["wi"]["kernel"]), ("embed", "mlp"))
    for name in jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, tuple)):
      for axis in name:
        self.assertIn(axis, transformer_lm.LOGICAL_AXES)


if __name__ == "__main__":
  absltest.main()
