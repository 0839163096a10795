"""TransformerLm's variable tree (names, nesting, shapes) against one written out from Pax's code.

The golden list below was derived by reading google/praxis (TransformerLm.setup names its children
`position_emb`, `embedding_lookup`, `transformer`, `final_ln`, `softmax`; StackedTransformer
`x_layers_<i>`; Transformer `layer_norm`, `self_attention`, `ff_layer`; DotProductAttention
`query` / `key` / `value` / `post` (AttentionProjection: `w [D, N, H]`, `b [N, H]`, the output
projection's `b [D]`) and `per_dim_scale`; TransformerFeedForward `layer_norm`, `ffn_layer1`,
`ffn_layer1_gate`, `ffn_layer2` (FeedForward: `linear/w`, `bias/b`); FullSoftmax `logits_ffn`;
Embedding and TrainablePositionalEmbedding `emb_var`). A Pax checkpoint of the same config has
exactly these arrays, so equality here is what lets it map one-to-one onto ours.
"""

from absl.testing import absltest
import flax
import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import embedding_softmax
from praxis.layers import transformer_models
from praxis.layers import transformers

B, T = 2, 8
D, V, F, N, H, LAYERS = 16, 32, 24, 2, 8, 2


def variable_shapes(layer, *args) -> dict[str, tuple[int, ...]]:
  """{"params/a/b/w": shape} of `layer.init(...)`, computed abstractly (no weights made)."""
  tree = jax.eval_shape(lambda: layer.init(jax.random.PRNGKey(0), *args))
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(tree))
  return {"/".join(path): tuple(leaf.shape) for path, leaf in flat.items()}


def small_lm_golden() -> dict[str, tuple[int, ...]]:
  """Pax's tree for the untied, gated, trainable-position LM of `small_lm_config`."""
  golden = {
    "params/embedding_lookup/emb_var": (V, D),
    "params/position_emb/emb_var": (T, D),
    "params/softmax/logits_ffn/linear/w": (D, V),
    "params/softmax/logits_ffn/bias/b": (V,),
    "params/final_ln/scale": (D,),
    "params/final_ln/bias": (D,),
  }
  for i in range(LAYERS):
    layer = f"params/transformer/x_layers_{i}"
    golden[f"{layer}/layer_norm/scale"] = (D,)
    golden[f"{layer}/layer_norm/bias"] = (D,)
    for proj in ("query", "key", "value"):
      golden[f"{layer}/self_attention/{proj}/w"] = (D, N, H)
      golden[f"{layer}/self_attention/{proj}/b"] = (N, H)
    golden[f"{layer}/self_attention/post/w"] = (D, N, H)
    golden[f"{layer}/self_attention/post/b"] = (D,)
    golden[f"{layer}/self_attention/per_dim_scale/per_dim_scale"] = (H,)
    golden[f"{layer}/ff_layer/layer_norm/scale"] = (D,)
    golden[f"{layer}/ff_layer/layer_norm/bias"] = (D,)
    for ffn in ("ffn_layer1", "ffn_layer1_gate"):
      golden[f"{layer}/ff_layer/{ffn}/linear/w"] = (D, F)
      golden[f"{layer}/ff_layer/{ffn}/bias/b"] = (F,)
    golden[f"{layer}/ff_layer/ffn_layer2/linear/w"] = (F, D)
    golden[f"{layer}/ff_layer/ffn_layer2/bias/b"] = (D,)
  return golden


def small_lm_config() -> pax_fiddle.Config:
  """An untied TransformerLm configured the way a Pax user writes it."""
  stack = pax_fiddle.Config(
    transformers.StackedTransformer,
    num_layers=LAYERS,
    hidden_dims=F,
    num_heads=N,
    dim_per_head=H,
  )
  stack.transformer_layer_params_tpl.tr_fflayer_tpl.use_gated_activation = True
  return pax_fiddle.Config(
    transformer_models.TransformerLm,
    name="lm",
    model_dims=D,
    vocab_size=V,
    separate_embedding_tpl=pax_fiddle.Config(embedding_softmax.Embedding),
    softmax_tpl=pax_fiddle.Config(embedding_softmax.FullSoftmax),
    position_emb_tpl=pax_fiddle.Config(
      embedding_softmax.TrainablePositionalEmbedding, max_seq_length=T
    ),
    stacked_transformer_tpl=stack,
  )


class VariableTreeTest(absltest.TestCase):
  def test_small_untied_lm_matches_pax(self):
    lm = base_layer.instantiate(small_lm_config())
    ids = jnp.zeros((B, T), jnp.int32)
    got = variable_shapes(lm, ids, jnp.zeros((B, T), jnp.float32))
    self.assertEqual(got, small_lm_golden())

  def test_renamed_child_is_caught(self):
    # The comparison must see names, not only shapes: drop the gate and the golden list differs.
    cfg = small_lm_config()
    cfg.stacked_transformer_tpl.transformer_layer_params_tpl.tr_fflayer_tpl.use_gated_activation = (
      False
    )
    lm = base_layer.instantiate(cfg)
    got = variable_shapes(lm, jnp.zeros((B, T), jnp.int32), jnp.zeros((B, T), jnp.float32))
    missing = sorted(set(small_lm_golden()) - set(got))
    self.assertEqual(len(missing), 2 * LAYERS)
    self.assertTrue(all("ffn_layer1_gate" in name for name in missing))


if __name__ == "__main__":
  absltest.main()
