"""Pax's Transformer: one layer of self-attention, optional cross-attention and a feed-forward.

    layer = base_layer.instantiate(pax_fiddle.Config(
        Transformer, name='layer', input_dims=64, hidden_dims=256, num_heads=8))
    mask = attentions.causal_mask(x)                       # [1|B, 1, 1|T, T], additive
    variables = layer.init(key, x, paddings, mask)
    y, probs = layer.apply(variables, x, paddings, mask)   # [B, T, D], NestedMap(self_atten=...)

Each sub-layer (self-attention, cross-attention, feed-forward) is wrapped by the norm policy
(TransformerFeedForward's docstring): "pre" x + f(ln(x)), "post" x + ln(f(x)), "post_skip"
ln(x + f(x)), "primer_hybrid" x + ln2(f(ln1(x))).

Variables (Pax's): `layer_norm` (primer_hybrid: `pre_layer_norm`, `post_layer_norm`),
`self_attention`, `cross_layer_norm` (primer_hybrid: `pre_cross_layer_norm`,
`post_cross_layer_norm`) and `cross_attention` with use_cross_attention, `ff_layer`.

Decoding: apply `__call__` with mutable=[DECODE_CACHE] to fill the attentions' caches (the
cross-attention caches the encoder's keys/values), then `extend_step` one position at a time.
Dropout runs only with `deterministic=False` (ours; a "dropout" rng).
"""

from __future__ import annotations

import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import attentions
from praxis.layers import normalizations
from praxis.layers import stochastics
from praxis.layers import transformer_feed_forward as ffn_lib

template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config
NestedMap = pytypes.NestedMap
dropout = ffn_lib.dropout


class Transformer(base_layer.BaseLayer):
  """One Transformer layer (module docstring for the layout and norm policies).

  Attributes:
    input_dims: D.
    hidden_dims: hidden dims of the feed-forward.
    num_heads: attention heads.
    dim_per_head: dims per head; None means input_dims // num_heads.
    dropout_tpl: residual dropout (keep_prob = 1 - residual_dropout_prob).
    atten_dropout_prob: dropout on the attention probabilities.
    residual_dropout_prob: dropout on each sub-layer's output before its residual add.
    relu_dropout_prob: dropout on the feed-forward's hidden activations.
    residual_droppath_prob: probability of dropping a whole residual branch per example.
    use_cross_attention: attend to `cross_inputs` (an encoder's output) after self-attention.
    allow_skip_cross_attention: skip the cross-attention when no cross inputs are given.
    cross_atten_tpl: template of the cross-attention; None means tr_atten_tpl.
    ln_tpl: template of the norms.
    norm_policy: "pre", "post", "post_skip" or "primer_hybrid".
    tr_atten_tpl: template of the self-attention (sizes set here).
    packed_input: rows may hold several segments (masks come from the caller).
    tr_fflayer_tpl: template of the feed-forward (sizes, dropouts and norm policy set here).
    ngrammer_tpl: Pax's VQNgrammer applied to the self-attention's heads before its output
      projection (set on the self-attention's template).
    num_kv_heads: (ours) key/value heads set on the attentions when not None (1 =
      multi-query, K = grouped-query).
  """

  input_dims: int = 0
  hidden_dims: int = 0
  num_heads: int | None = None
  dim_per_head: int | None = None
  dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  atten_dropout_prob: float = 0.0
  residual_dropout_prob: float = 0.0
  relu_dropout_prob: float = 0.0
  residual_droppath_prob: float = 0.0
  use_cross_attention: bool = False
  allow_skip_cross_attention: bool = False
  cross_atten_tpl: LayerTpl | None = template_field(None)
  ln_tpl: LayerTpl = template_field(normalizations.LayerNorm)
  norm_policy: str = "pre"
  tr_atten_tpl: LayerTpl = template_field(attentions.DotProductAttention)
  packed_input: bool = False
  tr_fflayer_tpl: LayerTpl = template_field(ffn_lib.TransformerFeedForward)
  ngrammer_tpl: LayerTpl | None = template_field(None)
  num_kv_heads: int | None = None

  def _setup_attention(self, atten_tpl: LayerTpl, name: str) -> None:
    tpl = atten_tpl.clone().set(
      input_dim=self.input_dims,
      hidden_dim=self.input_dims,
      num_heads=self.num_heads,
      dim_per_head=self.dim_per_head,
      atten_dropout_prob=self.atten_dropout_prob,
    )
    if self.num_kv_heads is not None:
      tpl.num_kv_heads = self.num_kv_heads
    if self.ngrammer_tpl is not None and name == "self_attention":
      tpl.ngrammer_tpl = self.ngrammer_tpl
    self.create_child(name, tpl)

  def setup(self) -> None:
    ffn_lib.check_norm_policy("Transformer", self.norm_policy)
    if not self.num_heads:
      raise ValueError("Transformer needs num_heads (got None or 0).")
    ln = self.ln_tpl.clone().set(dim=self.input_dims)
    hybrid = self.norm_policy == "primer_hybrid"
    if hybrid:
      self.create_child("pre_layer_norm", ln)
      self.create_child("post_layer_norm", ln.clone())
    else:
      self.create_child("layer_norm", ln)
    self._setup_attention(self.tr_atten_tpl, "self_attention")
    self.create_child(
      "residual_dropout", self.dropout_tpl.clone().set(keep_prob=1.0 - self.residual_dropout_prob)
    )
    if self.use_cross_attention:
      if hybrid:
        self.create_child("pre_cross_layer_norm", ln.clone())
        self.create_child("post_cross_layer_norm", ln.clone())
      else:
        self.create_child("cross_layer_norm", ln.clone())
      self._setup_attention(
        self.tr_atten_tpl if self.cross_atten_tpl is None else self.cross_atten_tpl,
        "cross_attention",
      )
    if self.residual_droppath_prob > 0:
      self.create_child(
        "residual_droppath",
        pax_fiddle.Config(
          stochastics.StochasticResidual, survival_prob=1.0 - self.residual_droppath_prob
        ),
      )
    ff = self.tr_fflayer_tpl.clone().set(
      input_dims=self.input_dims,
      hidden_dims=self.hidden_dims,
      relu_dropout_prob=self.relu_dropout_prob,
      residual_dropout_prob=self.residual_dropout_prob,
      residual_droppath_prob=self.residual_droppath_prob,
      norm_policy=self.norm_policy,
    )
    self.create_child("ff_layer", ff)

  def decoding_sequence_length(self) -> int:
    return self.self_attention.decoding_state_sequence_length()

  # -- the residual wrapping, shared by __call__ and extend_step ---------------------------------

  def _sublayer(self, inputs, attend, *, cross: bool, deterministic):
    """inputs + attend(...) under the norm policy; returns (output, attend's extra output)."""
    prefix = "cross_" if cross else ""
    if self.norm_policy == "primer_hybrid":
      x = getattr(self, f"pre_{prefix}layer_norm")(inputs)
    elif self.norm_policy == "pre":
      x = getattr(self, f"{prefix}layer_norm")(inputs)
    else:
      x = inputs
    out, extra = attend(x)
    if self.norm_policy == "primer_hybrid":
      out = getattr(self, f"post_{prefix}layer_norm")(out)
    elif self.norm_policy == "post":
      out = getattr(self, f"{prefix}layer_norm")(out)
    out = dropout(self.residual_dropout, out, deterministic)
    if self.residual_droppath_prob > 0.0:
      out = self.residual_droppath(inputs, out, deterministic=ffn_lib.is_eval(deterministic))
    else:
      out = inputs + out
    if self.norm_policy == "post_skip":
      out = getattr(self, f"{prefix}layer_norm")(out)
    return out, extra

  def _runs_cross_attention(self, given) -> bool:
    if not self.use_cross_attention:
      return False
    if given is None and not self.allow_skip_cross_attention:
      raise ValueError(
        "Transformer(use_cross_attention=True) needs cross inputs and a cross attention mask; "
        "pass them, or set allow_skip_cross_attention=True to skip the cross-attention."
      )
    return given is not None

  def __call__(
    self,
    inputs: jax.Array,
    paddings: jax.Array,
    attention_mask: jax.Array,
    cross_inputs: jax.Array | None = None,
    cross_attention_mask: jax.Array | None = None,
    segment_pos: jax.Array | None = None,
    segment_ids: jax.Array | None = None,
    *,
    deterministic: bool | None = None,
  ) -> tuple[jax.Array, NestedMap]:
    """One layer over a whole sequence.

    Args:
      inputs: [B, T, D].
      paddings: [B, T], 1 = padded (used by the feed-forward).
      attention_mask: additive self-attention mask [1|B, 1, 1|T, T] (padding, causality and
        segments already combined).
      cross_inputs: [B, S, D] encoder output for the cross-attention.
      cross_attention_mask: additive [1|B, 1, 1|T, S].
      segment_pos: [B, T] positions (rotary / relative attention).
      segment_ids: [B, T], passed to the feed-forward (Pax's MoE uses it).
      deterministic: (ours) False applies dropout (needs a "dropout" rng).

    Returns:
      (outputs [B, T, D], NestedMap(self_atten=[B, N, T, T], cross_atten=[B, N, T, S])).
    """
    probs = NestedMap()

    def self_attend(x):
      return self.self_attention(
        x,
        x,
        x,
        atten_mask=attention_mask,
        query_segment_pos=segment_pos,
        key_segment_pos=segment_pos,
        deterministic=deterministic,
      )

    out, probs.self_atten = self._sublayer(
      inputs, self_attend, cross=False, deterministic=deterministic
    )
    if self._runs_cross_attention(cross_inputs):
      if cross_attention_mask is None:
        raise ValueError("Transformer: cross_inputs need a cross_attention_mask [1|B, 1, 1|T, S].")

      def cross_attend(x):
        return self.cross_attention(
          x,
          cross_inputs,
          cross_inputs,
          atten_mask=cross_attention_mask,
          deterministic=deterministic,
        )

      out, probs.cross_atten = self._sublayer(
        out, cross_attend, cross=True, deterministic=deterministic
      )
    out = self.ff_layer(out, paddings, segment_ids, deterministic=deterministic)
    return checkpoint_name(out, "transformer_layer_out"), probs

  def extend_step(
    self,
    inputs: jax.Array,
    *,
    time_step: jax.Array,
    segment_pos: jax.Array | None = None,
    attention_mask: jax.Array,
    cross_attention_mask: jax.Array | None = None,
  ) -> jax.Array:
    """Decodes one position (or L positions) with the caches filled by a prefill.

    Args:
      inputs: [B, D] at time_step, or [B, L, D] from time_step on.
      time_step: 0-based scalar.
      segment_pos: [B] (or [B, L]) positions; default time_step.
      attention_mask: additive [B|1, 1, S] over the cache ([B, 1, L, S] for L steps).
      cross_attention_mask: additive [b|B, 1, 1, S'] over the cached encoder positions.

    Returns:
      [B, D] (or [B, L, D]).
    """

    def self_attend(x):
      out = self.self_attention.extend_step(
        x, atten_mask=attention_mask, time_step=time_step, segment_pos=segment_pos
      )
      return out, None

    out, _ = self._sublayer(inputs, self_attend, cross=False, deterministic=True)
    if self._runs_cross_attention(cross_attention_mask):

      def cross_attend(x):
        out = self.cross_attention.extend_step(
          x,
          atten_mask=jnp.squeeze(cross_attention_mask, 2),
          time_step=time_step,
          segment_pos=segment_pos,
          is_cross_attention=True,
        )
        return out, None

      out, _ = self._sublayer(out, cross_attend, cross=True, deterministic=True)
    return self.ff_layer.extend_step(out, time_step=time_step)

  def transform_decode_state(self, transform_fn) -> None:
    self.self_attention.transform_decode_state(transform_fn)

  def lazy_broadcast_prefix(self, num_suffix_samples: int, suffix_length: int) -> None:
    self.self_attention.lazy_broadcast_prefix(num_suffix_samples, suffix_length)

  def right_align_decode_state_with_prefix(self, max_prefix_size: int, right_align_fn) -> None:
    self.self_attention.right_align_decode_state_with_prefix(max_prefix_size, right_align_fn)
