"""LmCloudSpmd2B's model has Pax's variable tree: names, nesting and shapes.

The golden list is written out from Pax's code (paxml's lm_cloud.LmCloudSpmd2B: 18 layers,
model dims 3072, hidden 4 * 3072, 128 dims per head so 24 heads, vocabulary 32000, repeated
layers, combined QKV without biases, a tied SharedEmbeddingSoftmax, sinusoidal positions), and
praxis's names for those layers: LanguageModel `lm`; TransformerLm `softmax`, `transformer`,
`final_ln`; StackedTransformerRepeated `repeat`, whose Repeat scans `sub` (every weight gets a
leading dim of 18); StackedTransformer `x_layers_0`; Transformer `layer_norm`,
`self_attention` (`combined_qkv/w [3, D, N, H]`, `post/w [D, N, H]`,
`per_dim_scale/per_dim_scale [H]`) and `ff_layer` (`layer_norm`, `ffn_layer1`, `ffn_layer2`,
each FeedForward `linear/w`, `bias/b`); FullSoftmax `logits_ffn`. A Pax checkpoint of this
experiment holds exactly these arrays.
"""

from absl.testing import absltest
import flax
import jax
import jax.numpy as jnp

from paxml.tasks.lm.params import lm_cloud
from praxis import base_layer
from praxis import pytypes

LAYERS, D, F, N, H, V = 18, 3072, 4 * 3072, 24, 128, 32000


def pax_golden() -> dict[str, tuple[int, ...]]:
  layer = "params/lm/transformer/repeat/sub/x_layers_0"
  return {
    "params/lm/softmax/logits_ffn/linear/w": (D, V),
    "params/lm/softmax/logits_ffn/bias/b": (V,),
    "params/lm/final_ln/scale": (D,),
    "params/lm/final_ln/bias": (D,),
    f"{layer}/layer_norm/scale": (LAYERS, D),
    f"{layer}/layer_norm/bias": (LAYERS, D),
    f"{layer}/self_attention/combined_qkv/w": (LAYERS, 3, D, N, H),
    f"{layer}/self_attention/post/w": (LAYERS, D, N, H),
    f"{layer}/self_attention/per_dim_scale/per_dim_scale": (LAYERS, H),
    f"{layer}/ff_layer/layer_norm/scale": (LAYERS, D),
    f"{layer}/ff_layer/layer_norm/bias": (LAYERS, D),
    f"{layer}/ff_layer/ffn_layer1/linear/w": (LAYERS, D, F),
    f"{layer}/ff_layer/ffn_layer1/bias/b": (LAYERS, F),
    f"{layer}/ff_layer/ffn_layer2/linear/w": (LAYERS, F, D),
    f"{layer}/ff_layer/ffn_layer2/bias/b": (LAYERS, D),
  }


class LmCloudTreeTest(absltest.TestCase):
  def test_lm_cloud_spmd_2b_matches_pax(self):
    model = base_layer.instantiate(lm_cloud.LmCloudSpmd2B().task().model)
    b, t = 2, 8
    batch = pytypes.NestedMap(
      ids=jnp.zeros((b, t), jnp.int32),
      labels=jnp.zeros((b, t), jnp.int32),
      paddings=jnp.zeros((b, t), jnp.float32),
      weights=jnp.ones((b, t), jnp.float32),
      segment_ids=jnp.ones((b, t), jnp.int32),
      segment_pos=jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t)),
    )
    # Abstract init: the 2B weights are never made.
    tree = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), batch))
    flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(tree))
    got = {"/".join(path): tuple(leaf.shape) for path, leaf in flat.items()}
    self.assertEqual(got, pax_golden())
    self.assertEqual({leaf.dtype for leaf in flat.values()}, {jnp.dtype(jnp.float32)})
    # The sum of the shapes above: the "2B" of the experiment's name.
    self.assertEqual(sum(leaf.size for leaf in flat.values()), 2_137_273_856)


if __name__ == "__main__":
  absltest.main()
