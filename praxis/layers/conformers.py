"""Pax's Conformer (arXiv:2005.08100) and its self-attention block.

Conformer, by default:
  x = x + 1/2 FFN(x)       fflayer_start (a TransformerFeedForward, residual_weight 0.5)
  x = x + MHSA(x)          trans_atten (SelfAttentionWithNormAndResidual)
  x = x + LConv(x)         lconv (convolutions.LightConv1D)
  x = x + 1/2 FFN(x)       fflayer_end
  y = LayerNorm(x)         final_ln
`layer_order` picks 'mhsa', 'conv', 'mhsa_before_conv' (default) or 'conv_before_mhsa'.
`dropout_prob`, when set, overrides each block's dropout probability.

DotProductAttentionWithContext[XL]: self-attention limited to `left_context` / `right_context`
positions (None: unlimited on that side), by a mask on full attention.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis.layers import activations
from praxis.layers import attentions
from praxis.layers import convolutions
from praxis.layers import normalizations
from praxis.layers import stochastics
from praxis.layers import transformers
from praxis import pax_fiddle
from praxis import py_utils

template_field = base_hyperparams.template_field
JTensor = jax.Array


def _with_context_mask(layer, query: JTensor, atten_mask: JTensor) -> JTensor:
  """atten_mask combined with the left / right context window of `layer`."""
  if layer.left_context is None and layer.right_context is None:
    return atten_mask
  window = attentions.limited_context_mask(layer.left_context, layer.right_context, query.shape[1])
  return jnp.minimum(window, atten_mask)


class DotProductAttentionWithContext(attentions.DotProductAttention):
  """DotProductAttention seeing at most left_context - 1 steps back and right_context ahead.

  Attributes:
    left_context: how far back a query sees (None: unlimited).
    right_context: how far ahead (None: unlimited).
  """

  left_context: int | None = None
  right_context: int | None = None

  def _dot_atten(self, query, key, value, atten_mask, relative_bias=None, deterministic=None):
    atten_mask = _with_context_mask(self, query, atten_mask)
    return super()._dot_atten(query, key, value, atten_mask, relative_bias, deterministic)


class DotProductAttentionWithContextXL(attentions.DotProductAttentionXL):
  """DotProductAttentionXL (relative positions) with a left / right context window.

  Attributes:
    left_context: how far back a query sees (None: unlimited).
    right_context: how far ahead (None: unlimited).
  """

  left_context: int | None = None
  right_context: int | None = None

  def _dot_atten(self, query, key, value, atten_mask, relative_bias=None, deterministic=None):
    atten_mask = _with_context_mask(self, query, atten_mask)
    return super()._dot_atten(query, key, value, atten_mask, relative_bias, deterministic)


_NORM_POLICIES = ("pre", "post", "post_skip", "primer_hybrid")


class SelfAttentionWithNormAndResidual(base_layer.BaseLayer):
  """Normalization, self-attention and a weighted residual: the Conformer's attention block.

  out = dropout(attention(norm(x))) * residual_weight + x * input_weight (with 'pre').

  Attributes:
    residual_weight: weight of the attention branch.
    input_weight: weight of the input.
    self_atten_tpl: the attention (child `self_atten`).
    norm_tpl: the normalization (child `norm`; `pre_norm` and `post_norm` for primer_hybrid).
    pre_layer_norm: True: 'pre'; False: 'post_skip'. Set this or norm_policy, not both.
    residual_dropout_prob: dropout on the attention branch.
    residual_dropout_tpl: its Dropout (child `residual_dropout`).
    norm_policy: 'pre', 'post', 'post_skip' (norm after the residual sum) or 'primer_hybrid'
      (before and after the attention).
  """

  residual_weight: float = 1.0
  input_weight: float = 1.0
  self_atten_tpl: base_hyperparams.Config = template_field(DotProductAttentionWithContext)
  norm_tpl: base_hyperparams.Config = template_field(normalizations.LayerNorm)
  pre_layer_norm: bool | None = True
  residual_dropout_prob: float = 0.0
  residual_dropout_tpl: base_hyperparams.Config = template_field(stochastics.Dropout)
  norm_policy: str | None = None

  def _create_self_atten(self):
    self.create_child("self_atten", self.self_atten_tpl)

  def setup(self):
    if self.self_atten_tpl is None:
      raise ValueError("SelfAttentionWithNormAndResidual needs self_atten_tpl.")
    if self.pre_layer_norm is not None and self.norm_policy is not None:
      raise ValueError(
        "Set pre_layer_norm or norm_policy, not both (set pre_layer_norm=None to use "
        f"norm_policy={self.norm_policy!r})."
      )
    if self.norm_policy and self.norm_policy not in _NORM_POLICIES:
      raise ValueError(f"norm_policy must be one of {_NORM_POLICIES}, got {self.norm_policy!r}.")
    if self.unified_norm_policy() == "primer_hybrid":
      self.create_child("pre_norm", self.norm_tpl)
      self.create_child("post_norm", self.norm_tpl)
    else:
      self.create_child("norm", self.norm_tpl)
    self._create_self_atten()
    self.create_child(
      "residual_dropout",
      self.residual_dropout_tpl.clone().set(keep_prob=1.0 - self.residual_dropout_prob),
    )

  def unified_norm_policy(self) -> str | None:
    if self.pre_layer_norm is not None:
      return "pre" if self.pre_layer_norm else "post_skip"
    return self.norm_policy

  def _has_context_window(self) -> bool:
    tpl = self.self_atten_tpl
    cls = getattr(tpl, "cls", None) or getattr(tpl, "__fn_or_cls__", None)
    if not (
      isinstance(cls, type)
      and issubclass(cls, (DotProductAttentionWithContext, DotProductAttentionWithContextXL))
    ):
      return False
    return tpl.left_context is not None or tpl.right_context is not None

  def __call__(
    self, inputs: JTensor, paddings: JTensor, atten_mask: JTensor | None = None
  ) -> JTensor:
    """inputs [B, T, D], paddings [B, T], atten_mask [B|1, 1, T|1, T] -> [B, T, D]."""
    policy = self.unified_norm_policy()
    residual = inputs
    if policy == "pre":
      inputs = self.norm(inputs)
    elif policy == "primer_hybrid":
      inputs = self.pre_norm(inputs)
    padding_mask = attentions.convert_paddings_to_mask(paddings, inputs.dtype)  # [B, 1, 1, T]
    if self._has_context_window():
      # With a window, padded queries are masked too: [B, 1, T, T].
      padding_mask = jnp.minimum(padding_mask, jnp.transpose(padding_mask, (0, 1, 3, 2)))
    atten_mask = padding_mask if atten_mask is None else jnp.minimum(atten_mask, padding_mask)
    result = self.self_atten(
      query_vec=inputs, key_vec=inputs, value_vec=inputs, atten_mask=atten_mask
    )[0]
    if policy == "primer_hybrid":
      result = self.post_norm(result)
    elif policy == "post":
      result = self.norm(result)
    result = self.residual_dropout(result) * self.residual_weight + residual * self.input_weight
    if policy == "post_skip":
      result = self.norm(result)
    return result


_LAYER_ORDERS = ("mhsa", "conv", "mhsa_before_conv", "conv_before_mhsa")


class Conformer(base_layer.BaseLayer):
  """The Conformer layer (children fflayer_start, trans_atten, lconv, fflayer_end, final_ln).

  Attributes:
    input_dims: input dim (fflayer_start projects it to model_dims when they differ).
    model_dims: model dim.
    kernel_size: the light conv's kernel size.
    ff_activation_tpl: activation of the feed-forward blocks (Swish).
    ff_residual_weight: residual weight of the feed-forward blocks.
    ffn_dim_multiplier: feed-forward hidden dim = ffn_dim_multiplier * model_dims.
    atten_num_heads: attention heads.
    layer_order: 'mhsa', 'conv', 'mhsa_before_conv' or 'conv_before_mhsa'.
    dropout_prob: when set, every dropout below uses it.
    conv_residual_dropout: the light conv's residual dropout.
    atten_residual_dropout: the attention block's residual dropout.
    ffn_residual_dropout: the feed-forward blocks' residual dropout.
    atten_dropout: dropout on the attention probabilities.
    ffn_relu_dropout: dropout after the feed-forward activation.
    fflayer_start_tpl: the first feed-forward block (None: none).
    trans_atten_tpl: the attention block.
    lconv_tpl: the light conv block (None: none; needs no 'conv' in layer_order).
    fflayer_end_tpl: the last feed-forward block (None: none).
    fflayer_weight_sharing: use fflayer_start again at the end (no fflayer_end).
    final_ln_tpl: the final normalization (None: none).
  """

  input_dims: int | None = None
  model_dims: int = 512
  kernel_size: int = 32
  ff_activation_tpl: base_hyperparams.Config = template_field(activations.Swish)
  ff_residual_weight: float = 0.5
  ffn_dim_multiplier: int = 4
  atten_num_heads: int = 8
  layer_order: str = "mhsa_before_conv"
  dropout_prob: float | None = None
  conv_residual_dropout: float | None = None
  atten_residual_dropout: float | None = None
  ffn_residual_dropout: float | None = None
  atten_dropout: float | None = None
  ffn_relu_dropout: float | None = None
  fflayer_start_tpl: base_hyperparams.Config | None = template_field(
    transformers.TransformerFeedForward
  )
  trans_atten_tpl: base_hyperparams.Config = template_field(SelfAttentionWithNormAndResidual)
  lconv_tpl: base_hyperparams.Config | None = template_field(convolutions.LightConv1D)
  fflayer_end_tpl: base_hyperparams.Config | None = template_field(
    transformers.TransformerFeedForward
  )
  fflayer_weight_sharing: bool = False
  final_ln_tpl: base_hyperparams.Config | None = template_field(normalizations.LayerNorm)

  def _dropout_prob(self, prob: float | None) -> float:
    if self.dropout_prob is not None:
      return self.dropout_prob
    return 0.0 if prob is None else prob

  def _ffn_config(self, tpl, input_dims: int, output_dims: int | None):
    p = tpl.clone().set(
      activation_tpl=self.ff_activation_tpl.clone(),
      input_dims=input_dims,
      hidden_dims=self.model_dims * self.ffn_dim_multiplier,
      residual_weight=self.ff_residual_weight,
      residual_dropout_prob=self._dropout_prob(self.ffn_residual_dropout),
      relu_dropout_prob=self._dropout_prob(self.ffn_relu_dropout),
    )
    if output_dims is not None:
      p.output_dims = output_dims
    return p

  def _create_trans_atten(self):
    if "mhsa" not in self.layer_order:
      return
    atten_p = self.trans_atten_tpl.self_atten_tpl.clone().set(
      input_dim=self.model_dims,
      hidden_dim=self.model_dims,
      atten_dropout_prob=self._dropout_prob(self.atten_dropout),
      num_heads=self.atten_num_heads,
    )
    block_p = self.trans_atten_tpl.clone().set(
      residual_dropout_prob=self._dropout_prob(self.atten_residual_dropout),
      self_atten_tpl=atten_p,
    )
    block_p.norm_tpl = block_p.norm_tpl.clone().set(dim=self.model_dims)
    self.create_child("trans_atten", block_p)

  def _create_conv(self):
    if "conv" not in self.layer_order:
      return
    if self.lconv_tpl is None:
      raise ValueError(f"layer_order {self.layer_order!r} has a conv but lconv_tpl is None.")
    self.create_child(
      "lconv",
      self.lconv_tpl.clone().set(
        input_dims=self.model_dims,
        kernel_size=self.kernel_size,
        dropout_prob=self._dropout_prob(self.conv_residual_dropout),
      ),
    )

  def setup(self):
    if self.layer_order not in _LAYER_ORDERS:
      raise ValueError(f"layer_order must be one of {_LAYER_ORDERS}, got {self.layer_order!r}.")
    if self.dropout_prob is not None:
      for prob in (
        self.atten_dropout,
        self.atten_residual_dropout,
        self.conv_residual_dropout,
        self.ffn_residual_dropout,
        self.ffn_relu_dropout,
      ):
        if prob is not None and prob != self.dropout_prob:
          raise ValueError(
            f"dropout_prob={self.dropout_prob} overrides every dropout; a different one "
            f"({prob}) is set too."
          )
    if self.fflayer_start_tpl:
      out = None if self.input_dims == self.model_dims else self.model_dims
      self.create_child(
        "fflayer_start", self._ffn_config(self.fflayer_start_tpl, self.input_dims, out)
      )
    if self.fflayer_end_tpl:
      if self.fflayer_weight_sharing:
        if self.fflayer_start_tpl is None:
          raise ValueError("fflayer_weight_sharing needs fflayer_start_tpl.")
      else:
        self.create_child(
          "fflayer_end", self._ffn_config(self.fflayer_end_tpl, self.model_dims, None)
        )
    self._create_trans_atten()
    self._create_conv()
    if self.final_ln_tpl:
      self.create_child("final_ln", self.final_ln_tpl.clone().set(dim=self.model_dims))

  @property
  def has_fflayer_start(self) -> bool:
    return self.fflayer_start_tpl is not None

  @property
  def has_fflayer_end(self) -> bool:
    return self.fflayer_end_tpl is not None and not self.fflayer_weight_sharing

  @property
  def has_final_ln(self) -> bool:
    return bool(self.final_ln_tpl)

  def __call__(
    self, inputs: JTensor, paddings: JTensor, atten_mask: JTensor | None = None
  ) -> JTensor:
    """inputs [B, T, input_dims], paddings [B, T] -> [B, T, model_dims]."""
    if atten_mask is not None and "mhsa" not in self.layer_order:
      raise ValueError("An attention mask was given but this Conformer has no attention.")
    if self.has_fflayer_start:
      inputs = self.fflayer_start(inputs, paddings)
    order = {
      "mhsa": ("mhsa",),
      "conv": ("conv",),
      "mhsa_before_conv": ("mhsa", "conv"),
      "conv_before_mhsa": ("conv", "mhsa"),
    }[self.layer_order]
    for block in order:
      if block == "mhsa":
        inputs = self.trans_atten(inputs=inputs, paddings=paddings, atten_mask=atten_mask)
      else:
        inputs = self.lconv(inputs, paddings)
    if self.has_fflayer_end:
      inputs = self.fflayer_end(inputs, paddings)
    elif self.fflayer_weight_sharing:
      inputs = self.fflayer_start(inputs, paddings)
    if self.has_final_ln:
      inputs = self.final_ln(inputs)
    return inputs


# Pax's module-level names for the types and variable collections this module's API uses.
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
NestedMap = py_utils.NestedMap
