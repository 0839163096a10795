"""GroupedQueryAttention against a numpy multi-head attention with repeated KV heads, and
extend_step against the full pass."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import grouped_query_attention as gqa


def _numpy_attention(x, p, n, k, mask):
  """x [B, T, D]; p: the layer's params; mask bool [1, 1, T, T] (True = masked)."""
  q = np.einsum("btd,dnh->btnh", x, p["query"]["w"]) + p["query"]["b"]
  if k == 1:
    key = (np.einsum("btd,dh->bth", x, p["key"]["w"]) + p["key"]["b"])[:, :, None]
    val = (np.einsum("btd,dh->bth", x, p["value"]["w"]) + p["value"]["b"])[:, :, None]
  else:
    key = np.einsum("btd,dkh->btkh", x, p["key"]["w"]) + p["key"]["b"]
    val = np.einsum("btd,dkh->btkh", x, p["value"]["w"]) + p["value"]["b"]
  key, val = np.repeat(key, n // k, axis=2), np.repeat(val, n // k, axis=2)  # [B, S, N, H]
  logits = np.einsum("btnh,bsnh->bnts", q, key) / np.sqrt(q.shape[-1])
  logits = np.where(mask, -1e30, logits)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  ctx = np.einsum("bnts,bsnh->btnh", probs, val)
  return np.einsum("btnh,dnh->btd", ctx, p["post"]["w"]) + p["post"]["b"]


class GroupedQueryAttentionTest(absltest.TestCase):
  def _layer(self, n, k, rope=None):
    cfg = pax_fiddle.Config(
      gqa.GroupedQueryAttention,
      name="att",
      input_dim=6,
      num_heads=n,
      num_kv_heads=k,
      dim_per_head=4,
      rope_min_max_timescales=rope,
    )
    return base_layer.instantiate(cfg)

  def test_matches_numpy_reference(self):
    x = np.random.default_rng(0).normal(size=(2, 5, 6)).astype(np.float32)
    mask = np.asarray(gqa.causal_mask(5))
    pos = jnp.arange(5)[None]
    for n, k in ((4, 1), (4, 2), (4, 4)):
      layer = self._layer(n, k)
      variables = layer.init(jax.random.PRNGKey(1), x, x, x, mask, pos, pos)
      params = jax.tree.map(
        lambda v: np.random.default_rng(2).normal(size=v.shape).astype(np.float32),
        variables["params"],
      )
      out, _ = layer.apply({"params": params}, x, x, x, mask, pos, pos)
      np.testing.assert_allclose(out, _numpy_attention(x, params, n, k, mask), rtol=1e-4, atol=1e-4)

  def test_extend_step_matches_the_full_pass(self):
    x = np.random.default_rng(3).normal(size=(2, 5, 6)).astype(np.float32)
    mask = gqa.causal_mask(5)
    pos = jnp.arange(5)[None]
    layer = self._layer(4, 2, rope=(1, 1000))
    variables = layer.init(jax.random.PRNGKey(1), x, x, x, mask, pos, pos)
    (full, _), cache = layer.apply(
      variables, x, x, x, mask, pos, pos, mutable=[base_layer.DECODE_CACHE]
    )
    state = py_utils.merge_dict(cache, variables)
    for t in range(5):
      step, cache = layer.apply(
        state,
        x[:, t],
        atten_mask=mask[:, :, t],
        time_step=jnp.asarray(t),
        segment_pos=None,
        method=layer.extend_step,
        mutable=[base_layer.DECODE_CACHE],
      )
      state = py_utils.merge_dict(cache, variables)
      np.testing.assert_allclose(step, full[:, t], rtol=1e-5, atol=1e-5)

  def test_rope_rotates_pairs(self):
    x = np.random.default_rng(4).normal(size=(1, 3, 2, 4)).astype(np.float32)
    out = np.asarray(gqa.apply_rope(jnp.asarray(x), 1, 100, jnp.arange(3)[None]))
    # Each (i, i + H/2) pair keeps its norm; position 0 is unrotated.
    np.testing.assert_allclose(
      np.hypot(out[..., :2], out[..., 2:]), np.hypot(x[..., :2], x[..., 2:]), rtol=1e-5
    )
    np.testing.assert_allclose(out[:, 0], x[:, 0], rtol=1e-6)


if __name__ == "__main__":
  absltest.main()
