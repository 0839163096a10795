"""LanguageModel.decode with Pax's decoder settings: greedy, sampling and beam search.

References run the full model (no cache) on every candidate sequence, so the KV cache and the
search's reordering of it are checked, not assumed.
"""

import itertools

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import decoder_utils
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import lm_decode
from praxis.layers import lpb_attention
from praxis.layers import models
from praxis.layers import sample_decode
from praxis.layers import transformer_models
from praxis.layers import transformers

NestedMap = pytypes.NestedMap
V, EOS = 5, 4


def model_config(decoder) -> pax_fiddle.Config:
  stack = pax_fiddle.Config(
    transformers.StackedTransformer, num_layers=1, hidden_dims=16, num_heads=2, dim_per_head=4
  )
  lm = pax_fiddle.Config(
    transformer_models.TransformerLm, model_dims=8, vocab_size=V, stacked_transformer_tpl=stack
  )
  return pax_fiddle.Config(models.LanguageModel, name="lm", lm_tpl=lm, decoder_tpl=decoder)


class LmDecodeTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.batch = NestedMap(
      ids=np.array([[1, 2, 0, 0], [3, 0, 1, 2]], np.int32),
      paddings=np.array([[0, 0, 1, 1], [0, 0, 0, 0]], np.float32),
    )
    model = base_layer.instantiate(model_config(models.GreedyDecoderHParams(seqlen=8)))
    train_batch = NestedMap(
      ids=cls.batch.ids,
      labels=cls.batch.ids,
      paddings=cls.batch.paddings,
      weights=np.ones((2, 4), np.float32),
    )
    # Larger weights than the default init make the model's choices far from ties.
    params = model.init(jax.random.key(1), train_batch)["params"]
    cls.params = jax.tree_util.tree_map(lambda w: w * 3.0, params)
    cls.full = staticmethod(
      jax.jit(
        lambda ids: model.apply(
          {"params": cls.params},
          ids,
          jnp.zeros(ids.shape),
          method=lambda m, i, p: m.lm(i, p).logits,
        )
      )
    )

  def log_probs(self, seq: list[int], length: int = 12) -> np.ndarray:
    """log-softmax of the full model's logits [len(seq), V] (the sequence zero-padded)."""
    ids = np.zeros((1, length), np.int32)
    ids[0, : len(seq)] = seq
    return np.asarray(jax.nn.log_softmax(self.full(ids)[0, : len(seq)].astype(jnp.float32)))

  def seed_loop(self, hp):
    """The seed's pure-function loop over the LM's prefilled cache, as its own decode ran it."""
    model = base_layer.instantiate(model_config(hp))

    def run(m, batch):
      buffer = jnp.pad(jnp.asarray(batch.ids), [(0, 0), (0, hp.seqlen - batch.ids.shape[1])])
      cache, extend_fn = lm_decode.cached_lm_fns(m, buffer)
      return sample_decode.sample_decode(
        extend_fn, cache, buffer, lm_decode.prompt_lengths(batch), hp
      )

    return model.apply({"params": self.params}, self.batch, method=run)

  def decode(self, decoder, rng=None):
    model = base_layer.instantiate(model_config(decoder))
    rngs = {} if rng is None else {"random": rng}
    return model.apply({"params": self.params}, self.batch, method="decode", rngs=rngs)

  def test_greedy_has_paxs_shapes_and_equals_the_seed_loop(self):
    metrics, out, _ = self.decode(models.GreedyDecoderHParams(seqlen=8, eos_id=EOS))
    # The seed's settings are Pax's too (greedy sampling with k = 1) ...
    _, seed_pax, _ = self.decode(sample_decode.DecoderHParams(seqlen=8, eos_id=EOS))
    for key in ("output_ids", "decode_lengths", "logprobs"):
      np.testing.assert_array_equal(seed_pax[key], out[key], err_msg=key)
    # ... and the seed's pure-function loop over a prefilled cache gives the same tokens.
    seed = self.seed_loop(sample_decode.DecoderHParams(seqlen=8, eos_id=EOS))
    self.assertEqual(out.output_ids.shape, (2, 1, 8))
    np.testing.assert_array_equal(out.output_ids[:, 0], seed.output_ids)
    np.testing.assert_array_equal(out.decode_lengths[:, 0], seed.decode_lengths)
    np.testing.assert_array_equal(out.prefix_lengths[:, 0], [2, 4])
    # Pax's logprobs: the prompt's own tokens too (fed one by one), 1.0 after the end.
    generated = np.arange(8)[None, :] >= np.array([[2], [4]])
    logprobs = np.where(generated & (out.logprobs[:, 0] < 1.0), out.logprobs[:, 0], 0.0)
    np.testing.assert_allclose(logprobs.sum(-1), seed.scores, rtol=1e-6)
    self.assertEqual(float(metrics.num_decoded[0]), 2.0)

  def test_fprop_for_prefix_decodes_what_feeding_the_prompt_does(self):
    # Right-aligned prompts in one prefill (positions and the left padding's segment as Pax)
    # must give the tokens that feeding the prompt one position at a time gives.
    _, fed, _ = self.decode(models.GreedyDecoderHParams(seqlen=8, eos_id=EOS))
    _, prefilled, _ = self.decode(
      models.GreedyDecoderHParams(seqlen=8, eos_id=EOS, fprop_for_prefix=True, max_decode_steps=4)
    )
    self.assertEqual(prefilled.output_ids.shape, (2, 1, 8))  # ids length 4 + 4 steps
    for b, plen in enumerate([2, 4]):
      end = min(int(fed.decode_lengths[b, 0]), plen + 4)
      np.testing.assert_array_equal(prefilled.output_ids[b, 0, :end], fed.output_ids[b, 0, :end])
      np.testing.assert_allclose(
        prefilled.logprobs[b, 0, plen:end], fed.logprobs[b, 0, plen:end], rtol=1e-5, atol=1e-6
      )

  def test_ids_longer_than_seqlen_fill_the_output_as_in_pax(self):
    _, long_out, _ = self.decode(models.GreedyDecoderHParams(seqlen=3, eos_id=EOS))
    self.assertEqual(long_out.output_ids.shape, (2, 1, 3))
    # Row 1's prompt (4 tokens) does not fit: the output is its first 3; prefix_lengths stays.
    np.testing.assert_array_equal(long_out.output_ids[1, 0], [3, 0, 1])
    np.testing.assert_array_equal(long_out.output_ids[0, 0, :2], [1, 2])
    np.testing.assert_array_equal(long_out.prefix_lengths[:, 0], [2, 4])

  def test_min_decode_steps_keeps_eos_away(self):
    _, out, _ = self.decode(
      # fprop_for_prefix: max_decode_steps counts new tokens after the prompts (without it,
      # Pax's loop runs max_decode_steps positions from the first token, prompts included).
      models.GreedyDecoderHParams(
        seqlen=8, eos_id=EOS, min_decode_steps=3, max_decode_steps=3, fprop_for_prefix=True
      )
    )
    for b, plen in enumerate([2, 4]):
      self.assertNotIn(EOS, list(out.output_ids[b, 0, plen : plen + 3]))
      self.assertEqual(int(out.decode_lengths[b, 0]), plen + 3)

  def test_beam_search_equals_exhaustive_search_with_the_full_model(self):
    # Three new tokens at most; a beam of 16 holds every live hypothesis (4 ** 2), so the
    # results are exactly the exhaustive top 16 under Pax's length normalization. The third
    # step reads cache entries written by the second, so a wrong reordering shows.
    alpha, beam, steps = 0.6, 16, 3
    _, out, _ = self.decode(
      models.BeamSearchHParams(
        # Pax requires seqlen > 0 for every decoder; beam search sizes its output by
        # max_decode_steps. Pax's beam search decodes after a prefill of the right-aligned
        # prompts (without fprop_for_prefix it would start from a dummy token).
        seqlen=1,
        fprop_for_prefix=True,
        beam_size=beam,
        # Pax takes tokens_per_beam (default beam_size) tokens of each hypothesis with top_k,
        # which needs them to fit in the vocabulary; all V keep the search exhaustive.
        tokens_per_beam=V,
        max_decode_steps=steps,
        eos_id=EOS,
        length_norm_alpha=alpha,
      )
    )
    self.assertEqual(out.output_ids.shape, (2, beam, 4 + steps))
    for b, prompt in enumerate([[1, 2], [3, 0, 1, 2]]):
      candidates = []
      for n in range(1, steps + 1):
        for middle in itertools.product(range(EOS), repeat=n - 1):
          seq = prompt + list(middle) + [EOS]
          lp = self.log_probs(seq)
          total = sum(lp[t, seq[t + 1]] for t in range(len(prompt) - 1, len(seq) - 1))
          norm = float(decoder_utils.length_norm(np.array(n), alpha))
          candidates.append((total / norm, seq))
      candidates.sort(key=lambda c: -c[0])
      for k, (score, seq) in enumerate(candidates[:beam]):
        self.assertEqual(list(out.output_ids[b, k, : len(seq)]), seq, f"row {b} beam {k}")
        self.assertEqual(int(out.decode_lengths[b, k]), len(seq))
        self.assertAlmostEqual(float(out.scores[b, k]), score, places=4)

  def test_sampling_draws_num_samples_sorted_by_score(self):
    decoder = models.SampleDecoderHParams(seqlen=8, num_samples=3, temperature=1.0, k=0, eos_id=EOS)
    with self.assertRaisesRegex(ValueError, "'random' rng"):
      self.decode(decoder)
    _, out, _ = self.decode(decoder, jax.random.key(0))
    self.assertEqual(out.output_ids.shape, (2, 3, 8))
    # Pax's score: the sum of the logprobs (1.0 marks padding and counts 0); a row's samples
    # share the prompt's logprobs, so the order is that of the generated tokens' sums.
    logprobs = np.asarray(out.logprobs)
    scores = np.where(logprobs >= 1.0, 0.0, logprobs).sum(-1)  # [B, N]
    self.assertTrue(np.all(np.diff(scores, axis=1) <= 0))
    # Each generated token's logprob is its log-prob under the full model.
    for b, s in [(0, 0), (1, 2)]:
      seq = list(out.output_ids[b, s, : out.decode_lengths[b, s]])
      lp = self.log_probs(seq)
      plen = int(out.prefix_lengths[b, s])
      for t in range(plen - 1, len(seq) - 1):
        self.assertAlmostEqual(float(logprobs[b, s, t + 1]), lp[t, seq[t + 1]], places=4)

  def test_lazy_prefix_broadcast_beam_search_equals_the_broadcast_one(self):
    # Pax's lazy prefix broadcast needs the LPB attention; its results are those of the beam
    # search that copies the prefilled cache to every beam.
    def decoder(lazy):
      return models.BeamSearchHParams(
        seqlen=1,
        fprop_for_prefix=True,
        beam_size=3,
        tokens_per_beam=3,
        max_decode_steps=3,
        eos_id=EOS,
        lazy_prefix_broadcast=lazy,
      )

    config = model_config(decoder(True))
    layer = config.lm_tpl.stacked_transformer_tpl.transformer_layer_params_tpl
    layer.tr_atten_tpl = pax_fiddle.Config(lpb_attention.DotProductAttentionWithLPB)
    lazy = base_layer.instantiate(config)
    _, got, _ = lazy.apply({"params": self.params}, self.batch, method="decode")
    _, want, _ = self.decode(decoder(False))
    for key in ("output_ids", "decode_lengths", "scores"):
      np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)

  def test_unsupported_settings_raise(self):
    with self.assertRaisesRegex(NotImplementedError, "cf_guidance_scale"):
      self.decode(models.SampleDecoderHParams(seqlen=8, cf_guidance_scale=2.0), jax.random.key(0))
    with self.assertRaisesRegex(NotImplementedError, "DotProductAttentionWithLPB"):
      self.decode(
        models.BeamSearchHParams(
          seqlen=8,
          beam_size=2,
          max_decode_steps=2,
          fprop_for_prefix=True,
          lazy_prefix_broadcast=True,
        )
      )
    with self.assertRaisesRegex(NotImplementedError, "num_cache_slots"):
      self.decode(models.GreedyDecoderHParams(seqlen=8, num_cache_slots=4))
    with self.assertRaisesRegex(ValueError, "seqlen"):
      self.decode(models.GreedyDecoderHParams())


if __name__ == "__main__":
  absltest.main()
