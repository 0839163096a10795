"""Pax's config-level sharding of a TransformerLm: `TransformerLm.set_sharding_params_v1` and
`set_custom_sharding_params` write mesh-axis split mappings into the config's templates.

This is Pax's other way to shard (the per-layer `weight_split_dims_mapping` /
`activation_split_dims_mapping` fields); the project's trainer shards through logical axis names
and one rules table (praxis/sharding.py, `pax_v1_rules`, which reproduces the same layout). Both
reach the same weights: a config carrying these mappings shards by them (`MeshWeightBox`).

Names of the mappings (Pax's): w_df the first FFN weight [D, F] (the second is its transpose),
w_dnh the attention projections [D, N, H], w_emh the first expert weight [E, M, H], w_vd the
embedding [V, D]; a_bld, a_blf, a_blnh, a_blv the [B, L, ...] activations, a_bd, a_bf, a_bv their
one-step forms, a_blh the multi-query [B, L, H], a_egch, a_egcm the expert activations.
"""

from __future__ import annotations

from typing import Any

from praxis.layers import embedding_softmax
from praxis.layers import multi_query_attention
from praxis.layers import pipeline
from praxis.layers import position_embeddings
from praxis.layers import stacked_transformers

Config = Any


def _is(cfg: Config, cls: type) -> bool:
  return isinstance(cfg.cls, type) and issubclass(cfg.cls, cls)


def set_embedding_softmax_sharding(
  softmax_p, *, ici_mesh_shape, dcn_mesh_shape, mesh_axis_names, w_vd, a_blv, a_bld, a_bv=None
) -> Config:
  """Shards a softmax / embedding config: the table by w_vd (transposed for the [D, V]
  layouts, which then look up by matmul), logits by a_blv, embeddings by a_bld."""
  softmax_p.ici_mesh_shape = ici_mesh_shape
  softmax_p.dcn_mesh_shape = dcn_mesh_shape
  softmax_p.mesh_axis_names = mesh_axis_names
  cls = softmax_p.cls
  if cls is embedding_softmax.GShardSharedEmbeddingSoftmax:
    softmax_p.weight_split_dims_mapping.wt = w_vd  # [V, D]
  elif _is(softmax_p, embedding_softmax.SharedEmbeddingSoftmax) or cls in (
    embedding_softmax.FullSoftmax,
    embedding_softmax.Embedding,
  ):
    softmax_p.weight_split_dims_mapping.wt = [w_vd[1], w_vd[0]]  # [D, V]
    if cls is not embedding_softmax.FullSoftmax:
      softmax_p.lookup_style = "matmul"
  else:
    raise NotImplementedError(
      f"set_sharding_params: softmax class {cls.__name__} is not one of "
      "GShardSharedEmbeddingSoftmax, SharedEmbeddingSoftmax, FullSoftmax, Embedding."
    )
  ap = softmax_p.activation_split_dims_mapping
  ap.out = a_blv
  if cls is not embedding_softmax.FullSoftmax:
    ap.emb_out_split_dims_mapping = a_bld
    if hasattr(ap, "extend_step_out"):
      ap.extend_step_out = a_bv
  return softmax_p


def _pair(mapping, i, j):
  return None if mapping is None else [mapping[i], mapping[j]]


def set_stacked_transformer_sharding(
  stacked_p,
  *,
  w_df,
  w_dnh,
  w_emh,
  a_bld,
  a_blf,
  a_blnh,
  a_egch,
  a_egcm,
  a_blh=None,
  a_bd=None,
  a_bf=None,
) -> Config:
  """Shards the attention, feed-forward and MoE templates of a (repeated / pipelined) stack."""
  inner = stacked_p
  if _is(inner, pipeline.PipelinedTransformer):
    inner = inner.pipeline_stage
  if _is(inner, stacked_transformers.StackedTransformerRepeated):
    inner = inner.block
  layers = inner.transformer_layer_params_tpl
  for layer_p in layers if isinstance(layers, (list, tuple)) else [layers]:
    for atten_p in (layer_p.tr_atten_tpl, layer_p.cross_atten_tpl):
      if atten_p is None:
        continue
      wp, ap = atten_p.weight_split_dims_mapping, atten_p.activation_split_dims_mapping
      wp.proj = w_dnh
      wp.dconv = [None if w_dnh is None else w_dnh[1], None]  # taps [N, H]
      ap.blnh = a_blnh
      ap.bld = a_bld
      if hasattr(ap, "bd"):
        ap.bd = a_bd
      if _is(atten_p, multi_query_attention.MultiQueryDotProductAttention):
        wp.proj_headless = _pair(w_dnh, 0, 2)
        ap.blh = a_blh if a_blh is not None else [a_blnh[0], a_blnh[1], a_blnh[3]]
    ff_wp = layer_p.tr_fflayer_tpl.weight_split_dims_mapping
    ff_ap = layer_p.tr_fflayer_tpl.activation_split_dims_mapping
    ff_wp.ffn0 = w_df
    ff_wp.ffn1 = _pair(w_df, 1, 0)
    ff_ap.ffn0 = a_blf
    if hasattr(ff_ap, "ffn0_extend_step"):
      ff_ap.ffn0_extend_step = a_bf
    ff_ap.ffn1 = a_bld
    if hasattr(ff_ap, "ffn1_extend_step"):
      ff_ap.ffn1_extend_step = a_bd

  if inner.moe_layer_tpl is not None:
    wp = inner.moe_layer_tpl.weight_split_dims_mapping
    ap = inner.moe_layer_tpl.activation_split_dims_mapping
    wp.me = [None, None]  # the gate is replicated
    wp.emh = w_emh
    e, m, h = w_emh if w_emh is not None else (None, None, None)
    wp.ehm = [e, h, m]
    e_split = None if a_egch is None else a_egch[0]
    ap.gs = [e_split, None]
    ap.gsec = [e_split, None, None, None]  # dispatch and combine
    ap.gecs = [e_split, None, None, None]
    ap.gec = [e_split, None, None]
    ap.egch = a_egch
    e_split, m_split = (None, None) if a_egcm is None else (a_egcm[0], a_egcm[3])
    ap.gsm = [e_split, None, m_split]
    ap.egcm = a_egcm
    ap.gecm = a_egcm
  return stacked_p


def set_custom_sharding_params(
  lm_p,
  *,
  ici_mesh_shape,
  dcn_mesh_shape=None,
  mesh_axis_names,
  w_df=None,
  w_dnh=None,
  w_emh=None,
  w_vd=None,
  a_bld=None,
  a_blf=None,
  a_blh=None,
  a_blnh=None,
  a_blv=None,
  a_egch=None,
  a_egcm=None,
  a_bd=None,
  a_bf=None,
  a_bv=None,
) -> Config:
  """Pax's TransformerLm.set_custom_sharding_params: each mapping (module docstring) into
  every template that holds such a tensor. Returns lm_p, changed in place."""
  if mesh_axis_names is not None and "data_expert" in mesh_axis_names:
    raise NotImplementedError(
      "set_custom_sharding_params: Pax's expert-parallel layout (a 'data_expert' mesh axis) is "
      "not implemented here; use mesh axes replica/data/mdl."
    )
  lm_p.ici_mesh_shape = ici_mesh_shape
  lm_p.dcn_mesh_shape = dcn_mesh_shape
  lm_p.mesh_axis_names = mesh_axis_names
  pos_p = lm_p.position_emb_tpl
  if pos_p is not None and pos_p.cls is position_embeddings.TrainablePositionalEmbedding:
    pos_p.weight_split_dims_mapping.wt = w_df  # the table [L, D] shards as an FFN's [D, F]
    pos_p.activation_split_dims_mapping.emb_out_split_dims_mapping = a_bld
  if lm_p.ngrammer_tpl is not None:
    lm_p.ngrammer_tpl.weight_split_dims_mapping.wt = w_vd
  mesh = dict(
    ici_mesh_shape=ici_mesh_shape, dcn_mesh_shape=dcn_mesh_shape, mesh_axis_names=mesh_axis_names
  )
  lm_p.softmax_tpl = set_embedding_softmax_sharding(
    lm_p.softmax_tpl, w_vd=w_vd, a_blv=a_blv, a_bld=a_bld, a_bv=a_bv, **mesh
  )
  stack = dict(
    w_df=w_df,
    w_dnh=w_dnh,
    w_emh=w_emh,
    a_bld=a_bld,
    a_blf=a_blf,
    a_blh=a_blh,
    a_blnh=a_blnh,
    a_bd=a_bd,
    a_bf=a_bf,
    a_egch=a_egch,
    a_egcm=a_egcm,
  )
  lm_p.stacked_transformer_tpl = set_stacked_transformer_sharding(
    lm_p.stacked_transformer_tpl, **stack
  )
  if getattr(lm_p, "separate_embedding_tpl", None) is not None:
    lm_p.separate_embedding_tpl = set_embedding_softmax_sharding(
      lm_p.separate_embedding_tpl, w_vd=w_vd, a_blv=a_blv, a_bld=a_bld, a_bv=a_bv, **mesh
    )
  return lm_p


def set_sharding_params_v1(
  lm_p,
  *,
  replica_axis,
  data_axis,
  mdl_axis,
  ici_mesh_shape,
  dcn_mesh_shape=None,
  batch_axes=None,
  mesh_axis_names,
  seq_axis=None,
  training_optimized,
) -> Config:
  """Pax's canonical layout: weights on the [data, mdl] 2-D mesh (replicated over replica),
  activations' batch over batch_axes (default (replica, data)); training_optimized also splits
  activations' model dim over mdl (less activation memory between forward and backward)."""
  if batch_axes is None:
    batch_axes = (replica_axis, data_axis)
  w_data = data_axis if seq_axis is None else (data_axis, seq_axis)
  if training_optimized:
    a_bld = [batch_axes, seq_axis, mdl_axis]
    a_egcm = [data_axis, None, None, mdl_axis]
  else:
    a_bld = [batch_axes, None, None]
    a_egcm = [batch_axes, None, None, None]
  return set_custom_sharding_params(
    lm_p,
    ici_mesh_shape=ici_mesh_shape,
    dcn_mesh_shape=dcn_mesh_shape,
    mesh_axis_names=mesh_axis_names,
    w_df=[w_data, mdl_axis],
    w_dnh=[w_data, mdl_axis, None],
    w_emh=[data_axis, None, mdl_axis],
    w_vd=[mdl_axis, w_data],
    a_bld=a_bld,
    a_blf=[batch_axes, seq_axis, mdl_axis],
    a_blnh=[batch_axes, seq_axis, mdl_axis, None],
    a_blv=[batch_axes, seq_axis, mdl_axis],
    a_egch=[data_axis, None, None, mdl_axis],
    a_egcm=a_egcm,
  )
