"""Tests for praxis.layers.embedding_softmax against flax.linen.Embed and numpy, forward and gradient.

Layers are built as Pax users build them (pax_fiddle.Config + base_layer.instantiate) and the
references follow Pax's formulas (label smoothing p / (K - 1) off target, sinusoids times
min_timescale).
"""

from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import embedding_softmax as es


def build(cls, **kwargs):
  return base_layer.instantiate(pax_fiddle.Config(cls, name="layer", **kwargs))


def _log_softmax(z):
  z = z - z.max(-1, keepdims=True)
  return z - np.log(np.exp(z).sum(-1, keepdims=True))


class EmbeddingTest(parameterized.TestCase):
  @parameterized.parameters("index", "matmul")
  def test_matches_flax_embed_forward_and_gradient(self, style):
    layer = build(es.Embedding, num_classes=11, input_dims=4, lookup_style=style)
    ids = jnp.array([[1, 5, 5, 0], [10, 3, 1, 1]])
    variables = layer.init(jax.random.key(0), ids)
    table = variables["params"]["emb_var"]
    self.assertEqual(table.shape, (11, 4))  # emb_var[V, D]
    ref = nn.Embed(11, 4)
    ref_vars = {"params": {"embedding": table}}
    np.testing.assert_allclose(layer.apply(variables, ids), ref.apply(ref_vars, ids), rtol=1e-6)
    cot = jax.random.normal(jax.random.key(1), (2, 4, 4))
    ours = jax.grad(lambda v: jnp.sum(layer.apply(v, ids) * cot))(variables)
    theirs = jax.grad(lambda v: jnp.sum(ref.apply(v, ids) * cot))(ref_vars)
    np.testing.assert_allclose(
      ours["params"]["emb_var"], theirs["params"]["embedding"], rtol=1e-5, atol=1e-6
    )
    # By hand: repeated ids accumulate; unused rows get zero.
    expected = np.zeros((11, 4))
    np.add.at(expected, np.asarray(ids).ravel(), np.asarray(cot).reshape(-1, 4))
    np.testing.assert_allclose(ours["params"]["emb_var"], expected, rtol=1e-5, atol=1e-6)

  def test_scale_sqrt_depth_and_axes(self):
    layer = build(es.Embedding, num_classes=5, input_dims=9, scale_sqrt_depth=True)
    ids = jnp.array([[0, 4]])
    boxed = base_layer.init_boxed(layer, jax.random.key(0), ids)
    self.assertEqual(boxed["params"]["emb_var"].names, ("vocab", "embed"))
    variables = layer.init(jax.random.key(0), ids)  # Pax's init: plain arrays
    table = np.asarray(variables["params"]["emb_var"])
    np.testing.assert_allclose(layer.apply(variables, ids), 3.0 * table[[[0, 4]]], rtol=1e-6)

  @parameterized.parameters("index", "matmul")
  def test_out_of_range_ids_clip_or_nan(self, style):
    ids = jnp.array([[0, 7, -1]])
    clip = build(es.Embedding, num_classes=5, input_dims=2, lookup_style=style)
    variables = clip.init(jax.random.key(0), ids)
    out = np.asarray(clip.apply(variables, ids))
    self.assertTrue(np.all(np.isfinite(out)))
    # Pax's set_nan_for_oob_id marks ids >= num_classes (a negative id is not caught).
    nan = build(
      es.Embedding, num_classes=5, input_dims=2, lookup_style=style, set_nan_for_oob_id=True
    )
    out = np.asarray(nan.apply(variables, ids))
    self.assertTrue(np.all(np.isfinite(out[0, 0])))
    self.assertTrue(np.all(np.isnan(out[0, 1])))
    self.assertTrue(np.all(np.isfinite(out[0, 2])))


class FullSoftmaxTest(parameterized.TestCase):
  def _numpy_reference(self, x, w, b, ids, weights, cap, z_weight, smoothing):
    """Forward values and d(avg_xent + z_loss)/d(x, w, b), derived by hand."""
    raw = x @ w + b  # [B, T, V]
    logits = cap * np.tanh(raw / cap) if cap else raw
    logp = _log_softmax(logits)
    v = w.shape[1]
    target = np.eye(v)[ids]
    # Pax: the label keeps 1 - p, every other class gets p / (V - 1).
    target = (1 - smoothing) * target + smoothing / (v - 1) * (1 - target)
    xent = -(target * logp).sum(-1)
    total_w = weights.sum()
    lse = np.log(np.exp(logits).sum(-1))
    out = dict(
      logits=logits,
      log_probs=logp,
      per_example_xent=xent,
      per_example_argmax=logits.argmax(-1),
      total_xent=(xent * weights).sum(),
      total_weight=total_w,
      avg_xent=(xent * weights).sum() / (total_w + 1e-6),
      z_loss=z_weight * (lse**2 * weights).sum() / total_w,
    )
    probs = np.exp(logp)
    d_logits = weights[..., None] * (probs - target + z_weight * 2 * lse[..., None] * probs)
    d_logits /= total_w + 1e-6
    d_raw = d_logits * (1 - np.tanh(raw / cap) ** 2) if cap else d_logits
    grads = dict(x=d_raw @ w.T, w=np.einsum("btd,btv->dv", x, d_raw), b=d_raw.sum((0, 1)))
    return out, grads

  @parameterized.named_parameters(
    ("plain", 0.0, 0.0, 0.0),
    ("soft_cap", 2.0, 0.0, 0.0),
    ("z_loss", 0.0, 0.1, 0.0),
    ("all_options", 1.5, 0.05, 0.1),
  )
  def test_matches_numpy_forward_and_gradient(self, cap, z_weight, smoothing):
    layer = build(
      es.FullSoftmax,
      input_dims=5,
      num_classes=7,
      soft_cap_logits=cap,
      z_loss_weight=z_weight,
      label_smoothing_prob=smoothing,
    )
    x = 2.0 * jax.random.normal(jax.random.key(0), (2, 3, 5))
    ids = jnp.array([[1, 6, 0], [3, 3, 2]])
    weights = jnp.array([[1.0, 1.0, 0.0], [1.0, 0.5, 1.0]])
    # Keep only the params: init also returns what it sowed into "aux_loss".
    variables = {
      "params": layer.init(jax.random.key(1), x, weights[..., None], ids[..., None])["params"]
    }
    params = variables["params"]["logits_ffn"]
    params["bias"]["b"] = jnp.linspace(-1.0, 1.0, 7)  # a bias that matters
    w, b = np.asarray(params["linear"]["w"], np.float64), np.asarray(params["bias"]["b"])
    expected, expected_grads = self._numpy_reference(
      np.asarray(x, np.float64),
      w,
      b,
      np.asarray(ids),
      np.asarray(weights),
      cap,
      z_weight,
      smoothing,
    )
    out, mutated = layer.apply(
      variables, x, weights[..., None], ids[..., None], mutable=[base_layer.AUX_LOSS]
    )
    for key, value in expected.items():
      if key == "z_loss" and not z_weight:
        self.assertNotIn("z_loss", out)  # Pax reports z_loss only when it is on
        continue
      np.testing.assert_allclose(np.asarray(out[key]), value, rtol=2e-5, atol=2e-5, err_msg=key)
    if z_weight:
      ((aux_value, _),) = mutated[base_layer.AUX_LOSS]["aux_z_loss"]
      np.testing.assert_allclose(aux_value, expected["z_loss"], rtol=1e-5)
    else:
      self.assertNotIn("aux_z_loss", mutated.get(base_layer.AUX_LOSS, {}))

    def loss(v, x):
      o = layer.apply(v, x, weights[..., None], ids[..., None])
      return o.avg_xent + o.get("z_loss", 0.0)

    g_vars, g_x = jax.grad(loss, argnums=(0, 1))(variables, x)
    g = g_vars["params"]["logits_ffn"]
    np.testing.assert_allclose(g["linear"]["w"], expected_grads["w"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(g["bias"]["b"], expected_grads["b"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(g_x, expected_grads["x"], rtol=1e-4, atol=1e-6)

  def test_class_probabilities_unsqueezed_ids_and_empty_batch(self):
    layer = build(es.FullSoftmax, input_dims=3, num_classes=4)
    x = jax.random.normal(jax.random.key(0), (2, 2, 3))
    ids = jnp.array([[0, 3], [2, 1]])
    variables = layer.init(jax.random.key(1), x, jnp.ones((2, 2, 1)), ids[..., None])
    with_ids = layer.apply(variables, x, jnp.ones((2, 2)), ids)  # [B, T] accepted too
    with_probs = layer.apply(
      variables, x, jnp.ones((2, 2, 1)), class_probabilities=jax.nn.one_hot(ids, 4)
    )
    np.testing.assert_allclose(with_ids.avg_xent, with_probs.avg_xent, rtol=1e-6)
    empty = layer.apply(variables, x, jnp.zeros((2, 2, 1)), ids[..., None])
    self.assertEqual(float(empty.avg_xent), 0.0)
    with self.assertRaisesRegex(ValueError, r"class_weights must be \[\.\.\., 1\]"):
      layer.apply(variables, x, jnp.ones((2, 3, 1)), ids[..., None])

  def test_label_smoothing_applies_to_class_ids_only(self):
    layer = build(es.FullSoftmax, input_dims=3, num_classes=5, label_smoothing_prob=0.2)
    plain = build(es.FullSoftmax, input_dims=3, num_classes=5)
    x = jax.random.normal(jax.random.key(0), (2, 3))
    ids = jnp.array([[1], [4]])
    weights = jnp.ones((2, 1))
    variables = plain.init(jax.random.key(1), x, weights, ids)
    probs = jax.nn.one_hot(ids[:, 0], 5)
    # Given distributions are used as they are (Pax smooths only class ids).
    np.testing.assert_allclose(
      layer.apply(variables, x, weights, class_probabilities=probs).per_example_xent,
      plain.apply(variables, x, weights, class_probabilities=probs).per_example_xent,
      rtol=1e-6,
    )
    logp = np.asarray(plain.apply(variables, x, weights, ids).log_probs, np.float64)
    target = np.full((2, 5), 0.2 / 4)
    target[[0, 1], [1, 4]] = 0.8
    np.testing.assert_allclose(
      layer.apply(variables, x, weights, ids).per_example_xent, -(target * logp).sum(-1), rtol=1e-5
    )

  @parameterized.parameters(0.0, 0.3)
  def test_ids_outside_the_classes_have_no_label_term(self, smoothing):
    # Pax's one-hot target of an id outside [0, V) is all zeros (then only smoothing remains).
    layer = build(es.FullSoftmax, input_dims=3, num_classes=5, label_smoothing_prob=smoothing)
    x = jax.random.normal(jax.random.key(0), (4, 3))
    ids = jnp.array([[1], [5], [-1], [4]])
    weights = jnp.ones((4, 1))
    variables = layer.init(jax.random.key(1), x, weights, ids)
    out = layer.apply(variables, x, weights, ids)
    logp = np.asarray(out.log_probs, np.float64)
    target = np.asarray(jax.nn.one_hot(ids[:, 0], 5), np.float64)  # rows 1 and 2 all zero
    target = (1 - smoothing) * target + smoothing / 4 * (1 - target)
    np.testing.assert_allclose(out.per_example_xent, -(target * logp).sum(-1), rtol=1e-5, atol=1e-6)
    if not smoothing:
      np.testing.assert_array_equal(np.asarray(out.per_example_xent)[1:3], 0.0)

  def test_float_ids_are_taken_as_pax_one_hot_takes_them(self):
    # Pax builds the target with one_hot(class_ids), which also takes float ids (Pax's
    # SequenceModel feeds them): whole numbers are those classes, others match none.
    layer = build(es.FullSoftmax, input_dims=3, num_classes=5)
    x = jax.random.normal(jax.random.key(0), (3, 3))
    ids = jnp.array([[1.0], [4.0], [2.5]], jnp.float32)
    weights = jnp.ones((3, 1))
    variables = layer.init(jax.random.key(1), x, weights, ids)
    out = layer.apply(variables, x, weights, ids)
    logp = np.asarray(out.log_probs, np.float64)
    target = np.asarray(jax.nn.one_hot(ids[:, 0], 5), np.float64)  # row 2 all zero
    np.testing.assert_allclose(out.per_example_xent, -(target * logp).sum(-1), rtol=1e-5, atol=1e-6)

  def test_weight_axes(self):
    layer = build(es.FullSoftmax, input_dims=3, num_classes=4)
    x = jnp.ones((1, 2, 3))
    boxed = base_layer.init_boxed(
      layer, jax.random.key(0), x, jnp.ones((1, 2, 1)), jnp.zeros((1, 2, 1), jnp.int32)
    )
    self.assertEqual(boxed["params"]["logits_ffn"]["linear"]["w"].names, ("embed", "vocab"))
    self.assertEqual(boxed["params"]["logits_ffn"]["bias"]["b"].names, ("vocab",))


class SharedEmbeddingSoftmaxTest(absltest.TestCase):
  def test_one_weight_embeds_and_projects_and_gets_both_gradients(self):
    ffn = pax_fiddle.Config(es.linears.FeedForward, has_bias=False)
    layer = build(
      es.SharedEmbeddingSoftmax,
      input_dims=4,
      num_classes=6,
      scale_sqrt_depth=True,
      feed_forward_tpl=ffn,
    )
    ids = jnp.array([[1, 2, 2], [5, 0, 1]])
    variables = layer.init(jax.random.key(0), ids, method=layer.emb_lookup)
    self.assertEqual(
      jax.tree_util.tree_structure(variables["params"]),
      jax.tree_util.tree_structure({"logits_ffn": {"linear": {"w": 0}}}),
    )
    w = np.asarray(variables["params"]["logits_ffn"]["linear"]["w"], np.float64)  # [D, V]
    embs = layer.apply(variables, ids, method=layer.emb_lookup)
    np.testing.assert_allclose(embs, 2.0 * w.T[np.asarray(ids)], rtol=1e-6)  # sqrt(4) = 2

    cot = np.random.RandomState(0).normal(size=(2, 3, 4))
    weights = jnp.ones((2, 3, 1))

    def loss(v):
      e = layer.apply(v, ids, method=layer.emb_lookup)  # [B, T, D]
      xent = layer.apply(v, e, weights, ids[..., None]).total_xent
      return jnp.sum(e * cot) + xent

    grad = np.asarray(jax.grad(loss)(variables)["params"]["logits_ffn"]["linear"]["w"])
    # By hand: through the lookup, 2 * cot scattered into columns of w; through the softmax with
    # inputs e fixed, e^T (p - onehot); plus the softmax path back into e, then into w again.
    e = 2.0 * w.T[np.asarray(ids)]  # [B, T, D]
    logits = e @ w
    d_logits = np.exp(_log_softmax(logits)) - np.eye(6)[np.asarray(ids)]  # [B, T, V]
    d_e = cot + d_logits @ w.T  # [B, T, D]
    expected = np.einsum("btd,btv->dv", e, d_logits)
    for (bi, ti), token in np.ndenumerate(np.asarray(ids)):
      expected[:, token] += 2.0 * d_e[bi, ti]
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-5)


class PositionalEmbeddingTest(parameterized.TestCase):
  def _numpy_signal(self, positions, dims, min_ts=1.0, max_ts=10_000.0):
    """Pax's formula: frequency_i = min_ts * (max_ts / min_ts) ** (-i / (D/2 - 1))."""
    half = dims // 2
    out = np.zeros(positions.shape + (dims,))
    for i in range(half):
      freq = min_ts * (max_ts / min_ts) ** (-i / (half - 1))
      out[..., i] = np.sin(positions * freq)
      out[..., half + i] = np.cos(positions * freq)
    return out

  @parameterized.parameters((1, 100), (2, 100), (10, 10_000))
  def test_matches_numpy_for_default_and_given_positions(self, min_ts, max_ts):
    layer = build(
      es.PositionalEmbedding, embedding_dims=8, min_timescale=min_ts, max_timescale=max_ts
    )
    out = layer.apply({}, seq_length=5)
    self.assertEqual(out.shape, (1, 5, 8))
    np.testing.assert_allclose(
      out[0], self._numpy_signal(np.arange(5.0), 8, min_ts, max_ts), atol=2e-5
    )
    np.testing.assert_allclose(out[0, 0], [0, 0, 0, 0, 1, 1, 1, 1], atol=1e-7)
    position = jnp.array([[3, 4, 5], [0, 0, 1]])
    out = layer.apply({}, position=position)
    np.testing.assert_allclose(
      out, self._numpy_signal(np.asarray(position, np.float64), 8, min_ts, max_ts), atol=2e-5
    )

  def test_min_timescale_multiplies_the_frequencies(self):
    # The silent difference this pins: Pax multiplies by min_timescale (frequency 2 at i = 0),
    # not by 1 / min_timescale (0.5).
    out = build(es.PositionalEmbedding, embedding_dims=4, min_timescale=2, max_timescale=20).apply(
      {}, seq_length=2
    )
    np.testing.assert_allclose(out[0, 1, 0], np.sin(2.0), rtol=1e-6)

  def test_odd_dims_pad_with_zero(self):
    out = build(es.PositionalEmbedding, embedding_dims=7).apply({}, seq_length=3)
    self.assertEqual(out.shape, (1, 3, 7))
    np.testing.assert_allclose(out[0, :, :6], self._numpy_signal(np.arange(3.0), 6), atol=1e-5)
    np.testing.assert_array_equal(out[0, :, 6], 0.0)


class RotaryPositionalEmbeddingTest(absltest.TestCase):
  def _numpy_rope(self, x, positions):
    """Pairs (i, i + H/2) as complex numbers, multiplied by exp(i * pos * f_i)."""
    h = x.shape[-1] // 2
    freqs = 1.0 / 10_000.0 ** (2 * np.arange(h) / (2 * h))
    z = x[..., :h] + 1j * x[..., h:]
    z = z * np.exp(1j * positions[:, :, None, None] * freqs)
    return np.concatenate([z.real, z.imag], axis=-1)

  def test_matches_complex_rotation_forward_and_gradient(self):
    layer = build(es.RotaryPositionalEmbedding, embedding_dims=8)
    x = jax.random.normal(jax.random.key(0), (2, 5, 3, 8))
    position = jnp.array([[0, 1, 2, 3, 4], [7, 8, 9, 100, 1000]])
    out = layer.apply({}, x, position)
    np.testing.assert_allclose(
      out,
      self._numpy_rope(np.asarray(x, np.float64), np.asarray(position, np.float64)),
      rtol=1e-4,
      atol=1e-4,
    )
    default = layer.apply({}, x)  # positions 0..T-1
    np.testing.assert_allclose(default[0], out[0], rtol=1e-6)
    # The rotation is orthogonal: the gradient of sum(out * cot) is cot rotated back.
    cot = np.asarray(jax.random.normal(jax.random.key(1), x.shape), np.float64)
    grad = jax.grad(lambda v: jnp.sum(layer.apply({}, v, position) * cot))(x)
    np.testing.assert_allclose(
      grad, self._numpy_rope(cot, -np.asarray(position, np.float64)), rtol=1e-4, atol=1e-4
    )

  def test_scores_depend_only_on_relative_position(self):
    layer = build(es.RotaryPositionalEmbedding, embedding_dims=16)
    q = jax.random.normal(jax.random.key(0), (1, 1, 1, 16))
    k = jax.random.normal(jax.random.key(1), (1, 1, 1, 16))

    def score(pq, pk):
      rq = layer.apply({}, q, jnp.array([[pq]]))
      rk = layer.apply({}, k, jnp.array([[pk]]))
      return float(jnp.sum(rq * rk))

    self.assertAlmostEqual(score(3, 1), score(13, 11), places=4)
    self.assertNotAlmostEqual(score(3, 1), score(3, 2), places=3)


class TrainablePositionalEmbeddingTest(absltest.TestCase):
  def test_lookup_and_gradient(self):
    layer = build(
      es.TrainablePositionalEmbedding, max_seq_length=6, embedding_dims=3, lookup_style="index"
    )
    variables = layer.init(jax.random.key(0), seq_length=4)
    table = np.asarray(variables["params"]["emb_var"])
    self.assertEqual(table.shape, (6, 3))
    np.testing.assert_allclose(layer.apply(variables, seq_length=4), table[None, :4], rtol=1e-6)
    position = jnp.array([[2, 2, 5], [0, 1, 2]])
    np.testing.assert_allclose(
      layer.apply(variables, position=position), table[np.asarray(position)], rtol=1e-6
    )
    cot = np.random.RandomState(0).normal(size=(2, 3, 3))
    grad = jax.grad(lambda v: jnp.sum(layer.apply(v, position=position) * cot))(variables)
    expected = np.zeros((6, 3))
    np.add.at(expected, np.asarray(position).ravel(), cot.reshape(-1, 3))
    np.testing.assert_allclose(grad["params"]["emb_var"], expected, rtol=1e-5, atol=1e-6)
    with self.assertRaisesRegex(ValueError, "seq_length 7 exceeds max_seq_length 6"):
      layer.apply(variables, seq_length=7)


if __name__ == "__main__":
  absltest.main()
