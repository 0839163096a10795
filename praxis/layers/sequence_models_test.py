"""SequenceModel: loss, greedy / sampled / beam decoding.

Decoding references run the whole encoder-decoder (no cache) on every prefix, so the cache, its
padding and the beam reordering are checked, not assumed.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import decoder_utils
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import embedding_softmax
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers

NestedMap = pytypes.NestedMap
D, V, EOS = 8, 7, 2


def stack(masked: bool, cross: bool) -> pax_fiddle.Config:
  return pax_fiddle.Config(
    transformers.StackedTransformer,
    num_layers=1,
    num_heads=2,
    hidden_dims=2 * D,
    mask_self_attention=masked,
    use_cross_attention=cross,
  )


def encdec() -> pax_fiddle.Config:
  return pax_fiddle.Config(
    transformer_models.TransformerEncoderDecoder,
    model_dims=D,
    encoder_stacked_transformer_tpl=stack(False, False),
    decoder_stacked_transformer_tpl=stack(True, True),
    softmax_tpl=pax_fiddle.Config(embedding_softmax.SharedEmbeddingSoftmax, num_classes=V),
  )


class SequenceModelTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = base_layer.instantiate(
      pax_fiddle.Config(models.SequenceModel, name="seq", model_tpl=encdec())
    )
    ids = jnp.asarray([[3, 4, 5, 6, 1], [6, 5, 1, 0, 0]], jnp.int32)
    paddings = jnp.asarray([[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]], jnp.float32)
    labels = jnp.roll(ids, -1, axis=1)
    weights = 1.0 - paddings
    cls.batch = NestedMap(
      src=NestedMap(ids=ids, paddings=paddings),
      tgt=NestedMap(ids=ids, paddings=paddings, labels=labels, weights=weights),
    )
    variables = cls.model.init(jax.random.key(3), cls.batch)
    # Larger weights than the default init keep the model's choices far from ties.
    cls.variables = jax.tree_util.tree_map(lambda w: w * 3.0, variables)

  def log_probs(self, targets):
    """log p of every next target [B, T, V]: the full model on the whole prefix, no cache."""
    src = self.batch.src
    return self.model.apply(
      self.variables,
      src.ids,
      src.paddings,
      targets,
      jnp.zeros(targets.shape),
      method=lambda m, *a: m.model(*a).log_probs,
    )

  def decode(self, hp, rng=0):
    (metrics, out, _), _ = self.model.apply(
      self.variables,
      self.batch,
      hp,
      method="decode_with_params",
      mutable=[base_layer.DECODE_CACHE],
      rngs={base_layer.RANDOM: jax.random.key(rng)},
    )
    self.assertEqual(float(metrics.num_decoded[0]), 2.0)
    return out

  def test_loss_metrics(self):
    metrics, per_example = self.model.apply(self.variables, self.batch)
    num = float(jnp.sum(self.batch.tgt.weights))
    self.assertEqual(float(metrics.total_loss[1]), num)
    np.testing.assert_allclose(metrics.total_loss[0], metrics.avg_xent[0], rtol=1e-6)
    lp = self.log_probs(self.batch.tgt.ids)
    xent = -jnp.take_along_axis(lp, self.batch.tgt.labels[..., None], -1)[..., 0]
    expected = jnp.sum(xent * self.batch.tgt.weights) / num
    np.testing.assert_allclose(metrics.avg_xent[0], expected, rtol=1e-5)
    np.testing.assert_allclose(
      per_example.scores, -jnp.sum(xent * self.batch.tgt.weights, -1), rtol=1e-5
    )

  def greedy_reference(self, seqlen):
    """Step-by-step argmax of the full model, zeros after an EOS."""
    out = self.batch.tgt.ids[:, :1]
    done = np.zeros(2, bool)
    for _ in range(seqlen - 1):
      nxt = np.asarray(jnp.argmax(self.log_probs(out)[:, -1], -1))
      nxt = np.where(done, 0, nxt)
      done |= nxt == EOS
      out = jnp.concatenate([out, jnp.asarray(nxt, jnp.int32)[:, None]], axis=1)
    return np.asarray(out)

  def test_greedy_is_argmax_step_by_step(self):
    out = self.decode(models.GreedyDecoderHParams(seqlen=5, eos_id=EOS))
    self.assertEqual(out.output_ids.shape, (2, 1, 5))
    np.testing.assert_array_equal(out.output_ids[:, 0], self.greedy_reference(5))
    self.assertIn("src", out)  # the batch rides along, as Pax's
    # Each generated token's log-prob is recorded; position 0 (the start token) is not.
    lp = self.log_probs(out.output_ids[:, 0, :-1])
    chosen = jnp.take_along_axis(lp, out.output_ids[:, 0, 1:, None], -1)[..., 0]
    generated = np.arange(1, 5)[None, :] < np.asarray(out.decode_lengths)
    np.testing.assert_allclose(
      np.where(generated, out.logprobs[:, 0, 1:], 0.0), np.where(generated, chosen, 0.0), atol=1e-5
    )
    np.testing.assert_array_equal(out.logprobs[:, 0, 0], [1.0, 1.0])

  def test_samples_at_tiny_temperature_are_greedy(self):
    hp = models.SampleDecoderHParams(seqlen=5, num_samples=3, k=0, temperature=1e-6, eos_id=EOS)
    out = self.decode(hp)
    self.assertEqual(out.output_ids.shape, (2, 3, 5))
    greedy = self.greedy_reference(5)
    for s in range(3):
      np.testing.assert_array_equal(out.output_ids[:, s], greedy)

  def test_top_k_sampling_keeps_to_the_top_k(self):
    # k=2 at a high temperature: every generated token is one of the 2 most likely.
    hp = models.SampleDecoderHParams(seqlen=4, num_samples=4, k=2, temperature=5.0, eos_id=99)
    out = self.decode(hp, rng=4)
    ids = np.asarray(out.output_ids)
    for b in range(2):
      for s in range(4):
        lp = self.log_probs(jnp.asarray(np.repeat(ids[b : b + 1, s, :-1], 2, axis=0)))[b]
        top2 = np.argsort(-np.asarray(lp), axis=-1)[:, :2]  # [3, 2]
        for t in range(3):
          self.assertIn(ids[b, s, t + 1], top2[t])

  def test_top_p_reaches_the_sampler(self):
    # The decoder's p is copied onto its next_token_sampler (Pax's): a tiny nucleus keeps only
    # the most likely token, so even very hot samples are greedy; without it they are not.
    hp = models.SampleDecoderHParams(seqlen=5, num_samples=3, k=0, p=1e-6, temperature=50.0)
    hp.eos_id = EOS
    greedy = self.greedy_reference(5)
    out = self.decode(hp, rng=5)
    for s in range(3):
      np.testing.assert_array_equal(out.output_ids[:, s], greedy)
    hp.p = None
    hot = np.asarray(self.decode(hp, rng=5).output_ids)
    self.assertFalse(all(np.array_equal(hot[:, s], greedy) for s in range(3)))

  def test_samples_depend_on_the_rng(self):
    hp = models.SampleDecoderHParams(seqlen=5, num_samples=4, k=0, eos_id=EOS)
    first, second = self.decode(hp, rng=1), self.decode(hp, rng=2)
    np.testing.assert_array_equal(first.output_ids[:, :, 0], self.batch.tgt.ids[:, :1].repeat(4, 1))
    self.assertFalse(np.array_equal(first.output_ids, second.output_ids))
    # Sorted best first by the sum of the generated tokens' log-probs.
    scores = np.sum(np.where(first.logprobs >= 1.0, 0.0, first.logprobs), -1)
    self.assertTrue(np.all(np.diff(scores, axis=1) <= 1e-6))

  def test_beam_search_scores_are_the_models(self):
    hp = models.BeamSearchHParams(beam_size=3, seqlen=5, max_decode_steps=4, eos_id=EOS)
    out = self.decode(hp)
    self.assertEqual(out.output_ids.shape, (2, 3, 5))
    start = self.batch.tgt.ids[:, 0]
    checked = 0
    for b in range(2):
      for k in range(3):
        n = int(out.decode_lengths[b, k])
        if float(out.scores[b, k]) < -1e8:
          continue  # an unfinished slot
        hyp = out.output_ids[b, k, :n]
        self.assertEqual(int(hyp[-1]), EOS)
        targets = jnp.concatenate([start[b : b + 1], hyp[:-1]])[None]  # [1, n]
        lp = self.log_probs(jnp.repeat(targets, 2, axis=0))[b]  # the model's log-probs of hyp
        total = float(jnp.sum(jnp.take_along_axis(lp, hyp[:, None], -1)))
        expected = total / float(decoder_utils.length_norm(jnp.asarray(n), hp.length_norm_alpha))
        self.assertAlmostEqual(float(out.scores[b, k]), expected, places=4)
        checked += 1
    self.assertGreaterEqual(checked, 4)  # most slots finished: the check is not vacuous
    self.assertTrue(np.all(np.diff(np.asarray(out.scores), axis=1) <= 0))

  def test_guidance_is_refused_as_pax(self):
    hp = models.SampleDecoderHParams(seqlen=5, cf_guidance_scale=2.0)
    with self.assertRaisesRegex(NotImplementedError, "SequenceModel does not support guidance"):
      self.decode(hp)


if __name__ == "__main__":
  absltest.main()
