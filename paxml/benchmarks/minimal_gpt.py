"""A conventional minimal GPT in plain Flax: the yardstick the layer library's LM is timed against.

It is written the way one writes a GPT by hand (nanoGPT's layout), not in praxis's: one token
table `wte[V, D]` that embeds ids by row and, tied, projects to the logits; one `c_attn[D, 3D]`
matrix for queries, keys and values; queries scaled by the constant 1 / sqrt(H); the label's
logit gathered with `take_along_axis`. No praxis import. It computes the same function as the
model of a `paxml.tasks.lm.model_params.TransformerLmSpmdAdam` experiment's `task()` (unpacked
input, no dropout) at that model's initial weights:

    x = wte[ids] * sqrt(D) + sinusoid(pos)                                 # [B, T, D]
    per layer:  x += c_proj(attend(ln_1(x)));  x += mlp(ln_2(x))           # pre-LayerNorm
    logits = ln_f(x) @ wte.T + b                                           # [B, T, V]
    optional caps: attention logits and output logits, cap * tanh(logits / cap)
    loss = mean over weighted positions of logsumexp(logits) - logits[label]

`from_praxis(variables)` maps praxis's initial variables onto this tree (praxis's per-dim query
scale starts at exactly 1 / sqrt(H) and its LayerNorm scale at 1 + 0), so both models give the
same loss at the shared starting point; praxis's extra parameter (the per-dim scale) is what
the two models differ in afterwards. Parameters live in float32, activations in `dtype`.

Einsum letters: B batch, T query positions, S key positions, D model dims, N heads, H dims per
head, F hidden dims, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import math

from flax import linen as nn
import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class GptShape:
  """The architecture (the fields of a TransformerLmSpmdAdam experiment that matter here).

  A cap of 0 turns that soft cap off (on both sides of a comparison).
  """

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


def _cap(logits: jax.Array, cap: float) -> jax.Array:
  return cap * jnp.tanh(logits / cap) if cap else logits


class LayerNorm(nn.Module):
  """y = (x - mean) / sqrt(var + eps) * gamma + beta, statistics in float32."""

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    d = x.shape[-1]
    gamma = self.param("gamma", nn.initializers.ones, (d,))
    beta = self.param("beta", nn.initializers.zeros, (d,))
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = jnp.square(x32 - mean).mean(-1, keepdims=True)
    y = ((x32 - mean) * jax.lax.rsqrt(var + 1e-6)).astype(x.dtype)
    return y * gamma.astype(x.dtype) + beta.astype(x.dtype)


class Block(nn.Module):
  """One pre-LayerNorm transformer block: causal self-attention, then a ReLU MLP."""

  shape: GptShape

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    s = self.shape
    d, n, h, f = s.model_dims, s.num_heads, s.dims_per_head, s.hidden_dims
    dt = x.dtype
    b, t, _ = x.shape
    init = nn.initializers.normal(0.02)
    c_attn = self.param("c_attn", init, (d, 3 * d)).astype(dt)
    c_proj = self.param("c_proj", init, (d, d)).astype(dt)
    qkv = LayerNorm(name="ln_1")(x) @ c_attn  # [B, T, 3D]
    q, k, v = (a.reshape(b, t, n, h) for a in jnp.split(qkv, 3, axis=-1))  # [B, T, N, H]
    q = q * jnp.asarray(h**-0.5, dt)
    logits = jnp.einsum("BTNH,BSNH->BNTS", q, k, preferred_element_type=jnp.float32)
    logits = _cap(logits, s.atten_logit_cap)
    causal = jnp.tril(jnp.ones((t, t), bool))  # [T, S]
    logits = jnp.where(causal, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1).astype(dt)  # [B, N, T, S]
    ctx = jnp.einsum("BNTS,BSNH->BTNH", probs, v).reshape(b, t, d)
    x = x + ctx @ c_proj
    w_fc = self.param("c_fc", init, (d, f)).astype(dt)
    b_fc = self.param("c_fc_bias", nn.initializers.zeros, (f,)).astype(dt)
    w_out = self.param("c_out", init, (f, d)).astype(dt)
    b_out = self.param("c_out_bias", nn.initializers.zeros, (d,)).astype(dt)
    return x + jax.nn.relu(LayerNorm(name="ln_2")(x) @ w_fc + b_fc) @ w_out + b_out


def _sinusoid(length: int, dims: int) -> np.ndarray:
  """Fixed positions [T, D]: sin of the first D/2 frequencies, then cos (log-spaced 1 .. 1e-4)."""
  half = dims // 2
  inv = np.exp(np.arange(half) * -(math.log(1e4) / max(half - 1, 1)))
  angles = np.arange(length)[:, None] * inv[None, :]  # [T, D/2]
  return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


class MinimalGpt(nn.Module):
  """The GPT above; `__call__(ids, labels, weights)` returns the mean cross-entropy."""

  shape: GptShape

  @nn.compact
  def __call__(self, ids: jax.Array, labels: jax.Array, weights: jax.Array) -> jax.Array:
    s = self.shape
    d, v = s.model_dims, s.vocab_size
    dt = jnp.dtype(s.dtype)
    wte = self.param("wte", nn.initializers.normal(d**-0.5), (v, d))  # [V, D]
    lm_bias = self.param("lm_head_bias", nn.initializers.zeros, (v,))
    x = wte.astype(dt)[ids] * jnp.asarray(d**0.5, dt)  # [B, T, D]
    x = x + jnp.asarray(_sinusoid(ids.shape[1], d), dt)
    for i in range(s.num_layers):
      x = Block(s, name=f"h_{i}")(x)
    y = LayerNorm(name="ln_f")(x)
    logits = jnp.einsum("BTD,VD->BTV", y, wte.astype(dt)) + lm_bias.astype(dt)  # [B, T, V]
    logits = _cap(logits, s.softmax_cap_logits)
    lse = jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)  # [B, T]
    label = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0].astype(jnp.float32)
    return jnp.sum((lse - label) * weights) / (jnp.sum(weights) + 1e-6)


def from_praxis(variables: dict, num_layers: int) -> dict:
  """praxis's unrolled TransformerLm variables (LanguageModel.init) -> MinimalGpt's params.

  Exact at praxis's initial per-dim query scale (0: a factor of 1 / sqrt(H)); a trained one is
  not representable here (this GPT has no such parameter).
  """
  lm = variables["params"]["lm"]

  def ln(p):
    return {"gamma": 1.0 + p["scale"], "beta": p["bias"]}

  out = {
    "wte": jnp.transpose(lm["softmax"]["logits_ffn"]["linear"]["w"]),  # [D, V] -> [V, D]
    "lm_head_bias": lm["softmax"]["logits_ffn"]["bias"]["b"],
    "ln_f": ln(lm["final_ln"]),
  }
  for i in range(num_layers):
    layer = lm["transformer"][f"x_layers_{i}"]
    atten, ff = layer["self_attention"], layer["ff_layer"]
    if np.any(np.asarray(atten["per_dim_scale"]["per_dim_scale"])):
      raise ValueError("from_praxis maps only praxis's initial (zero) per_dim_scale.")
    qkv = atten["combined_qkv"]["w"]  # [3, D, N, H]
    post = atten["post"]["w"]  # [D, N, H]
    d = qkv.shape[1]
    out[f"h_{i}"] = {
      "ln_1": ln(layer["layer_norm"]),
      "c_attn": jnp.transpose(qkv, (1, 0, 2, 3)).reshape(d, -1),  # [D, 3 * N * H]
      "c_proj": jnp.transpose(post, (1, 2, 0)).reshape(-1, d),  # [N * H, D]
      "ln_2": ln(ff["layer_norm"]),
      "c_fc": ff["ffn_layer1"]["linear"]["w"],
      "c_fc_bias": ff["ffn_layer1"]["bias"]["b"],
      "c_out": ff["ffn_layer2"]["linear"]["w"],
      "c_out_bias": ff["ffn_layer2"]["bias"]["b"],
    }
  return {"params": out}
