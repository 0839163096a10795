"""GLaM model configs (Pax's `praxis.layers.glam`): the builder functions, same arguments.

GLaM's transformer differs from the default stack in: a gated GELU feed-forward (two input
projections, one output), no biases anywhere, RmsNorm (direct scale, no bias) for every norm,
T5-style relative attention bias instead of position embeddings, GShard initialisation, and an
optional z-loss on the softmax. A MoE block is two layers whose first feed-forward is a
TransformerFeedForwardMoe; a dense block is one layer.

The MoE feed-forward is praxis.layers.transformer_moe's (GShard top-2 routing with capacity and
a load-balancing aux loss). As in Pax, StackedTransformer sets each MoE layer's gating_func from
its own field (default 'top2'), so `moe_gating_func` here does not reach the layers.
"""

from __future__ import annotations

from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import attentions
from praxis.layers import checkpoint_policy
from praxis.layers import embedding_softmax
from praxis.layers import normalizations
from praxis.layers import transformer_models
from praxis.layers import transformers

LanguageModelType = transformer_models.LanguageModelType


def _rms_norm() -> pax_fiddle.Config:
  return pax_fiddle.Config(normalizations.RmsNorm, direct_scale=True)


def GlamStackedTransformerHParams(  # noqa: N802 (Pax's name)
  model_dim,
  ff_dim,
  attention_num_heads,
  attention_key_value_dim,
  name="transformer",
  moe=False,
  moe_hidden_dim=None,
  moe_gating_embedding_level="token",
  ffn_activation_cls=activations.GELU,
  use_gated_activation=True,
  mask_self_attention=True,
  cross_attention=False,
  atten_logit_cap=0.0,
  attention_extra_logit=0.0,
  relative_attention_num_buckets=32,
  relative_attention_max_distance=128,
  moe_load_balance_loss_weight=0.01,
  moe_gating_func="top2",
  moe_gating_logit_cap=0.0,
  num_groups=1,
  c_dim=None,
  capacity_factor=0.0,
  e_dim=None,
  combine_qkv=False,
  bidirectional=False,
) -> pax_fiddle.Config:
  """One GLaM block as a StackedTransformer config: 2 layers (the first MoE) when `moe`, else
  1 dense layer. The arguments are Pax's (sizes, attention options, MoE routing options)."""
  p = pax_fiddle.Config(
    transformers.StackedTransformer,
    name=name,
    packed_input=True,
    moe_layers=[0] if moe else None,
    num_layers=2 if moe else 1,
    model_dims=model_dim,
    hidden_dims=ff_dim,
    num_heads=attention_num_heads,
    dim_per_head=attention_key_value_dim,
    num_experts=e_dim,
    num_groups=num_groups,
    mask_self_attention=mask_self_attention,
    use_cross_attention=cross_attention,
  )
  layer = p.transformer_layer_params_tpl
  for layer_tpl in layer if isinstance(layer, (list, tuple)) else [layer]:
    layer_tpl.ln_tpl = _rms_norm()

  atten = p.transformer_layer_params_tpl.tr_atten_tpl
  if atten.cls is not attentions.DotProductAttention:
    raise ValueError(f"GLaM configures a DotProductAttention, found {atten.cls.__name__}.")
  atten.set(
    attention_extra_logit=attention_extra_logit,
    use_bias=False,
    atten_logit_cap=atten_logit_cap,
    internal_gshard_gaussian_init=True,
    # No query scaling at all: GLaM's relative-bias attention uses raw dot products.
    internal_enable_query_scale=False,
    internal_enable_per_dim_scale=False,
    output_proj_use_nhd_shape=True,
  )
  atten.proj_tpl.attention_combine_dims = True
  atten.relative_bias_tpl = pax_fiddle.Config(
    attentions.RelativeBias,
    relative_attention_num_buckets=relative_attention_num_buckets,
    relative_attention_max_distance=relative_attention_max_distance,
    bidirectional=bidirectional,
  )
  if combine_qkv:
    atten.combine_qkv = True
    atten.combined_qkv_proj_tpl.use_bias = False
    atten.combined_qkv_proj_tpl.attention_combine_dims = True

  ff = p.transformer_layer_params_tpl.tr_fflayer_tpl
  ff.set(
    input_dims=model_dim,
    hidden_dims=ff_dim,
    has_bias=False,
    apply_padding_first=True,
    ln_tpl=_rms_norm(),
    add_skip_connection=True,
    activation_tpl=pax_fiddle.Config(ffn_activation_cls),
    use_gated_activation=use_gated_activation,
    internal_gshard_variance_scaling_fan_in_init=True,
  )

  p.moe_layer_tpl.set(
    input_dims=model_dim,
    hidden_dims=moe_hidden_dim or ff_dim,
    ln_tpl=_rms_norm(),
    num_experts=e_dim,
    num_groups=num_groups,
    gating_logit_cap=moe_gating_logit_cap,
    expert_capacity_dim=c_dim,
    unadjusted_expert_capacity_factor=capacity_factor,
    internal_gshard_variance_scaling_fan_in_init=True,
    moe_load_balance_loss_weight=moe_load_balance_loss_weight,
    gating_func=moe_gating_func,
    moe_gating_embedding_level=moe_gating_embedding_level,
  )
  return p


def GlamUniTransformerLmHParams(  # noqa: N802 (Pax's name)
  vocab_size,
  model_dim,
  ff_dim,
  attention_num_heads,
  attention_key_value_dim,
  num_transformer_layers,
  name="transformer",
  moe=False,
  moe_hidden_dim=None,
  moe_gating_embedding_level="token",
  ffn_activation_cls=activations.GELU,
  use_gated_activation=True,
  atten_logit_cap=0.0,
  attention_extra_logit=0.0,
  relative_attention_num_buckets=32,
  relative_attention_max_distance=128,
  moe_gating_func="top2",
  moe_gating_logit_cap=0.0,
  num_groups=1,
  c_dim=None,
  capacity_factor=0.0,
  e_dim=None,
  use_tgt_labels_size_as_loss_denominator=True,
  moe_load_balance_loss_weight=0.01,
  z_loss_weight=1e-4,
  combine_qkv=False,
  bidirectional=False,
  repeat=True,
  num_pipeline_stages=1,
  num_pipeline_microbatches=1,
  model_type=LanguageModelType.CAUSAL,
  checkpoint_policy=checkpoint_policy.AutodiffCheckpointType.SAVE_NOTHING,
) -> pax_fiddle.Config:
  """A decoder-only GLaM TransformerLm config: no position embedding (relative bias), a tied
  GShardSharedEmbeddingSoftmax with a z-loss, a final RmsNorm, and the GLaM blocks repeated
  (StackedTransformerRepeated), unrolled in one stack (`repeat=False`) or pipelined."""
  p = pax_fiddle.Config(
    transformer_models.TransformerLm,
    name=name,
    packed_input=True,
    model_dims=model_dim,
    vocab_size=vocab_size,
    position_emb_tpl=None,
    model_type=model_type,
  )
  p.final_ln_tpl = pax_fiddle.Config(normalizations.RmsNorm, name="rms_norm", dim=model_dim)
  p.softmax_tpl = pax_fiddle.Config(
    embedding_softmax.GShardSharedEmbeddingSoftmax,
    name="emb",
    input_dims=model_dim,
    num_classes=vocab_size,
    z_loss_weight=z_loss_weight,
    use_tgt_labels_size_as_loss_denominator=use_tgt_labels_size_as_loss_denominator,
  )
  block = GlamStackedTransformerHParams(
    model_dim=model_dim,
    ff_dim=ff_dim,
    attention_num_heads=attention_num_heads,
    attention_key_value_dim=attention_key_value_dim,
    name="decoder_block",
    moe=moe,
    moe_hidden_dim=moe_hidden_dim,
    ffn_activation_cls=ffn_activation_cls,
    use_gated_activation=use_gated_activation,
    mask_self_attention=True,
    cross_attention=False,
    atten_logit_cap=atten_logit_cap,
    attention_extra_logit=attention_extra_logit,
    relative_attention_num_buckets=relative_attention_num_buckets,
    relative_attention_max_distance=relative_attention_max_distance,
    moe_load_balance_loss_weight=moe_load_balance_loss_weight,
    moe_gating_func=moe_gating_func,
    moe_gating_logit_cap=moe_gating_logit_cap,
    num_groups=num_groups,
    c_dim=c_dim,
    capacity_factor=capacity_factor,
    e_dim=e_dim,
    combine_qkv=combine_qkv,
    bidirectional=bidirectional,
    moe_gating_embedding_level=moe_gating_embedding_level,
  )
  num_blocks = num_transformer_layers // 2 if moe else num_transformer_layers
  if num_pipeline_stages == 1 and repeat:
    p.stacked_transformer_tpl = pax_fiddle.Config(
      transformers.StackedTransformerRepeated,
      name="decoder",
      unroll_in_decode=True,
      block=block,
      x_times=num_blocks,
      checkpoint_policy=checkpoint_policy,
    )
    return p
  # Unrolled or pipelined: every other layer is MoE (when moe), counted per stack / stage.
  if num_pipeline_stages == 1:
    block.num_layers = num_transformer_layers
  else:
    if num_blocks % num_pipeline_stages:
      raise ValueError(
        f"GLaM: {num_blocks} blocks do not split into {num_pipeline_stages} pipeline stages."
      )
    block.num_layers = num_transformer_layers // num_pipeline_stages
  block.moe_layers = list(range(0, block.num_layers, 2))
  if num_pipeline_stages == 1:
    p.stacked_transformer_tpl = block
  else:
    p.stacked_transformer_tpl = pax_fiddle.Config(
      transformers.PipelinedTransformer,
      pipeline_stage=block,
      num_pipeline_stages=num_pipeline_stages,
      num_pipeline_microbatches=num_pipeline_microbatches,
      stream_io=True,
    )
  return p
