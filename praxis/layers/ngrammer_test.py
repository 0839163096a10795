"""Tests for praxis.layers.ngrammer against a numpy reference written from the formulas.

The reference hashes bi-grams with explicit loops over positions and heads, normalises with a
hand-written layer norm, and finds clusters by brute-force distances; the TransformerLm test
checks that decoding with the ngrammer's cached prefix gives the forward pass's logits.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import attentions
from praxis.layers import embedding_softmax
from praxis.layers import ngrammer
from praxis.layers import transformer_models

B, L, N, H, E = 2, 5, 2, 4, 3
UNIGRAMS, BUCKETS, K = 7, 11, 3
PRIMES_ABOVE_11 = [13, 17]


def bigram_ref(ids, vocab, segment_pos=None, pair_ids=None):
  out = np.zeros_like(ids)
  for b in range(ids.shape[0]):
    for t in range(ids.shape[1]):
      if pair_ids is not None:
        p = pair_ids[b, t]
        partner = 0 if p == ids.shape[1] else ids[b, p]
      else:
        partner = ids[b, t - 1] if t > 0 else 0
      if segment_pos is not None and segment_pos[b, t] == 0:
        partner = 0
      out[b, t] = ids[b, t] + partner * vocab
  return out


def layer_norm(x, eps=1e-6):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps)


def ngrammer_ref(params, ids_per_head, embs, vocab, dim, concat, pair_ids=None):
  """[B, L, N, H] output with bi-gram dims `dim`; the LayerNorms at their initial (identity)
  scale and zero bias."""
  out = np.zeros(embs.shape[:2] + (N, H))
  for i in range(N):
    pairs = None if pair_ids is None else pair_ids[:, i]
    bigrams = bigram_ref(ids_per_head[i], vocab, None, pairs)
    hashed = ((bigrams * (i + 1) + (i + 1)) % PRIMES_ABOVE_11[i]) % BUCKETS
    table = np.asarray(params[f"ngram_table_{i}"]["emb_var"])
    ngram = layer_norm(table[hashed])  # [B, L, E]
    emb = layer_norm(embs[:, :, i])  # [B, L, H]
    out[:, :, i] = np.concatenate([emb[..., : H - dim], ngram], -1) if concat else emb + ngram
  return out


class NgrammerTest(absltest.TestCase):
  def test_bigram_ids(self):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, UNIGRAMS, (B, L))
    segment_pos = np.array([[0, 1, 2, 0, 1], [0, 1, 0, 1, 2]])
    pair_ids = rng.integers(0, L + 1, (B, L))
    np.testing.assert_array_equal(ngrammer.get_bigram_ids(ids, 7), bigram_ref(ids, 7))
    np.testing.assert_array_equal(
      ngrammer.get_bigram_ids(ids, 7, segment_pos), bigram_ref(ids, 7, segment_pos)
    )
    np.testing.assert_array_equal(
      ngrammer.get_bigram_ids(ids, 7, pair_ids=pair_ids), bigram_ref(ids, 7, pair_ids=pair_ids)
    )

  def test_primes(self):
    self.assertEqual(ngrammer._primes_above(11, 2), PRIMES_ABOVE_11)
    self.assertEqual(ngrammer._primes_above(768 * 256, 1), [196613])

  def test_ngrammer_matches_reference(self):
    rng = np.random.default_rng(1)
    ids = rng.integers(0, UNIGRAMS, (B, L))
    embs = rng.normal(size=(B, L, N * H)).astype(np.float32)
    for concat, dim in ((True, E), (False, H)):
      layer = base_layer.instantiate(
        pax_fiddle.Config(
          ngrammer.Ngrammer,
          name="ng",
          ngram_vocab_size=BUCKETS,
          unigram_vocab_size=UNIGRAMS,
          ngram_emb_dim=dim,
          concat_ngrams=concat,
          num_heads=N,
          dim_per_head=H,
        )
      )
      variables = layer.init(jax.random.PRNGKey(0), ids, embs)
      params = variables["params"]
      self.assertEqual(
        sorted(params),
        sorted(
          [f"emb_layer_norm_{i}" for i in range(N)]
          + [f"ngram_layer_norm_{i}" for i in range(N)]
          + [f"ngram_table_{i}" for i in range(N)]
        ),
      )
      self.assertEqual(params["ngram_table_1"]["emb_var"].shape, (BUCKETS, dim))
      out = layer.apply(variables, ids, embs)
      want = ngrammer_ref(params, [ids] * N, embs.reshape(B, L, N, H), UNIGRAMS, dim, concat)
      np.testing.assert_allclose(out, want.reshape(B, L, N * H), atol=1e-5)
      paddings = np.zeros((B, L), np.float32)
      paddings[1, 3:] = 1
      padded = layer.apply(variables, ids, embs, paddings=paddings, merge_heads=False)
      np.testing.assert_allclose(padded[1, 3:], 0.0)
      np.testing.assert_allclose(padded[0], want[0], atol=1e-5)

  def test_vq_ngrammer_clusters_and_pairs(self):
    rng = np.random.default_rng(2)
    embs = rng.normal(size=(B, L, N * H)).astype(np.float32)
    scores = rng.uniform(size=(B, N, L, L)).astype(np.float32)
    layer = base_layer.instantiate(
      pax_fiddle.Config(
        ngrammer.VQNgrammer,
        name="vq",
        ngram_vocab_size=BUCKETS,
        ngram_emb_dim=E,
        concat_ngrams=True,
        num_clusters=K,
        num_heads=N,
        dim_per_head=H,
        ngram_using_attention_scores=True,
      )
    )
    with base_layer.JaxContext.new_context(hparams=base_layer.JaxContext.HParams(do_eval=True)):
      variables = layer.init(jax.random.PRNGKey(0), None, embs, attention_scores=scores)
      out = layer.apply(variables, None, embs, attention_scores=scores, merge_heads=False)
    means = np.asarray(variables["non_trainable"]["vq_layer"]["means"])  # [N, K, H]
    self.assertEqual(means.shape, (N, K, H))
    x = embs.reshape(B, L, N, H)
    dists = ((x[:, :, :, None, :] - means[None, None]) ** 2).sum(-1)  # [B, L, N, K]
    clusters = dists.argmin(-1)
    # Causal pairing: each position's partner is its most-attended earlier position; PAD first.
    pair_ids = np.zeros((B, N, L), np.int64)
    for t in range(L):
      pair_ids[:, :, t] = L if t == 0 else scores[:, :, t, :t].argmax(-1)
    want = ngrammer_ref(
      variables["params"]["ngram_layer"],
      [clusters[:, :, i] for i in range(N)],
      x,
      K,
      E,
      True,
      pair_ids=pair_ids,
    )
    np.testing.assert_allclose(out, want, atol=1e-5)
    # extend_step at step t pairs every position with the best earlier one of row t, so its
    # output at t is the forward output at t.
    for t in range(L):
      with base_layer.JaxContext.new_context(hparams=base_layer.JaxContext.HParams(do_eval=True)):
        step_out = layer.apply(
          variables,
          embs,
          t,
          merge_heads=False,
          attention_score=scores[:, :, t, :],
          method=layer.extend_step,
        )
      np.testing.assert_allclose(step_out, want[:, t], atol=1e-5)

  def test_vector_quantization_update(self):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(B, L, N, H)).astype(np.float32)
    layer = base_layer.instantiate(
      pax_fiddle.Config(
        ngrammer.VectorQuantization,
        name="vq",
        num_clusters=K,
        num_heads=N,
        dim_per_head=H,
        decay=0.9,
      )
    )
    variables = layer.init(jax.random.PRNGKey(0), x)
    (dists, nearest), mutated = layer.apply(variables, x, mutable=["non_trainable", "summaries"])
    means = np.asarray(variables["non_trainable"]["means"])
    want_dists = ((x[:, :, :, None, :] - means[None, None]) ** 2).sum(-1)
    np.testing.assert_allclose(dists, want_dists, rtol=1e-4, atol=1e-4)
    one_hot = np.eye(K)[want_dists.argmin(-1)]  # [B, L, N, K]
    np.testing.assert_allclose(nearest, np.einsum("blnk,nkh->blnh", one_hot, means), atol=1e-6)
    count = one_hot.sum((0, 1))  # [N, K]
    batch_means = np.einsum("blnk,blnh->nkh", one_hot, x) / (1e-6 + count[..., None])
    np.testing.assert_allclose(
      mutated["non_trainable"]["means"], 0.1 * batch_means + 0.9 * means, rtol=1e-5, atol=1e-6
    )


class NgrammerLmTest(absltest.TestCase):
  def test_decoding_matches_forward(self):
    """Each extend_step's logits equal the forward pass's, for both ngrammers (the cached
    prefix supplies the bi-gram partner), one position and two positions at a time."""
    vocab, heads, dim, length = 8, 2, 4, 6
    for ngram_cfg in (
      pax_fiddle.Config(ngrammer.Ngrammer, unigram_vocab_size=vocab),
      pax_fiddle.Config(ngrammer.VQNgrammer, num_clusters=2),
    ):
      ngram_cfg.set(
        ngram_vocab_size=16, ngram_emb_dim=2, concat_ngrams=True, num_heads=heads, dim_per_head=dim
      )
      cfg = pax_fiddle.Config(
        transformer_models.TransformerLm,
        name="lm",
        model_dims=heads * dim,
        vocab_size=vocab,
        ngrammer_tpl=ngram_cfg,
      )
      cfg.separate_embedding_tpl = pax_fiddle.Config(embedding_softmax.Embedding)
      cfg.softmax_tpl = pax_fiddle.Config(embedding_softmax.FullSoftmax)
      stack = cfg.stacked_transformer_tpl
      stack.set(num_layers=2, num_heads=heads, hidden_dims=16)
      # The LPB attention decodes several positions per call (Pax's multi-step extend).
      stack.transformer_layer_params_tpl.tr_atten_tpl = pax_fiddle.Config(
        attentions.DotProductAttentionWithLPB
      )
      lm = base_layer.instantiate(cfg)
      ids = jnp.asarray(np.random.default_rng(4).integers(1, vocab, (B, length)), jnp.int32)
      zeros = jnp.zeros_like(ids)
      eval_ctx = base_layer.JaxContext.HParams(do_eval=True)
      with base_layer.JaxContext.new_context(hparams=eval_ctx):
        variables = lm.init(jax.random.PRNGKey(0), ids, zeros)
        self.assertIn("ngrammer", variables["params"])
        logits = lm.apply(variables, ids, zeros).logits  # [B, T, V]
        _, cache = lm.apply(variables, zeros, zeros, mutable=["decoder_cache"])
        self.assertEqual(cache["decoder_cache"]["ngrammer_prefix_emb"].shape, (B, 1, heads * dim))
        state = py_utils.merge_dict(cache, variables)
        for t in range(length):
          out, cache = lm.apply(state, ids[:, t], method=lm.extend_step, mutable=["decoder_cache"])
          state = py_utils.merge_dict(cache, variables)
          np.testing.assert_allclose(out.logits, logits[:, t], atol=1e-5)
        # Two positions per call, with the causal mask rows of those positions.
        _, cache = lm.apply(variables, zeros, zeros, mutable=["decoder_cache"])
        state = py_utils.merge_dict(cache, variables)
        causal = attentions.causal_mask(jnp.zeros((B, length, heads * dim)))  # [1, 1, T, T]
        for t in range(0, length, 2):
          out, cache = lm.apply(
            state,
            ids[:, t : t + 2],
            atten_mask=jnp.broadcast_to(causal[..., t : t + 2, :], (B, 1, 2, length)),
            method=lm.extend_step,
            mutable=["decoder_cache"],
          )
          state = py_utils.merge_dict(cache, variables)
          np.testing.assert_allclose(out.logits, logits[:, t : t + 2], atol=1e-5)
          np.testing.assert_allclose(jnp.sum(out.probs, -1), 1.0, atol=1e-5)

  def test_post_attention_ngrammer_decoding_matches_forward(self):
    """A VQNgrammer inside each self-attention (pairing by attention scores): its weights sit
    under self_attention/ngrammer, and step-by-step decoding gives the forward logits."""
    vocab, heads, dim, length = 8, 2, 4, 5
    post = pax_fiddle.Config(
      ngrammer.VQNgrammer,
      ngram_vocab_size=8,
      ngram_emb_dim=2,
      ngram_using_attention_scores=True,
      concat_ngrams=True,
      num_clusters=2,
      num_heads=heads,
      dim_per_head=dim,
    )
    cfg = pax_fiddle.Config(
      transformer_models.TransformerLm,
      name="lm",
      model_dims=heads * dim,
      vocab_size=vocab,
      post_attention_ngrammer_tpls=[post, post],
    )
    cfg.stacked_transformer_tpl.set(num_layers=2, num_heads=heads, hidden_dims=16)
    lm = base_layer.instantiate(cfg)
    ids = jnp.asarray(np.random.default_rng(5).integers(1, vocab, (B, length)), jnp.int32)
    zeros = jnp.zeros_like(ids)
    with base_layer.JaxContext.new_context(hparams=base_layer.JaxContext.HParams(do_eval=True)):
      variables = lm.init(jax.random.PRNGKey(0), ids, zeros)
      attention = variables["params"]["transformer"]["x_layers_1"]["self_attention"]
      self.assertIn("ngram_table_0", attention["ngrammer"]["ngram_layer"])
      self.assertEqual(
        variables["non_trainable"]["transformer"]["x_layers_1"]["self_attention"]["ngrammer"][
          "vq_layer"
        ]["means"].shape,
        (heads, 2, dim),
      )
      logits = lm.apply(variables, ids, zeros).logits
      _, cache = lm.apply(variables, zeros, zeros, mutable=["decoder_cache"])
      for t in range(length):
        state = py_utils.merge_dict(cache, variables)
        out, cache = lm.apply(state, ids[:, t], method=lm.extend_step, mutable=["decoder_cache"])
        np.testing.assert_allclose(out.logits, logits[:, t], atol=1e-5)

  def test_attention_without_ngrammer_decoding_refuses_it(self):
    atten = base_layer.instantiate(
      pax_fiddle.Config(
        attentions.DotProductAttentionWithLPB,
        name="atten",
        input_dim=8,
        hidden_dim=8,
        num_heads=2,
        ngrammer_tpl=pax_fiddle.Config(
          ngrammer.VQNgrammer, num_clusters=2, num_heads=2, dim_per_head=4, ngram_emb_dim=4
        ),
      )
    )
    x = jnp.zeros((1, 3, 8))
    with self.assertRaisesRegex(NotImplementedError, "DotProductAttentionWithLPB.ngrammer_tpl"):
      atten.init(jax.random.PRNGKey(0), x, x, x, jnp.zeros((1, 1, 1, 3)))


if __name__ == "__main__":
  absltest.main()
