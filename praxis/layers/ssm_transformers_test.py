"""Tests for SSMTransformer / SSMGated: the tree, the residual around the SSM, and decoding."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import attentions
from praxis.layers import ssm_transformers
from praxis.layers import transformers


def _config(cls):
  return pax_fiddle.Config(
    cls,
    name="layer",
    input_dims=4,
    hidden_dims=8,
    num_heads=2,
    ssm_nheads=2,
    ssm_dim=4,
    ssm_l_max=3,
    decode_num_samples=1,
    ssm_step_size=0.5,
  )


class SsmTransformerTest(absltest.TestCase):
  def test_silent_ssm_leaves_the_feed_forward(self):
    layer = _config(ssm_transformers.SSMTransformer).Instantiate()
    x = jax.random.normal(jax.random.key(0), (2, 3, 4))
    paddings = jnp.zeros((2, 3))
    mask = attentions.causal_mask(x)
    v = layer.init(jax.random.key(1), x, paddings, mask)
    self.assertEqual(sorted(v["params"]), ["ff_layer", "layer_norm", "ssm"])
    p = dict(v["params"])
    p["ssm"] = jax.tree_util.tree_map(jnp.zeros_like, p["ssm"])  # C = 0, D = 0: ssm(x) = 0
    y, _ = layer.apply({**v, "params": p}, x, paddings, mask)
    ffn = pax_fiddle.Config(
      transformers.TransformerFeedForward, name="ff", input_dims=4, hidden_dims=8
    ).Instantiate()
    np.testing.assert_allclose(
      y, ffn.apply({"params": p["ff_layer"]}, x, paddings=paddings), rtol=1e-5, atol=1e-5
    )

  def test_gated_call_matches_step_by_step_decoding(self):
    layer = _config(ssm_transformers.SSMGated).Instantiate()
    x = jax.random.normal(jax.random.key(0), (2, 3, 4))
    paddings = jnp.zeros((2, 3))
    mask = attentions.causal_mask(x)
    v = layer.init(jax.random.key(1), x, paddings, mask)
    self.assertEqual(
      sorted(v["params"]),
      ["gss_ffn_o", "gss_ffn_u", "gss_ffn_uc", "gss_ffn_uco", "gss_ffn_v", "layer_norm", "ssm"],
    )
    (y, _), cache = layer.apply(v, x, paddings, mask, mutable=[base_layer.DECODE_CACHE])
    variables = {**v, **cache}
    for t in range(3):
      out, cache = layer.apply(
        variables,
        x[:, t],
        time_step=t,
        attention_mask=mask[:, :, t],
        method=layer.extend_step,
        mutable=[base_layer.DECODE_CACHE],
      )
      variables = {**v, **cache}
      np.testing.assert_allclose(out, y[:, t], rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
  absltest.main()
