"""Pax's config rewriters: turn a float model config into its quantized counterpart.

They edit layer templates in place, swapping float layers for the
praxis.layers.quantization ones with a QuantizationParams:

  TransformerFeedForward.fflayer_tpl.linear_tpl -> quantization.Linear
  DotProductAttention proj_tpl / combined_qkv_proj_tpl -> quantization.attentions'
  MultiQueryDotProductAttention proj_tpl / headless_proj_tpl -> quantized ones
  TransformerLm / TransformerEncoderDecoder softmax (and embedding) templates
      -> quantization.SharedEmbeddingSoftmax or NClassMajorSharedEmbeddingSoftmax
  ngrammer templates -> quantization.Ngrammer / VQNgrammer
  a diffusion target's conv_tpl -> quantization.Conv2D

Entry points: set_transformer_quantization (one knob set for every
transformer), set_transformer_mixed_precision_quantization (per part),
set_diffusion_quantization, set_inference_mode, and the experiment decorators
for_transformer / mixed_precision_for_transformer / for_diffusion, which wrap
an experiment class so that its task()'s model is rewritten:

  @quantize.for_transformer(quantization_type=QuantizationType.AQT)
  class MyLmAqt(MyLm):
    pass
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Dict, Sequence, Type

import fiddle as fdl
from jax import numpy as jnp
from praxis import base_layer
from praxis import layers
from praxis import pax_fiddle
from praxis.layers import quantization
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantize_layers
from praxis.layers.quantization import utils

LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
QuantizationParams = quantization_hparams.QuantizationParams
QuantizationType = quantization_hparams.QuantizationType
QuantizationMode = quantization_hparams.QuantizationMode
WeightQuantizationParams = quantization_hparams.WeightQuantizationParams
ActQuantizationParams = quantization_hparams.ActQuantizationParams
TransformerLayer = quantization_hparams.TransformerLayer

_VALID_BITS = (2, 4, 8)

# The per-layer rewrites, under Pax's names in this module.
_qparams = quantize_layers._qparams  # pylint: disable=protected-access
_quantize_embedding_softmax_layer_weights = (
  quantize_layers._quantize_embedding_softmax_layer_weights
)  # pylint: disable=protected-access
_quantize_ngrammer_embedding_weights = quantize_layers._quantize_ngrammer_embedding_weights  # pylint: disable=protected-access
quantize_attention_layer_weights = quantize_layers.quantize_attention_layer_weights
quantize_dot_product_attention_layer_weights = (
  quantize_layers.quantize_dot_product_attention_layer_weights
)
quantize_mq_dot_product_attention_layer_weights = (
  quantize_layers.quantize_mq_dot_product_attention_layer_weights
)
quantize_transformer_feed_forward_layer_weights = (
  quantize_layers.quantize_transformer_feed_forward_layer_weights
)
quantize_transformer_layer_weights = quantize_layers.quantize_transformer_layer_weights


def _rewrite_models(task_p, rewrite_model, include_init_rules: bool = False):
  """Applies rewrite_model(model config) to task_p.model (and, if asked, to the models of
  task_p.train.init_from_checkpoint_rules); returns the task.

  Pax's task_p.model is a config, rewritten in place. A task holding a built model (a
  frozen TaskConfig, as tasks_lib.task_from_fields makes) gets a copy rebuilt from the
  rewritten copy of the model's hparams.
  """
  model = task_p.model
  if isinstance(model, base_layer.BaseLayer):
    config = copy.deepcopy(model.hparams)
    rewrite_model(config)
    task_p = dataclasses.replace(task_p, model=base_layer.instantiate(config))
  else:
    rewrite_model(model)
  rules = getattr(getattr(task_p, "train", None), "init_from_checkpoint_rules", None)
  if include_init_rules and rules:
    for rule in rules.values():
      rewrite_model(rule.task_p.model)
  return task_p


def _check_bits(num_bits: int) -> None:
  if num_bits not in _VALID_BITS:
    raise ValueError(f"num_bits must be one of {_VALID_BITS}, got {num_bits}.")


def _wrap_task(cls, rewrite, before=None):
  """A subclass of experiment `cls` (same name) whose task() has its model(s) rewritten."""

  @functools.wraps(cls, updated=())  # keeps the experiment's name for the registry
  class Wrapper(cls):
    def task(self):
      if before is not None:
        before(self)
      return rewrite(super().task())

  return Wrapper


def for_transformer(
  num_bits: int = 8,
  quantization_type: QuantizationType = QuantizationType.FQ,
  mode: QuantizationMode = QuantizationMode.TRAINING,
  use_symmetric: bool = True,
  rank: int = -1,
  *,
  weight_quant_only: bool = True,
  quantize_embedding_softmax: bool = False,
  transposed_embedding_softmax: bool = False,
  softmax_only: bool = True,
  quantize_ngrammer_embedding: bool = False,
  linear_only: bool = False,
  quantize_self_attention: bool = True,
  quantize_cross_attention: bool = True,
  dtype: jnp.dtype = jnp.int8,
  quantize_init_from_checkpoint_rules_task: bool = False,
  block_size: int = 0,
  num_bits_act: int | None = None,
  use_symmetric_act: bool | None = None,
  skip_transformers: list[str] | None = None,
  num_optimize_clipping: int | None = None,
  min_clipping: float | None = None,
  clipping_coeff: float = 1.0,
  optimize_clipping_per_channel: bool = False,
  vn_scale: float | None = None,
):
  """Experiment decorator: quantizes every transformer of the task's model(s).

  The arguments are set_transformer_quantization's; quantize_init_from_checkpoint_rules_task
  also rewrites the models of task_p.train.init_from_checkpoint_rules. Models without
  transformers are left as they are.
  """
  settings = dict(
    quantization_type=quantization_type,
    mode=mode,
    num_bits=num_bits,
    linear_only=linear_only,
    use_symmetric=use_symmetric,
    rank=rank,
    weight_quant_only=weight_quant_only,
    quantize_embedding_softmax=quantize_embedding_softmax,
    transposed_embedding_softmax=transposed_embedding_softmax,
    quantize_ngrammer_embedding=quantize_ngrammer_embedding,
    dtype=dtype,
    block_size=block_size,
    quantize_self_attention=quantize_self_attention,
    quantize_cross_attention=quantize_cross_attention,
    softmax_only=softmax_only,
    use_symmetric_act=use_symmetric_act,
    num_bits_act=num_bits_act,
    skip_transformers=skip_transformers,
    num_optimize_clipping=num_optimize_clipping,
    min_clipping=min_clipping,
    clipping_coeff=clipping_coeff,
    optimize_clipping_per_channel=optimize_clipping_per_channel,
    vn_scale=vn_scale,
  )

  def rewrite(task_p):
    _check_bits(num_bits)
    return _rewrite_models(
      task_p,
      lambda model: set_transformer_quantization(model, **settings),
      quantize_init_from_checkpoint_rules_task,
    )

  return lambda cls: _wrap_task(cls, rewrite)


def mixed_precision_for_transformer(
  quantization_type: QuantizationType = QuantizationType.PTQ,
  mode: QuantizationMode = QuantizationMode.INFERENCE,
  num_bits: Dict[TransformerLayer, int] | None = None,
  sub_channel_blocksize: Dict[TransformerLayer, int] | None = None,
  use_symmetric: Dict[TransformerLayer, bool] | None = None,
  dtype: Dict[TransformerLayer, jnp.dtype] | None = None,
  *,
  default_sub_channel_blocksize: int = 0,
  default_use_symmetric: bool = True,
  default_dtype: jnp.dtype = jnp.int8,
  transposed_embedding_softmax: bool = False,
  quantize_self_attention: bool = True,
  quantize_cross_attention: bool = True,
):
  """Experiment decorator: set_transformer_mixed_precision_quantization on task().model.

  Parts missing from num_bits stay float. The experiment's set_quant_mode(mode) is
  called first when it has one.
  """
  num_bits = dict(num_bits or {})
  for part, bits in num_bits.items():
    if bits not in _VALID_BITS:
      raise ValueError(f"num_bits[{part}] must be one of {_VALID_BITS}, got {bits}.")

  def before(experiment):
    if hasattr(experiment, "set_quant_mode"):
      experiment.set_quant_mode(mode)

  def rewrite(task_p):
    return _rewrite_models(task_p, rewrite_model)

  def rewrite_model(model):
    set_transformer_mixed_precision_quantization(
      model,
      quantization_type=quantization_type,
      mode=mode,
      num_bits=num_bits,
      sub_channel_blocksize=sub_channel_blocksize,
      use_symmetric=use_symmetric,
      dtype=dtype,
      default_sub_channel_blocksize=default_sub_channel_blocksize,
      default_use_symmetric=default_use_symmetric,
      default_dtype=default_dtype,
      transposed_embedding_softmax=transposed_embedding_softmax,
      quantize_self_attention=quantize_self_attention,
      quantize_cross_attention=quantize_cross_attention,
    )

  return lambda cls: _wrap_task(cls, rewrite, before)


def for_diffusion(
  target: Type[base_layer.BaseLayer],
  num_bits: int = 8,
  quantization_type: QuantizationType = QuantizationType.FQ,
  mode: QuantizationMode = QuantizationMode.TRAINING,
  use_symmetric: bool = True,
  dtype: jnp.dtype = jnp.int8,
  weight_quant_only: bool = True,
  quantize_init_from_checkpoint_rules_task: bool = False,
):
  """Experiment decorator: set_diffusion_quantization(model, target, ...) on the task's model(s)."""

  def rewrite(task_p):
    _check_bits(num_bits)
    return _rewrite_models(task_p, rewrite_model, quantize_init_from_checkpoint_rules_task)

  def rewrite_model(model):
    set_diffusion_quantization(
      model,
      target,
      quantization_type=quantization_type,
      mode=mode,
      num_bits=num_bits,
      use_symmetric=use_symmetric,
      weight_quant_only=weight_quant_only,
      dtype=dtype,
    )

  return lambda cls: _wrap_task(cls, rewrite)


def _act_params_for(weight_quant_only, num_bits_act, use_symmetric_act):
  if weight_quant_only:
    if num_bits_act is not None or use_symmetric_act is not None:
      raise ValueError(
        "num_bits_act / use_symmetric_act quantize activations: set weight_quant_only=False "
        "to use them, or leave them None."
      )
    return None
  if num_bits_act is None or use_symmetric_act is None:
    raise ValueError(
      "weight_quant_only=False quantizes activations too: set both num_bits_act and "
      "use_symmetric_act."
    )
  return ActQuantizationParams(precision=num_bits_act, symmetric=use_symmetric_act)


def set_transformer_quantization(
  config: LayerTpl,
  quantization_type: QuantizationType = QuantizationType.PTQ,
  mode: QuantizationMode = QuantizationMode.INFERENCE,
  num_bits: int = 8,
  linear_only: bool = False,
  use_symmetric: bool = True,
  rank: int = -1,
  *,
  weight_quant_only: bool = True,
  quantize_self_attention: bool = True,
  quantize_cross_attention: bool = True,
  quantize_embedding_softmax: bool = False,
  transposed_embedding_softmax: bool = False,
  softmax_only: bool = True,
  quantize_ngrammer_embedding: bool = False,
  dtype: jnp.dtype = jnp.int8,
  block_size: int = 0,
  use_int4_packed_weights: bool = True,
  int4_packed_weights_container_dtype: jnp.dtype = jnp.int32,
  num_bits_act: int | None = None,
  use_symmetric_act: bool | None = None,
  skip_transformers: list[str] | None = None,
  num_optimize_clipping: int | None = None,
  min_clipping: float | None = None,
  clipping_coeff: float = 1.0,
  optimize_clipping_per_channel: bool | None = None,
  vn_scale: float | None = None,
) -> None:
  """Quantizes every Transformer template under `config` with one set of knobs.

  Every Transformer (except those named in skip_transformers) gets quantized
  feed-forward linears and, unless linear_only, quantized attention
  projections (quantize_self_attention / quantize_cross_attention pick which).
  quantize_embedding_softmax also swaps the LM's / encoder-decoder's shared
  softmax (and, unless softmax_only, its embeddings; transposed_embedding_softmax
  picks NClassMajorSharedEmbeddingSoftmax); quantize_ngrammer_embedding their
  (VQ)Ngrammer tables. Weights take num_bits (dtype, symmetric or not,
  block_size > 0 for sub-channel scales, clipping settings); activations are
  quantized too when weight_quant_only=False, with num_bits_act and
  use_symmetric_act.
  """
  weight_params = WeightQuantizationParams(
    precision=num_bits,
    use_symmetric=use_symmetric,
    dtype=dtype,
    block_size=block_size,
    use_int4_packed_weights=use_int4_packed_weights,
    int4_packed_weights_container_dtype=int4_packed_weights_container_dtype,
    num_optimize_clipping=num_optimize_clipping,
    min_clipping=min_clipping,
    clipping_coeff=clipping_coeff,
    optimize_clipping_per_channel=bool(optimize_clipping_per_channel),
    vn_scale=vn_scale,
  )
  act_params = _act_params_for(weight_quant_only, num_bits_act, use_symmetric_act)
  skip = set(skip_transformers or ())
  for tr_tpl in utils.find_target_tpl(config, layers.transformers.Transformer):
    if getattr(tr_tpl, "name", None) in skip:
      continue
    quantize_transformer_layer_weights(
      tr_tpl,
      quantization_type,
      mode,
      weight_params,
      act_params,
      linear_only,
      rank,
      quantize_self_attention,
      quantize_cross_attention,
    )
  if not (quantize_embedding_softmax or quantize_ngrammer_embedding):
    return
  for model_tpl in utils.find_target_tpl(
    config, [layers.TransformerLm, layers.TransformerEncoderDecoder]
  ):
    if quantize_embedding_softmax:
      _quantize_embedding_softmax_layer_weights(
        model_tpl,
        quantization_type,
        mode,
        weight_params,
        act_params,
        transposed_embedding_softmax,
        softmax_only,
      )
    if quantize_ngrammer_embedding:
      _quantize_ngrammer_embedding_weights(model_tpl, quantization_type, mode, weight_params)


def set_transformer_mixed_precision_quantization(
  config: LayerTpl,
  quantization_type: QuantizationType = QuantizationType.PTQ,
  mode: QuantizationMode = QuantizationMode.INFERENCE,
  num_bits: Dict[TransformerLayer, int] | None = None,
  sub_channel_blocksize: Dict[TransformerLayer, int] | None = None,
  use_symmetric: Dict[TransformerLayer, bool] | None = None,
  dtype: Dict[TransformerLayer, jnp.dtype] | None = None,
  *,
  default_sub_channel_blocksize: int = 0,
  default_use_symmetric: bool = True,
  default_dtype: jnp.dtype = jnp.int8,
  transposed_embedding_softmax: bool = False,
  quantize_self_attention: bool = True,
  quantize_cross_attention: bool = True,
) -> None:
  """Quantizes transformer parts with their own settings, keyed by TransformerLayer.

  A part (LINEAR, ATTENTION, EMBEDDING_SOFTMAX, EMBEDDING_NGRAMMER) is quantized
  when num_bits names it; its *_ACT partner in num_bits quantizes its
  activations with those bits. Block size, symmetry and dtype fall back to the
  default_* values; an int4 dtype is stored unpacked.
  """
  num_bits = num_bits or {}
  sub_channel_blocksize = sub_channel_blocksize or {}
  use_symmetric = use_symmetric or {}
  dtype = dtype or {}

  def weight_params(part: TransformerLayer) -> WeightQuantizationParams:
    part_dtype = dtype.get(part, default_dtype)
    return WeightQuantizationParams(
      precision=num_bits[part],
      use_symmetric=use_symmetric.get(part, default_use_symmetric),
      dtype=part_dtype,
      use_int4_packed_weights=part_dtype != jnp.int4,
      block_size=sub_channel_blocksize.get(part, default_sub_channel_blocksize),
    )

  def act_params(part: TransformerLayer) -> ActQuantizationParams | None:
    if part not in num_bits:
      return None
    return ActQuantizationParams(
      precision=num_bits[part],
      symmetric=use_symmetric.get(part, default_use_symmetric),
    )

  transformer_tpls = utils.find_target_tpl(config, layers.transformers.Transformer)
  if TransformerLayer.LINEAR in num_bits:
    wp, ap = weight_params(TransformerLayer.LINEAR), act_params(TransformerLayer.LINEAR_ACT)
    for tr_tpl in transformer_tpls:
      quantize_transformer_feed_forward_layer_weights(
        tr_tpl.tr_fflayer_tpl, quantization_type, mode, wp, ap
      )
  if TransformerLayer.ATTENTION in num_bits:
    wp = weight_params(TransformerLayer.ATTENTION)
    ap = act_params(TransformerLayer.ATTENTION_ACT)
    for tr_tpl in transformer_tpls:
      quantize_attention_layer_weights(
        tr_tpl,
        quantization_type,
        mode,
        wp,
        ap,
        quantize_self_attention,
        quantize_cross_attention,
      )
  model_tpls = utils.find_target_tpl(
    config, [layers.TransformerLm, layers.TransformerEncoderDecoder]
  )
  if TransformerLayer.EMBEDDING_SOFTMAX in num_bits:
    wp = weight_params(TransformerLayer.EMBEDDING_SOFTMAX)
    ap = act_params(TransformerLayer.EMBEDDING_SOFTMAX_ACT)
    for model_tpl in model_tpls:
      _quantize_embedding_softmax_layer_weights(
        model_tpl,
        quantization_type,
        mode,
        wp,
        act_quantization_params=ap,
        transposed_embedding_softmax=transposed_embedding_softmax,
        softmax_only=True,
      )
  if TransformerLayer.EMBEDDING_NGRAMMER in num_bits:
    wp = weight_params(TransformerLayer.EMBEDDING_NGRAMMER)
    for model_tpl in model_tpls:
      _quantize_ngrammer_embedding_weights(model_tpl, quantization_type, mode, wp)


def set_diffusion_quantization(
  config: LayerTpl,
  target: Type[base_layer.BaseLayer],
  quantization_type: QuantizationType = QuantizationType.PTQ,
  mode: QuantizationMode = QuantizationMode.INFERENCE,
  num_bits: int = 8,
  use_symmetric: bool = True,
  weight_quant_only: bool = True,
  dtype: jnp.dtype = jnp.int8,
) -> None:
  """Every `target` template under `config` that has a conv_tpl gets quantization.Conv2D."""
  weight_params = WeightQuantizationParams(
    precision=num_bits, use_symmetric=use_symmetric, dtype=dtype
  )
  act = None if weight_quant_only else ActQuantizationParams(precision=num_bits)
  for tpl in utils.find_target_tpl(config, target):
    if hasattr(tpl, "conv_tpl"):
      tpl.conv_tpl = pax_fiddle.Config(
        quantization.Conv2D,
        quantization=_qparams(quantization_type, mode, weight_params, act),
      )


def set_inference_mode(config: LayerTpl) -> None:
  """Sets quantization.mode = INFERENCE on every quantized template under `config`."""
  _set_mode(config, QuantizationMode.INFERENCE)


def _set_mode(config: LayerTpl, mode: QuantizationMode) -> None:
  """Sets quantization.mode = `mode` on every template under `config` that has a quantization."""
  pending = [config]
  while pending:
    node = pending.pop()
    for item in node if isinstance(node, Sequence) and not isinstance(node, str) else [node]:
      if not isinstance(item, fdl.Config):
        continue
      quant = getattr(item, "quantization", None)
      if quant is not None:
        quant.mode = mode
      pending.extend(fdl.ordered_arguments(item).values())
