"""TransformerEncoderDecoder: Pax's variable tree, masking, and extend_step against the forward pass."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import decoder_utils
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import embedding_softmax
from praxis.layers import ngrammer
from praxis.layers import transformer_models
from praxis.layers import transformers

NestedMap = pytypes.NestedMap
D, V, N = 8, 11, 2
DECODE_CACHE = base_layer.DECODE_CACHE


def stack(masked: bool, cross: bool = False) -> pax_fiddle.Config:
  return pax_fiddle.Config(
    transformers.StackedTransformer,
    num_layers=2,
    num_heads=N,
    hidden_dims=4 * D,
    mask_self_attention=masked,
    use_cross_attention=cross,
  )


def encdec(cross: bool = True) -> pax_fiddle.Config:
  # Reached through transformer_models, as Pax users do.
  return pax_fiddle.Config(
    transformer_models.TransformerEncoderDecoder,
    name="encdec",
    model_dims=D,
    encoder_stacked_transformer_tpl=stack(False),
    decoder_stacked_transformer_tpl=stack(True, cross),
    softmax_tpl=pax_fiddle.Config(embedding_softmax.SharedEmbeddingSoftmax, num_classes=V),
  )


class EncoderDecoderTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    rng = np.random.default_rng(0)
    cls.inputs = jnp.asarray(rng.integers(0, V, (2, 5)), jnp.int32)
    cls.input_paddings = jnp.asarray([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], jnp.float32)
    cls.targets = jnp.asarray(rng.integers(0, V, (2, 4)), jnp.int32)
    cls.model = base_layer.instantiate(encdec())
    cls.variables = cls.model.init(
      jax.random.key(0), cls.inputs, cls.input_paddings, cls.targets, jnp.zeros((2, 4))
    )

  def test_variable_tree_is_paxs(self):
    params = self.variables["params"]
    self.assertSameElements(
      params.keys(), ["softmax", "encoder", "encoder_ln", "decoder", "decoder_ln"]
    )
    self.assertEqual(params["softmax"]["logits_ffn"]["linear"]["w"].shape, (D, V))
    self.assertSameElements(params["encoder"].keys(), ["x_layers_0", "x_layers_1"])
    encoder_layer = params["encoder"]["x_layers_0"]
    decoder_layer = params["decoder"]["x_layers_1"]
    self.assertNotIn("cross_attention", encoder_layer)
    self.assertIn("cross_attention", decoder_layer)
    self.assertIn("cross_layer_norm", decoder_layer)
    self.assertEqual(decoder_layer["cross_attention"]["query"]["w"].shape, (D, N, D // N))
    self.assertEqual(params["encoder_ln"]["scale"].shape, (D,))

  def test_post_attention_ngrammers_are_checked_then_unused_as_in_pax(self):
    cfg = encdec()
    ngram = pax_fiddle.Config(
      ngrammer.VQNgrammer,
      ngram_vocab_size=8,
      ngram_emb_dim=2,
      num_heads=N,
      dim_per_head=D // N,
      num_clusters=2,
      concat_ngrams=True,
    )
    cfg.encoder_post_attention_ngrammer_tpls = [ngram, ngram]
    cfg.decoder_post_attention_ngrammer_tpls = [ngram, ngram]
    model = base_layer.instantiate(cfg)
    args = (self.inputs, self.input_paddings, self.targets, jnp.zeros((2, 4)))
    variables = model.init(jax.random.key(0), *args)
    same_tree = jax.tree.map(lambda a, b: a.shape == b.shape, variables, self.variables)
    self.assertTrue(all(jax.tree.leaves(same_tree)))  # no ngrammer weights anywhere
    np.testing.assert_array_equal(
      model.apply(variables, *args).logits, self.model.apply(self.variables, *args).logits
    )
    cfg.decoder_post_attention_ngrammer_tpls = [ngram]
    with self.assertRaisesRegex(ValueError, "must match the number of decoder layers"):
      base_layer.instantiate(cfg).init(jax.random.key(0), *args)

  def test_masks_are_validated(self):
    bad = encdec()
    bad.encoder_stacked_transformer_tpl.mask_self_attention = True
    model = base_layer.instantiate(bad)
    with self.assertRaisesRegex(ValueError, "Encoder attention should be un-masked"):
      model.init(jax.random.key(0), self.inputs, self.input_paddings, self.targets, self.targets)

  def test_padded_source_positions_are_ignored(self):
    def logits(inputs):
      return self.model.apply(
        self.variables, inputs, self.input_paddings, self.targets, jnp.zeros((2, 4))
      ).logits

    changed = self.inputs.at[0, 3:].set((self.inputs[0, 3:] + 1) % V)  # row 0's padded slots
    np.testing.assert_allclose(logits(changed), logits(self.inputs), atol=1e-6)
    # A real source token does change the decoder's output (through the cross-attention).
    changed = self.inputs.at[0, 0].set((self.inputs[0, 0] + 1) % V)
    self.assertGreater(float(jnp.max(jnp.abs(logits(changed)[0] - logits(self.inputs)[0]))), 1e-4)

  def test_extend_step_matches_forward(self):
    """Prefill on the first target, pad the cache, then feed targets one at a time."""
    full = self.model.apply(
      self.variables, self.inputs, self.input_paddings, self.targets, jnp.zeros((2, 4))
    ).log_probs  # [B, T, V]
    _, cache = self.model.apply(
      self.variables,
      self.inputs,
      self.input_paddings,
      self.targets[:, :1],
      jnp.zeros((2, 1)),
      mutable=[DECODE_CACHE],
    )

    def pad(mdl):
      mdl.transform_decode_state(decoder_utils.pad_state_fn(3))

    _, cache = self.model.apply({**self.variables, **cache}, method=pad, mutable=[DECODE_CACHE])
    self.assertEqual(int(cache[DECODE_CACHE]["time_step"]), 0)
    for t in range(4):
      out, cache = self.model.apply(
        {**self.variables, **cache},
        self.targets[:, t],
        method="extend_step",
        mutable=[DECODE_CACHE],
      )
      np.testing.assert_allclose(out.log_probs, full[:, t], atol=2e-5, err_msg=f"step {t}")
    self.assertEqual(int(cache[DECODE_CACHE]["time_step"]), 4)

  def test_loss_outputs(self):
    labels = NestedMap(class_ids=self.targets, class_weights=jnp.asarray([[1, 1, 1, 0]] * 2))
    out = self.model.apply(
      self.variables, self.inputs, self.input_paddings, self.targets, jnp.zeros((2, 4)), labels
    )
    per_token = out.per_example_xent * labels.class_weights
    np.testing.assert_allclose(out.per_sequence_xent, per_token.sum(-1), rtol=1e-6)
    np.testing.assert_allclose(out.total_loss, out.avg_xent, rtol=1e-6)  # no aux losses here
    self.assertEqual(float(out.aux_loss), 0.0)

  def test_encode_is_the_normed_encoder_output(self):
    enc = self.model.apply(self.variables, self.inputs, self.input_paddings, method="encode")
    self.assertEqual(enc.shape, (2, 5, D))
    # The final LayerNorm leaves every position with (about) zero mean over D.
    np.testing.assert_allclose(jnp.mean(enc, -1), 0.0, atol=1e-5)

  def test_repeated_decoder_trains_but_does_not_decode(self):
    cfg = encdec()
    cfg.decoder_stacked_transformer_tpl = pax_fiddle.Config(
      transformers.StackedTransformerRepeated, block=stack(True, True), x_times=2
    )
    cfg.decoder_stacked_transformer_tpl.block.num_layers = 1
    model = base_layer.instantiate(cfg)
    args = (self.inputs, self.input_paddings, self.targets, jnp.zeros((2, 4)))
    variables = model.init(jax.random.key(0), *args)
    query = variables["params"]["decoder"]["repeat"]["sub"]["x_layers_0"]["cross_attention"]
    self.assertEqual(query["query"]["w"].shape, (2, D, N, D // N))  # [x_times, D, N, H]
    self.assertEqual(model.apply(variables, *args).logits.shape, (2, 4, V))
    _, cache = model.apply(variables, *args, mutable=[DECODE_CACHE])
    with self.assertRaisesRegex(NotImplementedError, "StackedTransformer decoder only"):
      model.apply(
        {**variables, **cache},
        method=lambda m: m.transform_decode_state(decoder_utils.pad_state_fn(1)),
        mutable=[DECODE_CACHE],
      )


if __name__ == "__main__":
  absltest.main()
