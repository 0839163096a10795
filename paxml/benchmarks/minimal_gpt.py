"""A minimal plain-Flax GPT: the yardstick the layer library's LM is timed against.

It computes what the model of a `paxml.tasks.lm.model_params.TransformerLmSpmdAdam` experiment's
`task()` computes (unpacked input, no dropout), written the short way one would
write it by hand, with no praxis import:

    x = emb[ids] * sqrt(D) + sinusoid(pos)                                 # [B, T, D]
    per layer:  x += post(attend(ln(x)));  x += ffn(ln(x))                 # pre-LayerNorm
    attend:     q, k, v = x @ qkv;  q *= per_dim_scale;  logits capped at atten_logit_cap
    logits = cap * tanh((ln(x) @ w + b) / cap)                             # tied: emb = w.T
    loss = mean over weighted positions of logsumexp(logits) - logits[label]

`from_praxis(variables)` maps praxis's variable tree onto this one (same numbers, so both
models give the same loss and gradients at init). The parameters live in float32 and the
activations in `dtype`.

Einsum letters: B batch, T query positions, S key positions, D model dims, N heads, H dims per
head, F hidden dims, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import math

from flax import linen as nn
import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class GptShape:
  """The architecture (the fields of a TransformerLmSpmdAdam experiment that matter here)."""

  num_layers: int
  model_dims: int
  hidden_dims: int
  num_heads: int
  vocab_size: int
  atten_logit_cap: float = 50.0
  softmax_cap_logits: float = 30.0
  dtype: str = "float32"

  @property
  def dims_per_head(self) -> int:
    return self.model_dims // self.num_heads


def _layer_norm(x, p):
  x32 = x.astype(jnp.float32)
  mean = x32.mean(-1, keepdims=True)
  var = jnp.square(x32 - mean).mean(-1, keepdims=True)
  y = ((x32 - mean) * jax.lax.rsqrt(var + 1e-6)).astype(x.dtype)
  return y * (1 + p["scale"]).astype(x.dtype) + p["bias"].astype(x.dtype)


def _sinusoid(length: int, dims: int) -> jax.Array:
  half = dims // 2
  inv = jnp.exp(jnp.arange(half, dtype=jnp.float32) * -(math.log(1e4) / max(half - 1, 1)))
  t = jnp.arange(length, dtype=jnp.float32)[:, None] * inv[None, :]  # [T, D/2]
  return jnp.concatenate([jnp.sin(t), jnp.cos(t)], axis=1)  # [T, D]


class MinimalGpt(nn.Module):
  """The GPT above; `__call__(ids, labels, weights)` returns the mean cross-entropy."""

  shape: GptShape

  @nn.compact
  def __call__(self, ids: jax.Array, labels: jax.Array, weights: jax.Array) -> jax.Array:
    s = self.shape
    d, n, h, f, v = s.model_dims, s.num_heads, s.dims_per_head, s.hidden_dims, s.vocab_size
    dt = jnp.dtype(s.dtype)
    normal = nn.initializers.normal(d**-0.5)
    glorot = nn.initializers.glorot_uniform()
    ln = {"scale": nn.initializers.zeros, "bias": nn.initializers.zeros}

    def ln_params(name):
      return {k: self.param(f"{name}_{k}", init, (d,)) for k, init in ln.items()}

    w_out = self.param("softmax_w", normal, (d, v))  # tied: the embedding is its transpose
    b_out = self.param("softmax_b", nn.initializers.zeros, (v,))
    t = ids.shape[1]
    x = jnp.take(w_out.T, ids, axis=0).astype(dt) * jnp.asarray(d**0.5, dt)  # [B, T, D]
    x = x + _sinusoid(t, d).astype(dt)
    causal = jnp.tril(jnp.ones((t, t), bool))  # [T, S]
    for i in range(s.num_layers):
      y = _layer_norm(x, ln_params(f"l{i}_ln1"))
      qkv = self.param(f"l{i}_qkv", glorot, (3, d, n, h)).astype(dt)
      q, k, val = (jnp.einsum("BTD,DNH->BTNH", y, qkv[j]) for j in range(3))
      pds = self.param(f"l{i}_per_dim_scale", nn.initializers.zeros, (h,))
      q = q * (jax.nn.softplus(pds) / (math.log(2.0) * math.sqrt(h))).astype(dt)
      logits = jnp.einsum("BTNH,BSNH->BNTS", q, k, preferred_element_type=jnp.float32)
      if s.atten_logit_cap:
        logits = s.atten_logit_cap * jnp.tanh(logits / s.atten_logit_cap)
      logits = jnp.where(causal, logits, -0.7 * jnp.finfo(jnp.float32).max)
      probs = jax.nn.softmax(logits, axis=-1).astype(dt)  # [B, N, T, S]
      ctx = jnp.einsum("BNTS,BSNH->BTNH", probs, val)
      post = self.param(f"l{i}_post", glorot, (d, n, h)).astype(dt)
      x = x + jnp.einsum("BTNH,DNH->BTD", ctx, post)
      y = _layer_norm(x, ln_params(f"l{i}_ln2"))
      w1 = self.param(f"l{i}_w1", glorot, (d, f)).astype(dt)
      b1 = self.param(f"l{i}_b1", nn.initializers.zeros, (f,)).astype(dt)
      w2 = self.param(f"l{i}_w2", glorot, (f, d)).astype(dt)
      b2 = self.param(f"l{i}_b2", nn.initializers.zeros, (d,)).astype(dt)
      x = x + (jax.nn.relu(y @ w1 + b1) @ w2 + b2)
    y = _layer_norm(x, ln_params("final_ln"))
    logits = y @ w_out.astype(dt) + b_out.astype(dt)  # [B, T, V] in dt
    if s.softmax_cap_logits:
      logits = s.softmax_cap_logits * jnp.tanh(logits / s.softmax_cap_logits)
    lse = jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)  # [B, T]
    label = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0].astype(jnp.float32)
    return jnp.sum((lse - label) * weights) / (jnp.sum(weights) + 1e-6)


def from_praxis(variables: dict, num_layers: int) -> dict:
  """praxis's unrolled TransformerLm variables (LanguageModel.init) -> MinimalGpt's params."""
  lm = variables["params"]["lm"]
  out = {
    "softmax_w": lm["softmax"]["logits_ffn"]["linear"]["w"],
    "softmax_b": lm["softmax"]["logits_ffn"]["bias"]["b"],
    "final_ln_scale": lm["final_ln"]["scale"],
    "final_ln_bias": lm["final_ln"]["bias"],
  }
  for i in range(num_layers):
    layer = lm["transformer"][f"x_layers_{i}"]
    atten, ff = layer["self_attention"], layer["ff_layer"]
    out.update(
      {
        f"l{i}_ln1_scale": layer["layer_norm"]["scale"],
        f"l{i}_ln1_bias": layer["layer_norm"]["bias"],
        f"l{i}_qkv": atten["combined_qkv"]["w"],
        f"l{i}_per_dim_scale": atten["per_dim_scale"]["per_dim_scale"],
        f"l{i}_post": atten["post"]["w"],
        f"l{i}_ln2_scale": ff["layer_norm"]["scale"],
        f"l{i}_ln2_bias": ff["layer_norm"]["bias"],
        f"l{i}_w1": ff["ffn_layer1"]["linear"]["w"],
        f"l{i}_b1": ff["ffn_layer1"]["bias"]["b"],
        f"l{i}_w2": ff["ffn_layer2"]["linear"]["w"],
        f"l{i}_b2": ff["ffn_layer2"]["bias"]["b"],
      }
    )
  return {"params": out}
