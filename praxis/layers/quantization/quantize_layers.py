"""The per-layer rewrites behind quantize.py (Pax's quantize_*_layer_weights).

Each takes a layer template and swaps its float children for
praxis.layers.quantization's with a QuantizationParams built from the given
type, mode and weight / activation settings. quantize.py re-exports them.
"""

from __future__ import annotations

from absl import logging
import fiddle as fdl
from praxis import base_layer
from praxis import layers
from praxis import pax_fiddle
from praxis.layers.quantization import embedding_softmax as quantized_embedding_softmax
from praxis.layers.quantization import linears as quantized_linears
from praxis.layers.quantization import ngrammer as quantized_ngrammer
from praxis.layers.quantization import quantization_hparams

LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
QuantizationParams = quantization_hparams.QuantizationParams
QuantizationType = quantization_hparams.QuantizationType
QuantizationMode = quantization_hparams.QuantizationMode
WeightQuantizationParams = quantization_hparams.WeightQuantizationParams
ActQuantizationParams = quantization_hparams.ActQuantizationParams


def _qparams(quantization_type, mode, weight_params, act_params=None) -> QuantizationParams:
  return QuantizationParams(
    quantization_type=quantization_type,
    mode=mode,
    weight_params=weight_params,
    act_params=act_params,
  )


def _replace(parent: LayerTpl, field: str, new_cls, float_cls, quant: QuantizationParams) -> None:
  """parent.field becomes Config(new_cls, quantization=quant), keeping the old template's
  settings when it built `float_cls` (or a subclass)."""
  old = getattr(parent, field)
  new = pax_fiddle.Config(new_cls, quantization=quant)
  if old is not None and issubclass(fdl.get_callable(old), float_cls):
    new.copy_fields_from(old)
  setattr(parent, field, new)


def _quantized_attentions():
  # Imported on use: the quantized attentions are the heaviest quantization module.
  from praxis.layers.quantization import attentions  # pylint: disable=g-import-not-at-top

  return attentions


def _quantized_mqa():
  from praxis.layers.quantization import multi_query_attention  # pylint: disable=g-import-not-at-top

  return multi_query_attention


def _quantize_embedding_softmax_layer_weights(
  layer_tpl: LayerTpl,
  quantization_type: QuantizationType,
  mode: QuantizationMode,
  weight_quantization_params: WeightQuantizationParams,
  act_quantization_params: ActQuantizationParams | None = None,
  transposed_embedding_softmax: bool = False,
  softmax_only: bool = True,
) -> None:
  """Swaps a TransformerLm's / TransformerEncoderDecoder's shared softmax (and, unless
  softmax_only, embedding) templates for quantized ones."""
  quant = _qparams(quantization_type, mode, weight_quantization_params, act_quantization_params)
  new_cls = (
    quantized_embedding_softmax.NClassMajorSharedEmbeddingSoftmax
    if transposed_embedding_softmax
    else quantized_embedding_softmax.SharedEmbeddingSoftmax
  )

  def rewrite(field: str) -> None:
    tpl = getattr(layer_tpl, field)
    if tpl is None:
      return
    if not issubclass(fdl.get_callable(tpl), layers.SharedEmbeddingSoftmax):
      logging.info(
        "layer_tpl.%s builds %s, not a SharedEmbeddingSoftmax: left unquantized.",
        field,
        fdl.get_callable(tpl),
      )
      return
    new = pax_fiddle.Config(new_cls, quantization=quant)
    new.copy_fields_from(tpl)
    setattr(layer_tpl, field, new)

  rewrite("softmax_tpl")
  if softmax_only:
    return
  model_cls = fdl.get_callable(layer_tpl)
  if issubclass(model_cls, layers.TransformerLm):
    rewrite("separate_embedding_tpl")
  if issubclass(model_cls, layers.TransformerEncoderDecoder):
    rewrite("encoder_embedding_tpl")
    rewrite("decoder_embedding_tpl")


def _quantize_ngrammer_embedding_weights(
  layer_tpl: LayerTpl,
  quantization_type: QuantizationType,
  mode: QuantizationMode,
  weight_quantization_params: WeightQuantizationParams,
) -> None:
  """Swaps the (VQ)Ngrammer templates of an LM / encoder-decoder for quantized ones."""
  quant = _qparams(quantization_type, mode, weight_quantization_params)
  ngrammer = layers.ngrammer

  def rewrite(field: str) -> None:
    tpl = getattr(layer_tpl, field)
    if tpl is None:
      return
    cls = fdl.get_callable(tpl)
    if issubclass(cls, ngrammer.Ngrammer):
      new_cls = quantized_ngrammer.Ngrammer
    elif issubclass(cls, ngrammer.VQNgrammer):
      new_cls = quantized_ngrammer.VQNgrammer
    else:
      return
    new = pax_fiddle.Config(new_cls, quantization=quant)
    new.copy_fields_from(tpl)
    setattr(layer_tpl, field, new)

  model_cls = fdl.get_callable(layer_tpl)
  if issubclass(model_cls, layers.TransformerLm):
    rewrite("ngrammer_tpl")
  if issubclass(model_cls, layers.TransformerEncoderDecoder):
    rewrite("encoder_ngrammer_tpl")
    rewrite("decoder_ngrammer_tpl")


def quantize_transformer_layer_weights(
  tr_tpl: LayerTpl,
  quantization_type: QuantizationType,
  mode: QuantizationMode,
  weight_quantization_params: WeightQuantizationParams,
  act_quantization_params: ActQuantizationParams | None = None,
  linear_only: bool = False,
  rank: int = -1,
  quantize_self_attention: bool = True,
  quantize_cross_attention: bool = True,
) -> None:
  """Quantizes one Transformer template: its feed-forward linears always, and (unless
  linear_only) its self / cross attention projections."""
  if not linear_only:
    quantize_attention_layer_weights(
      tr_tpl,
      quantization_type,
      mode,
      weight_quantization_params,
      act_quantization_params,
      quantize_self_attention,
      quantize_cross_attention,
    )
  quantize_transformer_feed_forward_layer_weights(
    tr_tpl.tr_fflayer_tpl,
    quantization_type,
    mode,
    weight_quantization_params,
    act_quantization_params,
    rank,
  )


def quantize_attention_layer_weights(
  tr_tpl: LayerTpl,
  quantization_type: QuantizationType,
  mode: QuantizationMode,
  weight_quantization_params: WeightQuantizationParams,
  act_quantization_params: ActQuantizationParams | None = None,
  quantize_self_attention: bool = True,
  quantize_cross_attention: bool = True,
) -> None:
  """Quantizes a Transformer's tr_atten_tpl and / or cross_atten_tpl projections.

  Quantizing only one of the two needs separate templates: a missing
  cross_atten_tpl (which defaults to tr_atten_tpl) becomes a copy first.
  """
  args = (quantization_type, mode, weight_quantization_params, act_quantization_params)

  def rewrite(field: str) -> None:
    atten_tpl = getattr(tr_tpl, field)
    if atten_tpl is None:
      return
    cls = fdl.get_callable(atten_tpl)
    # Multi-query first: ours subclasses DotProductAttention (Pax's does not).
    if issubclass(cls, layers.multi_query_attention.MultiQueryDotProductAttention):
      quantize_mq_dot_product_attention_layer_weights(atten_tpl, *args)
    elif issubclass(cls, layers.attentions.DotProductAttention):
      quantize_dot_product_attention_layer_weights(atten_tpl, *args)
    else:
      raise ValueError(
        f"tr_tpl.{field} builds {cls}; quantization supports DotProductAttention and "
        "MultiQueryDotProductAttention (or pass linear_only=True)."
      )

  if quantize_self_attention != quantize_cross_attention and tr_tpl.cross_atten_tpl is None:
    # use_cross_attention is only final at setup; an unused copy is harmless.
    tr_tpl.cross_atten_tpl = tr_tpl.tr_atten_tpl.clone()
  if quantize_self_attention:
    rewrite("tr_atten_tpl")
  if quantize_cross_attention:
    rewrite("cross_atten_tpl")


def quantize_dot_product_attention_layer_weights(
  attn_tpl: LayerTpl,
  quantization_type: QuantizationType,
  mode: QuantizationMode,
  weight_quantization_params: WeightQuantizationParams,
  act_quantization_params: ActQuantizationParams | None = None,
) -> None:
  """DotProductAttention: proj_tpl and combined_qkv_proj_tpl become quantized."""
  qattn = _quantized_attentions()
  args = (quantization_type, mode, weight_quantization_params, act_quantization_params)
  _replace(
    attn_tpl,
    "proj_tpl",
    qattn.AttentionProjection,
    layers.attentions.AttentionProjection,
    _qparams(*args),
  )
  _replace(
    attn_tpl,
    "combined_qkv_proj_tpl",
    qattn.CombinedQKVProjectionLayer,
    layers.attentions.CombinedQKVProjectionLayer,
    _qparams(*args),
  )


def quantize_mq_dot_product_attention_layer_weights(
  attn_tpl: LayerTpl,
  quantization_type: QuantizationType,
  mode: QuantizationMode,
  weight_quantization_params: WeightQuantizationParams,
  act_quantization_params: ActQuantizationParams | None = None,
) -> None:
  """MultiQueryDotProductAttention: proj_tpl and headless_proj_tpl become quantized."""
  args = (quantization_type, mode, weight_quantization_params, act_quantization_params)
  _replace(
    attn_tpl,
    "proj_tpl",
    _quantized_attentions().AttentionProjection,
    layers.attentions.AttentionProjection,
    _qparams(*args),
  )
  _replace(
    attn_tpl,
    "headless_proj_tpl",
    _quantized_mqa().OneHeadedAttentionProjection,
    layers.multi_query_attention.OneHeadedAttentionProjection,
    _qparams(*args),
  )


def quantize_transformer_feed_forward_layer_weights(
  tr_fflayer_tpl: LayerTpl,
  quantization_type: QuantizationType,
  mode: QuantizationMode,
  weight_quantization_params: WeightQuantizationParams,
  act_quantization_params: ActQuantizationParams | None = None,
  rank: int = -1,
) -> None:
  """TransformerFeedForward: every FeedForward's linear becomes quantization.Linear
  (rank > 0: factorized into [I, rank] @ [rank, O])."""
  tr_fflayer_tpl.fflayer_tpl.linear_tpl = pax_fiddle.Config(
    quantized_linears.Linear,
    quantization=_qparams(
      quantization_type, mode, weight_quantization_params, act_quantization_params
    ),
    rank=rank,
  )
