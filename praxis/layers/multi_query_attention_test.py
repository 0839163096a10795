"""Tests for praxis.layers.multi_query_attention against a numpy reference.

The reference is written from the formulas (one key/value head shared by every query head,
query scaled by 1/sqrt(H), a sliding window of keys) with explicit loops for the masks.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import attentions
from praxis.layers import multi_query_attention

B, T, D, N, H = 2, 6, 8, 4, 2


def build(**kwargs):
  cfg = pax_fiddle.Config(
    multi_query_attention.MultiQueryDotProductAttention,
    name="mqa",
    input_dim=D,
    hidden_dim=N * H,
    num_heads=N,
  )
  return base_layer.instantiate(cfg.set(**kwargs))


def randomize(params, seed):
  """Every weight (biases included) replaced by noise, so none can be silently ignored."""
  leaves, treedef = jax.tree.flatten(params)
  rng = np.random.default_rng(seed)
  return jax.tree.unflatten(
    treedef, [jnp.asarray(rng.normal(size=l.shape) * 0.5, l.dtype) for l in leaves]
  )


def mqa_ref(p, x, visible):
  """x [B, T, D], visible [B, T, S] bool -> [B, T, D], in float64 numpy."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), p)
  x = np.asarray(x, np.float64)
  q = np.einsum("btd,dnh->btnh", x, p["query"]["w"]) + p["query"]["b"]
  k = x @ p["key"]["w"] + p["key"]["b"]  # [B, S, H]: one head for all queries
  v = x @ p["value"]["w"] + p["value"]["b"]
  logits = np.einsum("btnh,bsh->bnts", q / np.sqrt(H), k)
  logits = np.where(visible[:, None], logits, -1e30)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  ctx = np.einsum("bnts,bsh->btnh", probs, v)
  return np.einsum("btnh,dnh->btd", ctx, p["post"]["w"]) + p["post"]["b"]


def window_visible(left, right, causal):
  vis = np.zeros((B, T, T), bool)
  for q in range(T):
    for k in range(T):
      vis[:, q, k] = q - left <= k <= q + right and (k <= q or not causal)
  return vis


class MultiQueryAttentionTest(parameterized.TestCase):
  def test_variables_are_paxs(self):
    layer = build()
    x = jnp.zeros((B, T, D))
    shapes = jax.tree.map(
      jnp.shape, layer.init(jax.random.key(0), x, x, x, jnp.zeros((1, 1, 1, T)))
    )
    self.assertEqual(
      shapes["params"],
      {
        "query": {"w": (D, N, H), "b": (N, H)},
        "key": {"w": (D, H), "b": (H,)},
        "value": {"w": (D, H), "b": (H,)},
        "post": {"w": (D, N, H), "b": (D,)},
      },
    )
    grouped = build(num_kv_heads=2)
    shapes = jax.tree.map(
      jnp.shape, grouped.init(jax.random.key(0), x, x, x, jnp.zeros((1, 1, 1, T)))
    )
    self.assertEqual(shapes["params"]["key"]["w"], (D, 2, H))

  @parameterized.named_parameters(
    ("global_causal", None, True), ("window_causal", (2, 0), True), ("window_both", (1, 2), False)
  )
  def test_matches_numpy(self, window, causal):
    layer = build(local_window_size=window)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(B, T, D)), jnp.float32)
    mask = attentions.causal_mask(x) if causal else jnp.zeros((1, 1, 1, T))
    params = randomize(layer.init(jax.random.key(0), x, x, x, mask)["params"], 1)
    out, _ = layer.apply({"params": params}, x, x, x, mask)
    left, right = window or (T, T)
    want = mqa_ref(params, x, window_visible(left, right, causal))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)

  def test_extend_step_reproduces_forward_in_a_window(self):
    layer = build(local_window_size=(2, 0))
    x = jnp.asarray(np.random.default_rng(2).normal(size=(B, T, D)), jnp.float32)
    mask = attentions.causal_mask(x)
    params = randomize(layer.init(jax.random.key(0), x, x, x, mask)["params"], 3)
    full, _ = layer.apply({"params": params}, x, x, x, mask)
    _, cache = layer.apply({"params": params}, x, x, x, mask, mutable=[base_layer.DECODE_CACHE])
    for t in range(T):
      step_mask = attentions.extend_step_causal_mask(t, T, jnp.float32)  # [1, 1, S]
      out_t, cache = layer.apply(
        {"params": params, **cache},
        x[:, t],
        atten_mask=step_mask,
        time_step=t,
        method=layer.extend_step,
        mutable=[base_layer.DECODE_CACHE],
      )
      np.testing.assert_allclose(out_t, full[:, t], rtol=1e-5, atol=1e-5, err_msg=f"step {t}")

  def test_chunked_queries_and_n_step_decoding_match_the_forward(self):
    x = jnp.asarray(np.random.default_rng(4).normal(size=(B, T, D)), jnp.float32)
    mask = attentions.causal_mask(x)
    params = randomize(build().init(jax.random.key(0), x, x, x, mask)["params"], 5)
    want = mqa_ref(params, x, window_visible(T, T, True))
    chunked, probs = build(chunked_attn_num_seq_split=3).apply({"params": params}, x, x, x, mask)
    np.testing.assert_allclose(chunked, want, rtol=1e-5, atol=1e-5)
    self.assertIsNone(probs)  # as Pax's chunked path
    layer = build()
    _, cache = layer.apply({"params": params}, x, x, x, mask, mutable=[base_layer.DECODE_CACHE])
    out, _ = layer.apply(
      {"params": params, **cache},
      x[:, 2:5],
      atten_mask=mask[:, :, 2:5],
      time_step=2,
      segment_pos=jnp.broadcast_to(jnp.arange(2, 5), (B, 3)),
      method=layer.extend_step,
      mutable=[base_layer.DECODE_CACHE],
    )
    np.testing.assert_allclose(out, want[:, 2:5], rtol=1e-5, atol=1e-5)

  def test_grouped_probs_are_paxs_layout(self):
    x = jnp.ones((B, T, D))
    layer = build(num_kv_heads=2)
    variables = layer.init(jax.random.key(0), x, x, x, jnp.zeros((1, 1, 1, T)))
    _, probs = layer.apply(variables, x, x, x, jnp.zeros((1, 1, 1, T)))
    self.assertEqual(probs.shape, (B, T, N, T))

  def test_only_local_attention_has_a_window(self):
    cfg = pax_fiddle.Config(attentions.DotProductAttention)
    with self.assertRaises(AttributeError):
      cfg.local_window_size = (1, 1)
    with self.assertRaisesRegex(ValueError, "combine_qkv"):
      build(combine_qkv=True).init(
        jax.random.key(0), *([jnp.zeros((B, T, D))] * 3), jnp.zeros((1, 1, 1, T))
      )


class LpbCrossAttentionTest(absltest.TestCase):
  def test_cross_attention_steps_attend_to_the_cached_source(self):
    # Pax's is_cross_attention decoding with the LPB class: each step projects only its query
    # and attends to the source's keys / values that the fprop cached.
    s = 5
    cfg = pax_fiddle.Config(
      multi_query_attention.MultiQueryDotProductAttentionLPB,
      name="mqa", input_dim=D, hidden_dim=N * H, num_heads=N,
    )  # fmt: skip
    layer = base_layer.instantiate(cfg)
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    src = jnp.asarray(rng.normal(size=(B, s, D)), jnp.float32)
    mask = jnp.zeros((1, 1, T, s))
    with base_layer.JaxContext.new_context():
      params = layer.init(jax.random.PRNGKey(0), jnp.zeros_like(x), src, src, mask)
      params = {"params": randomize(params["params"], 4)}
      _, cache = layer.apply(
        params, jnp.zeros_like(x), src, src, mask, mutable=[base_layer.DECODE_CACHE]
      )
      variables = {**params, **cache}
      steps = []
      for t in range(T):
        out, cache = layer.apply(
          variables, x[:, t], atten_mask=mask[:, :, t], time_step=t, is_cross_attention=True,
          method=layer.extend_step, mutable=[base_layer.DECODE_CACHE],
        )  # fmt: skip
        variables = {**params, **cache}
        steps.append(out)
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
    q = np.einsum("btd,dnh->btnh", np.asarray(x, np.float64), p["query"]["w"]) + p["query"]["b"]
    src64 = np.asarray(src, np.float64)
    k = src64 @ p["key"]["w"] + p["key"]["b"]  # [B, S, H]
    v = src64 @ p["value"]["w"] + p["value"]["b"]
    logits = np.einsum("btnh,bsh->bnts", q / np.sqrt(H), k)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    ctx = np.einsum("bnts,bsh->btnh", probs, v)
    want = np.einsum("btnh,dnh->btd", ctx, p["post"]["w"]) + p["post"]["b"]
    np.testing.assert_allclose(np.stack(steps, axis=1), want, rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
  absltest.main()
