"""Tests for praxis.layers.attentions against an independent numpy implementation.

Layers are built the way Pax users build them (`pax_fiddle.Config` + `base_layer.instantiate`),
with Pax's defaults (per-dim query scale on).

The reference below is written from the formulas (numpy loops for the masks, np.repeat for the
key/value head sharing, explicit softmax) and shares no code with the layer. It is written
against an array module `xp`, so the same text runs in float64 numpy for the forward check and in
jax.numpy for the gradient check (jax.grad of the reference vs jax.grad of the layer).
"""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import attentions

B, T, D, H = 2, 7, 12, 4


def build(cls, **kwargs):
  return base_layer.instantiate(pax_fiddle.Config(cls, name="layer", **kwargs))


def visible_np(segment_ids, paddings, causal):
  """[B, T, S] bool: may query t see key s? Built with plain loops.

  As in Pax, a padded query sees nothing (merge_masks hides its row as well).
  """
  b, t = segment_ids.shape
  out = np.zeros((b, t, t), bool)
  for i in range(b):
    for q in range(t):
      for k in range(t):
        out[i, q, k] = (
          paddings[i, k] == 0
          and paddings[i, q] == 0
          and segment_ids[i, q] == segment_ids[i, k]
          and (k <= q or not causal)
        )
  return out


def rotary_ref(xp, x, pos):
  """RoPE on [B, T, N, H]: the pair (i, i + H/2) is rotated by pos / 10000 ** (2i / H)."""
  h = x.shape[-1]
  half = h // 2
  inv_freq = np.array([10000.0 ** (-2.0 * i / h) for i in range(half)])
  angle = pos[:, :, None, None] * inv_freq  # [B, T, 1, H/2]
  a, b = x[..., :half], x[..., half:]
  return xp.concatenate(
    [a * xp.cos(angle) - b * xp.sin(angle), b * xp.cos(angle) + a * xp.sin(angle)], axis=-1
  )


def ref_attention(xp, p, x, visible, *, num_heads, cap=0.0, rotary_pos=None):
  """Self-attention of x [B, T, D] with weights p (AttentionProjection layout w[D, N, H])."""
  q = xp.einsum("btd,dnh->btnh", x, p["wq"]) + p["bq"]
  k = xp.einsum("btd,dnh->btnh", x, p["wk"]) + p["bk"]
  v = xp.einsum("btd,dnh->btnh", x, p["wv"]) + p["bv"]
  if rotary_pos is not None:
    q, k = rotary_ref(xp, q, rotary_pos), rotary_ref(xp, k, rotary_pos)
  h = q.shape[-1]
  if "pds" in p:
    q = q * (xp.log1p(xp.exp(p["pds"])) / (math.log(2.0) * math.sqrt(h)))
  else:
    q = q / math.sqrt(h)
  groups = num_heads // k.shape[2]
  k = xp.repeat(k, groups, axis=2)  # query head n uses key/value head n // groups
  v = xp.repeat(v, groups, axis=2)
  logits = xp.einsum("btnh,bsnh->bnts", q, k)
  if cap:
    logits = cap * xp.tanh(logits / cap)
  logits = xp.where(visible[:, None], logits, -1e30)
  logits = logits - logits.max(axis=-1, keepdims=True)
  probs = xp.exp(logits) / xp.exp(logits).sum(axis=-1, keepdims=True)
  enc = xp.einsum("bnts,bsnh->btnh", probs, v)
  return xp.einsum("btnh,dnh->btd", enc, p["wo"]) + p["bo"]


def layer_weights(params):
  p = {
    "wq": params["query"]["w"],
    "bq": params["query"]["b"],
    "wk": params["key"]["w"],
    "bk": params["key"]["b"],
    "wv": params["value"]["w"],
    "bv": params["value"]["b"],
    "wo": params["post"]["w"],
    "bo": params["post"]["b"],
  }
  if "per_dim_scale" in params:
    p["pds"] = params["per_dim_scale"]["per_dim_scale"]
  return p


def to_layer_params(p):
  params = {
    "query": {"w": p["wq"], "b": p["bq"]},
    "key": {"w": p["wk"], "b": p["bk"]},
    "value": {"w": p["wv"], "b": p["bv"]},
    "post": {"w": p["wo"], "b": p["bo"]},
  }
  if "pds" in p:
    params["per_dim_scale"] = {"per_dim_scale": p["pds"]}
  return params


def random_weights(rng, num_heads, num_kv_heads, per_dim_scale):
  def r(*shape):
    return jnp.asarray(rng.normal(size=shape) * 0.4, jnp.float32)

  p = {
    "wq": r(D, num_heads, H),
    "bq": r(num_heads, H),
    "wk": r(D, num_kv_heads, H),
    "bk": r(num_kv_heads, H),
    "wv": r(D, num_kv_heads, H),
    "bv": r(num_kv_heads, H),
    "wo": r(D, num_heads, H),
    "bo": r(D),
  }
  if per_dim_scale:
    p["pds"] = r(H) * 2
  return p


def local_visible_np(t, left, right):
  """[T, T] bool: key s within [q - (left - 1), q + right] of query q."""
  q = np.arange(t)[:, None]
  s = np.arange(t)[None, :]
  return (s > q - left) & (s <= q + right)


class MaskTest(absltest.TestCase):
  def test_helpers_match_loops(self):
    seg = np.array([[1, 1, 1, 2, 2, 3, 3], [1, 1, 1, 1, 1, 1, 1]])
    pad = np.array([[0, 0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 1, 1, 1]], np.float32)
    big = float(attentions.large_negative_number(jnp.float32))
    mask = attentions.merge_masks(
      attentions.causal_segment_mask(jnp.asarray(seg)),
      attentions.convert_paddings_to_mask(jnp.asarray(pad)),
    )
    np.testing.assert_array_equal(
      np.asarray(mask[:, 0]), np.where(visible_np(seg, pad, True), 0.0, big)
    )
    no_causal = attentions.merge_masks(
      attentions.segment_mask(jnp.asarray(seg)),
      attentions.convert_paddings_to_mask(jnp.asarray(pad)),
    )
    np.testing.assert_array_equal(
      np.asarray(no_causal[:, 0]), np.where(visible_np(seg, pad, False), 0.0, big)
    )
    causal = attentions.causal_mask(jnp.zeros((1, 4, 3)))
    self.assertEqual(causal.shape, (1, 1, 4, 4))
    np.testing.assert_array_equal(np.asarray(causal[0, 0] == 0), np.tril(np.ones((4, 4), bool)))

  def test_merge_masks_hides_padded_query_rows(self):
    # Pax's semantics: merging a [B, 1, 1, S] padding mask with a [1, 1, T, S] mask hides the
    # padded keys in every row AND every padded query's row.
    pad = jnp.array([[0.0, 0.0, 1.0]])
    merged = attentions.merge_masks(
      attentions.convert_paddings_to_mask(pad), attentions.causal_mask(jnp.zeros((1, 3, 1)))
    )
    self.assertEqual(merged.shape, (1, 1, 3, 3))
    np.testing.assert_array_equal(np.asarray(merged[0, 0] == 0), [[1, 0, 0], [1, 1, 0], [0, 0, 0]])
    with self.assertRaisesRegex(ValueError, "merge_masks"):
      attentions.merge_masks(jnp.zeros((1, 1, 2, 3)), jnp.zeros((1, 1, 4, 3)))

  def test_prefix_keys_are_visible_to_all_queries(self):
    seg = jnp.ones((1, 4), jnp.int32)
    causal_flag = jnp.array([[0, 0, 1, 1]])  # a 2-token prefix, then causal
    mask = attentions.causal_segment_mask(seg, causal_attention_mask=causal_flag)
    expected = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], bool)
    np.testing.assert_array_equal(np.asarray(mask[0, 0] == 0), expected)

  def test_extend_step_mask(self):
    mask = attentions.extend_step_causal_mask(jnp.asarray(2), 5)
    np.testing.assert_array_equal(np.asarray(mask[0, 0] == 0), [1, 1, 1, 0, 0])

  def test_limited_context_and_local_block_masks(self):
    for left, right in ((3, 0), (2, 2), (1, 1)):
      mask = attentions.limited_context_mask(left, right, 6)
      np.testing.assert_array_equal(np.asarray(mask == 0), local_visible_np(6, left, right))
      # The blocked form: block u, query j, context slot c is key u*W + c - (left - 1).
      w = 4
      local = np.asarray(attentions._make_local_mask(6, w, left, right))
      full = local_visible_np(6, left, right)
      for u in range(local.shape[0]):
        for j in range(w):
          for c in range(local.shape[2]):
            q, k = u * w + j, u * w + c - (left - 1)
            want = q < 6 and 0 <= k < 6 and full[q, k]
            self.assertEqual(bool(local[u, j, c]), want, (left, right, u, j, c))


class DotProductAttentionTest(parameterized.TestCase):
  @parameterized.named_parameters(
    dict(
      testcase_name="mha_causal_fixed_scale",
      num_heads=4,
      num_kv_heads=None,
      causal=True,
      packed=False,
      cap=0.0,
      per_dim_scale=False,
      rotary=False,
    ),
    dict(
      testcase_name="gqa_causal_segments_padding",
      num_heads=4,
      num_kv_heads=2,
      causal=True,
      packed=True,
      cap=0.0,
      per_dim_scale=True,
      rotary=False,
    ),
    dict(
      testcase_name="mqa_padding_cap",
      num_heads=4,
      num_kv_heads=1,
      causal=False,
      packed=False,
      cap=1.5,
      per_dim_scale=True,
      rotary=False,
    ),
    dict(
      testcase_name="mha_segments_per_dim_scale",
      num_heads=2,
      num_kv_heads=None,
      causal=False,
      packed=True,
      cap=0.0,
      per_dim_scale=True,
      rotary=False,
    ),
    dict(
      testcase_name="gqa_rotary_cap_per_dim_scale",
      num_heads=6,
      num_kv_heads=3,
      causal=True,
      packed=True,
      cap=2.0,
      per_dim_scale=True,
      rotary=True,
    ),
  )
  def test_matches_numpy_forward_and_gradient(
    self, num_heads, num_kv_heads, causal, packed, cap, per_dim_scale, rotary
  ):
    rng = np.random.default_rng(0)
    kvh = num_heads if num_kv_heads is None else num_kv_heads
    layer = build(
      attentions.DotProductAttention,
      input_dim=D,
      hidden_dim=num_heads * H,
      num_heads=num_heads,
      num_kv_heads=num_kv_heads,
      atten_logit_cap=cap,
      internal_enable_per_dim_scale=per_dim_scale,
      use_rotary_position_emb=rotary,
    )
    x = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    seg = np.array([[1, 1, 1, 2, 2, 2, 2], [1, 1, 1, 1, 1, 1, 1]]) if packed else np.ones((B, T))
    pad = np.zeros((B, T), np.float32)
    pad[1, 5:] = 1.0
    # Positions restart in each segment (packed inputs), so rotary sees per-document positions.
    pos = (
      np.array([[0, 1, 2, 0, 1, 2, 3], list(range(T))]) if packed else np.tile(np.arange(T), (B, 1))
    )
    seg_j = jnp.asarray(seg, jnp.int32)
    mask = attentions.convert_paddings_to_mask(jnp.asarray(pad))
    mask = attentions.merge_masks(
      mask, attentions.causal_segment_mask(seg_j) if causal else attentions.segment_mask(seg_j)
    )
    p = random_weights(rng, num_heads, kvh, per_dim_scale)
    params = to_layer_params(p)
    init_params = layer.init(jax.random.key(0), x, x, x, mask)["params"]
    self.assertEqual(jax.tree.map(jnp.shape, params), jax.tree.map(jnp.shape, init_params))
    seg_pos = jnp.asarray(pos) if rotary else None

    @jax.jit
    def layer_fn(params, x):
      out, probs = layer.apply(
        {"params": params}, x, x, x, mask, query_segment_pos=seg_pos, key_segment_pos=seg_pos
      )
      return out, probs

    out, probs = layer_fn(params, x)
    visible = visible_np(seg, pad, causal)
    ref_pos = pos.astype(np.float64) if rotary else None
    p64 = jax.tree.map(lambda a: np.asarray(a, np.float64), p)
    expected = ref_attention(
      np, p64, np.asarray(x, np.float64), visible, num_heads=num_heads, cap=cap, rotary_pos=ref_pos
    )
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)
    self.assertEqual(probs.shape, (B, num_heads, T, T))
    np.testing.assert_allclose(np.asarray(probs).sum(-1), 1.0, rtol=1e-5)
    # Rows that see some key give the hidden keys exactly 0 (fully hidden rows are uniform).
    seen = visible.any(-1, keepdims=True)
    hidden = np.broadcast_to((~visible & seen)[:, None], probs.shape)
    self.assertTrue(np.all(np.asarray(probs)[hidden] == 0.0))

    ct = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    grads = jax.jit(
      jax.grad(lambda p, x: jnp.sum(layer_fn(to_layer_params(p), x)[0] * ct), argnums=(0, 1))
    )(p, x)
    ref_grads = jax.grad(
      lambda p, x: jnp.sum(
        ref_attention(
          jnp,
          p,
          x,
          jnp.asarray(visible),
          num_heads=num_heads,
          cap=cap,
          rotary_pos=None if ref_pos is None else jnp.asarray(ref_pos, jnp.float32),
        )
        * ct
      ),
      argnums=(0, 1),
    )(p, x)
    for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
      np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)

  def test_per_dim_scale_is_the_default_and_starts_at_one_over_sqrt_h(self):
    # Pax's default: the variable tree has per_dim_scale, and at its zero init the queries are
    # scaled by exactly 1 / sqrt(H), so it equals the fixed-scale layer with the same weights.
    x = jnp.asarray(np.random.default_rng(5).normal(size=(B, T, D)), jnp.float32)
    mask = attentions.causal_mask(x)
    default = build(attentions.DotProductAttention, input_dim=D, hidden_dim=2 * H, num_heads=2)
    params = default.init(jax.random.key(0), x, x, x, mask)["params"]
    self.assertEqual(sorted(params), ["key", "per_dim_scale", "post", "query", "value"])
    np.testing.assert_array_equal(params["per_dim_scale"]["per_dim_scale"], np.zeros(H))
    fixed = build(
      attentions.DotProductAttention,
      input_dim=D,
      hidden_dim=2 * H,
      num_heads=2,
      internal_enable_per_dim_scale=False,
    )
    fixed_params = {k: v for k, v in params.items() if k != "per_dim_scale"}
    want, _ = fixed.apply({"params": fixed_params}, x, x, x, mask)
    got, _ = default.apply({"params": params}, x, x, x, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # A trained scale changes the result.
    params["per_dim_scale"]["per_dim_scale"] = jnp.full((H,), 0.7)
    other, _ = default.apply({"params": params}, x, x, x, mask)
    self.assertGreater(float(jnp.max(jnp.abs(other - want))), 1e-3)

  @parameterized.parameters(False, True)
  def test_per_dim_scale_folded_into_the_query_weight(self, combine_qkv):
    # __call__ multiplies the query weight by the per-dim scale (no [B, T, N, H] unscaled query
    # kept for the backward pass); outputs and every gradient, the scale's included, must equal
    # scaling the projected query, which is what extend_step and the subclasses do.
    class Unfolded(attentions.DotProductAttention):
      def _folds_query_scale(self):
        return False

    kw = dict(input_dim=D, hidden_dim=2 * H, num_heads=2, combine_qkv=combine_qkv, use_bias=True)
    folded, unfolded = build(attentions.DotProductAttention, **kw), build(Unfolded, **kw)
    rng = np.random.default_rng(6)
    x = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    mask = attentions.causal_mask(x)
    params = folded.init(jax.random.key(0), x, x, x, mask)["params"]
    self.assertTrue(folded.bind({"params": params})._folds_query_scale())
    params = jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape) * 0.3, a.dtype), params)
    cot = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)

    def run(layer):
      def loss(p, x):
        return jnp.sum(layer.apply({"params": p}, x, x, x, mask)[0] * cot)

      return loss(params, x), jax.grad(loss, argnums=(0, 1))(params, x)

    (want, want_grads), (got, got_grads) = run(unfolded), run(folded)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    jax.tree.map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5), got_grads, want_grads
    )
    self.assertGreater(float(jnp.max(jnp.abs(got_grads[0]["per_dim_scale"]["per_dim_scale"]))), 0)

  def test_combined_qkv_equals_separate_projections(self):
    rng = np.random.default_rng(1)
    common = dict(input_dim=D, hidden_dim=3 * H, num_heads=3, internal_enable_per_dim_scale=False)
    separate = build(attentions.DotProductAttention, **common)
    combined = build(attentions.DotProductAttention, combine_qkv=True, **common)
    x = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    mask = attentions.causal_mask(x)
    p = random_weights(rng, 3, 3, False)
    params = to_layer_params(p)
    combined_params = {
      "combined_qkv": {
        "w": jnp.stack([p["wq"], p["wk"], p["wv"]]),
        "b": jnp.stack([p["bq"], p["bk"], p["bv"]]),
      },
      "post": params["post"],
    }
    init_shapes = jax.tree.map(jnp.shape, combined.init(jax.random.key(0), x, x, x, mask)["params"])
    self.assertEqual(init_shapes, jax.tree.map(jnp.shape, combined_params))
    want, _ = separate.apply({"params": params}, x, x, x, mask)
    got, _ = combined.apply({"params": combined_params}, x, x, x, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # The gradients too: the combined weight's is the three separate ones stacked.
    cot = jnp.asarray(rng.normal(size=want.shape), jnp.float32)

    def grads(layer, params):
      return jax.grad(lambda p: jnp.sum(layer.apply({"params": p}, x, x, x, mask)[0] * cot))(params)

    g_sep, g_comb = grads(separate, params), grads(combined, combined_params)
    for slot, name in enumerate(("query", "key", "value")):
      for var in ("w", "b"):
        np.testing.assert_allclose(
          g_comb["combined_qkv"][var][slot], g_sep[name][var], rtol=1e-4, atol=1e-5
        )
    # A swapped key/value slot must change the result (the test can tell the slots apart).
    swapped = dict(
      combined_params,
      combined_qkv={
        "w": jnp.stack([p["wq"], p["wv"], p["wk"]]),
        "b": jnp.stack([p["bq"], p["bv"], p["bk"]]),
      },
    )
    other, _ = combined.apply({"params": swapped}, x, x, x, mask)
    self.assertGreater(float(jnp.max(jnp.abs(other - want))), 1e-3)

  @parameterized.named_parameters(
    ("mha", None, False, False),
    ("gqa_rotary", 2, True, False),
    ("mqa_rotary", 1, True, False),
    ("mha_dconv", None, False, True),
  )
  def test_extend_step_reproduces_forward(self, num_kv_heads, rotary, dconv):
    rng = np.random.default_rng(2)
    layer = build(
      attentions.DotProductAttention,
      input_dim=D,
      hidden_dim=4 * H,
      num_heads=4,
      num_kv_heads=num_kv_heads,
      use_rotary_position_emb=rotary,
      dconv_qkv=dconv,
      atten_logit_cap=3.0,
    )
    x = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    mask = attentions.causal_mask(x)
    params = layer.init(jax.random.key(3), x, x, x, mask)["params"]
    full, _ = layer.apply({"params": params}, x, x, x, mask)
    # Prime the cache with a forward whose positions >= prefix hold junk: extend_step must
    # overwrite each one before it becomes visible.
    prefix = 3
    junk = x.at[:, prefix:].set(jnp.asarray(rng.normal(size=(B, T - prefix, D)), jnp.float32))
    _, state = layer.apply(
      {"params": params}, junk, junk, junk, mask, mutable=[base_layer.DECODE_CACHE]
    )
    self.assertEqual(
      state[base_layer.DECODE_CACHE]["key_state"].shape, (B, T, num_kv_heads or 4, H)
    )

    @jax.jit
    def step(cache, x_t, t):
      out, new_state = layer.apply(
        {"params": params, **cache},
        x_t,
        atten_mask=attentions.extend_step_causal_mask(t, T),
        time_step=t,
        method=layer.extend_step,
        mutable=[base_layer.DECODE_CACHE],
      )
      return out, new_state

    for t in range(prefix, T):
      out_t, state = step(state, x[:, t], jnp.asarray(t))
      np.testing.assert_allclose(out_t, full[:, t], rtol=1e-5, atol=1e-5, err_msg=f"step {t}")

  def test_extend_step_without_cache_explains(self):
    layer = build(attentions.DotProductAttention, input_dim=D, hidden_dim=8, num_heads=2)
    x = jnp.ones((1, 3, D))
    params = layer.init(jax.random.key(0), x, x, x, attentions.causal_mask(x))["params"]
    with self.assertRaisesRegex(ValueError, "mutable=\\['decoder_cache'\\]"):
      layer.apply(
        {"params": params},
        x[:, 0],
        atten_mask=jnp.zeros((1, 1, 3)),
        time_step=0,
        method=layer.extend_step,
        mutable=[base_layer.DECODE_CACHE],
      )

  def test_attention_dropout_only_when_not_deterministic(self):
    layer = build(
      attentions.DotProductAttention, input_dim=D, hidden_dim=8, num_heads=2, atten_dropout_prob=0.5
    )
    x = jnp.asarray(np.random.default_rng(4).normal(size=(B, T, D)), jnp.float32)
    mask = attentions.causal_mask(x)
    variables = layer.init(jax.random.key(0), x, x, x, mask)
    eval_a, _ = layer.apply(variables, x, x, x, mask)
    _, probs = layer.apply(
      variables, x, x, x, mask, deterministic=False, rngs={"dropout": jax.random.key(1)}
    )
    ref = build(attentions.DotProductAttention, input_dim=D, hidden_dim=8, num_heads=2)
    eval_ref, ref_probs = ref.apply(variables, x, x, x, mask)
    np.testing.assert_allclose(eval_a, eval_ref, rtol=1e-6)
    probs, ref_probs = np.asarray(probs), np.asarray(ref_probs)
    dropped = probs == 0
    self.assertGreater(dropped[ref_probs > 0].mean(), 0.3)
    np.testing.assert_allclose(probs[~dropped], 2.0 * ref_probs[~dropped], rtol=1e-5)


class LocalSelfAttentionTest(parameterized.TestCase):
  @parameterized.parameters((3, 0, None), (2, 2, 2), (4, 1, 3))
  def test_blocked_equals_full_attention_with_a_window(self, left, right, block_size):
    rng = np.random.default_rng(6)
    t = 9
    common = dict(input_dim=D, hidden_dim=2 * H, num_heads=2)
    local = build(
      attentions.LocalSelfAttention,
      left_context=left,
      right_context=right,
      block_size=block_size,
      **common,
    )
    full = build(attentions.DotProductAttention, **common)
    x = jnp.asarray(rng.normal(size=(B, t, D)), jnp.float32)
    pad = np.zeros((B, t), np.float32)
    pad[1, 7:] = 1.0
    key_mask = attentions.convert_paddings_to_mask(jnp.asarray(pad))  # [B, 1, 1, T]
    variables = full.init(jax.random.key(0), x, x, x, key_mask)
    got, _ = local.apply(variables, x, x, x, key_mask)
    window = jnp.asarray(
      np.where(
        local_visible_np(t, left, right), 0.0, float(attentions.large_negative_number(jnp.float32))
      )
    )
    want, _ = full.apply(variables, x, x, x, jnp.minimum(key_mask, window))
    # A query whose whole window is padding attends uniformly over whatever slots its form
    # holds (all T keys, or its block's context), so only queries that see a key compare.
    sees = (local_visible_np(t, left, right)[None] & (pad[:, None, :] == 0)).any(-1)  # [B, T]
    np.testing.assert_allclose(np.asarray(got)[sees], np.asarray(want)[sees], rtol=1e-5, atol=1e-5)
    # The window matters: plain full attention differs.
    plain, _ = full.apply(variables, x, x, x, key_mask)
    self.assertGreater(float(jnp.max(jnp.abs(plain - want))), 1e-3)

  def test_extend_step_reproduces_forward(self):
    rng = np.random.default_rng(7)
    t = 8
    layer = build(
      attentions.LocalSelfAttention,
      input_dim=D,
      hidden_dim=2 * H,
      num_heads=2,
      left_context=3,
      right_context=0,
    )
    x = jnp.asarray(rng.normal(size=(B, t, D)), jnp.float32)
    mask = jnp.zeros((1, 1, t, t))
    variables = layer.init(jax.random.key(0), x, x, x, mask)
    full, _ = layer.apply(variables, x, x, x, mask)
    _, state = layer.apply(variables, x, x, x, mask, mutable=[base_layer.DECODE_CACHE])
    for step in range(t):
      out, state = layer.apply(
        {**variables, **state},
        x[:, step],
        atten_mask=mask[:, :, step],
        time_step=step,
        method=layer.extend_step,
        mutable=[base_layer.DECODE_CACHE],
      )
      np.testing.assert_allclose(out, full[:, step], rtol=1e-5, atol=1e-5)


class RelativeBiasTest(absltest.TestCase):
  def test_buckets_and_bias(self):
    layer = build(
      attentions.RelativeBias,
      num_heads=2,
      relative_attention_num_buckets=8,
      relative_attention_max_distance=20,
      bidirectional=True,
      use_length_as_position=False,
    )
    pos = jnp.arange(12)[None, :]
    variables = layer.init(jax.random.key(0), pos)
    bias = layer.apply(variables, pos)  # [1, N, T, S]
    self.assertEqual(bias.shape, (1, 2, 12, 12))
    table = np.asarray(variables["params"]["wrb"])  # [N, 8]

    def bucket(rel):  # rel = key - query; 4 buckets per direction, 2 of them exact.
      n = -rel
      base = 4 if n < 0 else 0
      n = abs(n)
      if n < 2:
        return base + n
      return base + min(2 + int(np.log(n / 2) / np.log(20 / 2) * 2), 3)

    for q in range(12):
      for k in range(12):
        np.testing.assert_allclose(bias[0, :, q, k], table[:, bucket(k - q)], rtol=1e-6)


if __name__ == "__main__":
  absltest.main()
