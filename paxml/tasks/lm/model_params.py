"""Pax's `paxml.tasks.lm.model_params`: the LM base experiments and the helpers they call.

The classes and functions carry Pax's names, fields, defaults and call shapes, so Pax's
experiment files (lm_cloud.py, c4.py, c4_multislice.py) import and build against them:

  TransformerLmSpmdAdafactor     SPMD decoder-only LM (LanguageModel -> TransformerLm ->
                                 StackedTransformer[Repeated]), ShardedAdafactor
  TransformerLmSpmdPipelineAdafactor   the same with the stack pipelined over a `stage` axis
  TransformerLmPmapAdam          Pax's data-parallel LM with Adam
  TransformerLmSpmdAdam, TransformerLmSpmdPipelineAdam   c4's Adam bases (c4.py re-exports them)
  set_default_adam, set_default_adafactor, set_adam_and_learning_rate_schedule
  set_sharding_annotations_v1    the mesh on the model config, batch split over replica x data
  maybe_setup_moe_params         Pax's MoE switch (dense models only here)

Each `task()` returns `pax_fiddle.Config(tasks_lib.SingleTask)`; a subclass edits it
(`task_p = super().task(); task_p.train.num_train_steps = 300`). Sharding: Pax's
`set_sharding_params_v1` annotates each layer; here the model gets the mesh and its axis names,
and `praxis.sharding`'s rules table (the same placements, per logical axis) shards the weights.

The helpers live in lm_settings.py, `small_language_model` and `ProgressionLm` (the demo and
test LMs) in progression_lm.py; this module re-exports them under the names Pax and the tests
import.
"""

from __future__ import annotations

import math
import typing
from typing import Any

import fiddle as fdl
from jax import numpy as jnp

from paxml import base_experiment
from paxml import tasks_lib
from paxml.tasks.lm import lm_settings
from paxml.tasks.lm import progression_lm
from praxis import base_layer
from praxis import layers
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import models

NestedMap = pytypes.NestedMap
WeightInit = base_layer.WeightInit

# The demo and test LMs, under the names other modules import.
small_language_model = progression_lm.small_language_model
ProgressionLm = progression_lm.ProgressionLm

# Pax's helpers, under Pax's names (lm_settings.py).
num_heads = lm_settings.num_heads
dims_per_head = lm_settings.dims_per_head
set_sharding_annotations_v1 = lm_settings.set_sharding_annotations_v1
set_default_adam = lm_settings.set_default_adam
set_default_adafactor = lm_settings.set_default_adafactor
set_adam_and_learning_rate_schedule = lm_settings.set_adam_and_learning_rate_schedule
maybe_setup_moe_params = lm_settings.maybe_setup_moe_params


def _refuse(exp: Any, *fields: str) -> None:
  for field in fields:
    if getattr(exp, field, False):
      raise NotImplementedError(
        f"{type(exp).__name__}.{field}=True needs a GPU-specific layer that is not provided "
        "here; set it to False"
      )


def _stack(exp: Any, num_layers: int, heads: int) -> pax_fiddle.Config:
  """The StackedTransformer template of Pax's TransformerLmSpmdAdafactor (one stage's worth)."""
  stack = pax_fiddle.Config(layers.StackedTransformer)
  stack.model_dims = exp.MODEL_DIMS
  stack.hidden_dims = exp.HIDDEN_DIMS
  stack.num_layers = num_layers
  stack.num_heads = heads
  stack.dim_per_head = exp.DIMS_PER_HEAD
  stack.dropout_prob = exp.DROPOUT_PROB
  layer = typing.cast(Any, stack.transformer_layer_params_tpl)
  layer.tr_atten_tpl.atten_logit_cap = exp.ATTEN_LOGIT_CAP
  layer.norm_policy = exp.NORM_POLICY
  layer.tr_atten_tpl.use_bias = False
  layer.tr_atten_tpl.combine_qkv = exp.COMBINE_QKV
  layer.tr_fflayer_tpl.activation_tpl = pax_fiddle.Config(exp.ACTIVATION_CLS)
  layer.tr_fflayer_tpl.use_gated_activation = exp.USE_GATED_ACTIVATION
  layer.tr_atten_tpl.dconv_qkv = exp.ENABLE_DCONV
  if exp.RELATIVE_BIAS and exp.USE_ROTARY_POSITION_EMB:
    raise ValueError(
      f"{type(exp).__name__}: set at most one of RELATIVE_BIAS, USE_ROTARY_POSITION_EMB"
    )
  if exp.RELATIVE_BIAS:
    layer.tr_atten_tpl.relative_bias_tpl = pax_fiddle.Config(layers.RelativeBias)
  if exp.USE_ROTARY_POSITION_EMB:
    layer.tr_atten_tpl.use_rotary_position_emb = True
  return stack


def _maybe_repeated(exp: Any, stack: pax_fiddle.Config, times: int) -> pax_fiddle.Config:
  """`stack` of `times` layers as is, or with USE_REPEATED_LAYER one compiled layer scanned
  `times` times under CHECKPOINT_POLICY remat (weights get a leading [layers] dim)."""
  if not exp.USE_REPEATED_LAYER:
    return stack
  stack.num_layers = 1
  return pax_fiddle.Config(
    layers.StackedTransformerRepeated,
    block=stack,
    x_times=times,
    checkpoint_policy=exp.CHECKPOINT_POLICY,
  )


def _lm_task(exp: Any, packed_input: bool) -> pax_fiddle.Config:
  """SingleTask with Pax's LM embedding/softmax set-up (shared by the SPMD bases)."""
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name="xformer_task")
  task_p.model = pax_fiddle.Config(exp.MODEL_CLASS, name="xformer_lm")
  model_p = task_p.model
  model_p.lm_tpl.packed_input = packed_input
  model_p.lm_tpl.model_dims = exp.MODEL_DIMS
  model_p.lm_tpl.vocab_size = exp.VOCAB_SIZE
  if exp.SEPARATE_EMBEDDING:
    model_p.lm_tpl.separate_embedding_tpl = pax_fiddle.Config(layers.Embedding)
    model_p.lm_tpl.softmax_tpl = pax_fiddle.Config(layers.FullSoftmax)
  # N(0, 1/D): looked up and scaled by sqrt(D), the embeddings start with unit variance.
  model_p.lm_tpl.softmax_tpl.params_init = WeightInit.Gaussian(1.0 / math.sqrt(exp.MODEL_DIMS))
  if exp.SEPARATE_EMBEDDING:
    model_p.lm_tpl.separate_embedding_tpl.scale_sqrt_depth = True
  else:
    model_p.lm_tpl.softmax_tpl.scale_sqrt_depth = True
  model_p.lm_tpl.softmax_tpl.soft_cap_logits = exp.SOFTMAX_CAP_LOGITS
  if exp.TRAINABLE_POSITION_EMB:
    model_p.lm_tpl.position_emb_tpl = pax_fiddle.Config(
      layers.TrainablePositionalEmbedding, max_seq_length=exp.TRAINABLE_PE_MAX_SEQ_LEN
    )
  return task_p


def _loop_fields(exp: Any, task_p: pax_fiddle.Config) -> None:
  task_p.train.save_interval_steps = exp.CHECKPOINT_EVERY_N_STEPS
  task_p.train.summary_interval_steps = exp.SUMMARY_INTERVAL_STEPS
  task_p.train.save_max_to_keep = exp.CHECKPOINT_MAX_TO_KEEP
  task_p.train.eval_interval_steps = exp.EVAL_INTERVAL_STEPS
  task_p.train.profiler_num_steps = exp.PROFILER_NUM_STEPS
  task_p.train.profiler_min_duration_sec = exp.PROFILER_MIN_DURATION_SEC
  task_p.train.profiler_capture_step = exp.PROFILER_CAPTURE_STEP


class TransformerLmSpmdAdafactor(base_experiment.BaseExperiment):
  """Pax's base SPMD Transformer LM with ShardedAdafactor (fields and defaults are Pax's)."""

  NUM_LAYERS = 10
  VOCAB_SIZE = 32000
  DIMS_PER_HEAD = 128
  NUM_HEADS = None
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  FPROP_DTYPE = jnp.bfloat16
  PACKED_INPUT = True

  USE_REPEATED_LAYER = False
  SEPARATE_EMBEDDING = False
  TRAINABLE_POSITION_EMB = False
  TRAINABLE_PE_MAX_SEQ_LEN = 16 * 1024
  RELATIVE_BIAS = False
  USE_ROTARY_POSITION_EMB = False
  NORM_POLICY = "pre"
  ENABLE_DCONV = False
  COMBINE_QKV = True
  ACTIVATION_CLS = activations.ReLU
  USE_GATED_ACTIVATION = False
  DECAY_END = 100000
  USE_FP8 = False
  USE_EXPERT_PARALLEL = False
  USE_CUDNN_FLASH_ATTENTION = False

  DROPOUT_PROB = 0.0
  LEARNING_RATE = 2.5e-4
  CLIP_GRADIENT_NORM_TO_VALUE = 5.0
  WEIGHT_DECAY = 1e-3
  SOFTMAX_CAP_LOGITS = 30.0
  ATTEN_LOGIT_CAP = 50.0
  CHECKPOINT_POLICY = layers.AutodiffCheckpointType.SAVE_NOTHING

  CHECKPOINT_EVERY_N_STEPS = 5000
  SUMMARY_INTERVAL_STEPS = 100
  CHECKPOINT_MAX_TO_KEEP = 10
  EVAL_INTERVAL_STEPS = 100

  PROFILER_NUM_STEPS = 2
  PROFILER_MIN_DURATION_SEC = 1
  PROFILER_CAPTURE_STEP = None

  ICI_MESH_SHAPE = None
  DCN_MESH_SHAPE = [1, 1, 1]
  TRAINING_OPTIMIZED_SHARDING = True

  MODEL_CLASS = models.LanguageModel

  def _set_adafactor(self, task_p: pax_fiddle.Config) -> None:
    set_default_adafactor(
      task_p,
      self.LEARNING_RATE,
      self.WEIGHT_DECAY,
      decay_end=self.DECAY_END,
      clip_gradient_norm_to_value=self.CLIP_GRADIENT_NORM_TO_VALUE,
    )

  def task(self) -> pax_fiddle.Config:
    """Returns the task config."""
    _refuse(self, "USE_FP8", "USE_EXPERT_PARALLEL", "USE_CUDNN_FLASH_ATTENTION")
    task_p = _lm_task(self, self.PACKED_INPUT)
    model_p = task_p.model
    model_p.lm_tpl.stacked_transformer_tpl = _maybe_repeated(
      self, _stack(self, self.NUM_LAYERS, num_heads(self)), self.NUM_LAYERS
    )
    model_p.fprop_dtype = self.FPROP_DTYPE
    self._set_adafactor(task_p)
    _loop_fields(self, task_p)
    if self.ICI_MESH_SHAPE is not None:
      set_sharding_annotations_v1(
        task_p, self.TRAINING_OPTIMIZED_SHARDING, self.ICI_MESH_SHAPE, self.DCN_MESH_SHAPE
      )
    maybe_setup_moe_params(model_p.lm_tpl.stacked_transformer_tpl)
    return task_p


class TransformerLmSpmdPipelineAdafactor(TransformerLmSpmdAdafactor):
  """Pax's pipelined SPMD Transformer LM: NUM_LAYERS in NUM_STAGES stages (x CIRCULAR_REPEAT)
  on a [stage, replica, data, mdl] mesh; set NUM_MICROBATCHES or MICROBATCH_SIZE."""

  USE_REPEATED_LAYER = False  # The pipeline already loops over stages.
  NUM_STAGES = None
  CIRCULAR_REPEAT = 1
  PIPELINE_BROADCAST_INPUTS = False
  NUM_MICROBATCHES = None
  MICROBATCH_SIZE = None
  ICI_MESH_SHAPE = None
  DCN_MESH_SHAPE = [1, 1, 1, 1]
  # Pax places the embedding's `data` dim on these axes; the rules table decides here.
  EMB_W_DATA_DIMS = "data"
  STREAM_IO = False

  def _check_pipeline(self) -> None:
    name = type(self).__name__
    if not self.NUM_STAGES or self.NUM_LAYERS % (self.NUM_STAGES * self.CIRCULAR_REPEAT):
      raise ValueError(
        f"{name}: NUM_LAYERS={self.NUM_LAYERS} must split into NUM_STAGES={self.NUM_STAGES} x "
        f"CIRCULAR_REPEAT={self.CIRCULAR_REPEAT} equal stages"
      )
    if self.NUM_MICROBATCHES is None and self.MICROBATCH_SIZE is None:
      raise ValueError(f"{name}: set NUM_MICROBATCHES or MICROBATCH_SIZE")
    ici, dcn = self.ICI_MESH_SHAPE, self.DCN_MESH_SHAPE
    if ici is None or len(ici) != 4 or dcn is None or len(dcn) != 4:
      raise ValueError(
        f"{name}: a pipelined experiment needs 4-entry ICI_MESH_SHAPE and DCN_MESH_SHAPE "
        f"[stage, replica, data, mdl]; got {ici} and {dcn}"
      )
    if ici[0] * dcn[0] != self.NUM_STAGES:
      raise ValueError(
        f"{name}: the stage sizes ICI_MESH_SHAPE[0] x DCN_MESH_SHAPE[0] = {ici[0]} x {dcn[0]} "
        f"must equal NUM_STAGES={self.NUM_STAGES}"
      )

  def task(self) -> pax_fiddle.Config:
    """Returns the task config."""
    _refuse(self, "USE_EXPERT_PARALLEL")
    self._check_pipeline()
    task_p = _lm_task(self, True)
    model_p = task_p.model
    per_stage = self.NUM_LAYERS // (self.NUM_STAGES * self.CIRCULAR_REPEAT)
    stage = _maybe_repeated(self, _stack(self, per_stage, num_heads(self)), per_stage)
    model_p.lm_tpl.stacked_transformer_tpl = pax_fiddle.Config(
      layers.PipelinedTransformer,
      pipeline_stage=stage,
      num_pipeline_stages=self.NUM_STAGES,
      circular_repeat=self.CIRCULAR_REPEAT,
      num_pipeline_microbatches=self.NUM_MICROBATCHES,
      pipeline_microbatch_size=self.MICROBATCH_SIZE,
      stream_io=self.STREAM_IO,
      checkpoint_policy=self.CHECKPOINT_POLICY,
      pipeline_broadcast_inputs=self.PIPELINE_BROADCAST_INPUTS,
    )
    model_p.fprop_dtype = self.FPROP_DTYPE
    self._set_adafactor(task_p)
    _loop_fields(self, task_p)
    maybe_setup_moe_params(model_p.lm_tpl.stacked_transformer_tpl.pipeline_stage)
    # The mesh [stage, replica, data, mdl]; its axis names are the partitioner's (see
    # set_sharding_annotations_v1 for why mesh_axis_names stays None).
    model_p.ici_mesh_shape = self.ICI_MESH_SHAPE
    model_p.dcn_mesh_shape = self.DCN_MESH_SHAPE
    # The batch over every axis but mdl, so the embedding and softmax (outside the pipeline)
    # run data parallel across all devices, as in Pax.
    batch_dims = ("stage", "replica", "data")
    task_p.train.inputs_split_mapping = NestedMap(map_1d=(batch_dims,), map_2d=(batch_dims, None))
    return task_p


class TransformerLmPmapAdam(base_experiment.BaseExperiment):
  """Pax's data-parallel Transformer LM with Adam (no mesh: every device on `data`)."""

  NUM_LAYERS = 32
  VOCAB_SIZE = 32000
  NUM_HEADS = 16
  MODEL_DIMS = 1024
  HIDDEN_DIMS = MODEL_DIMS * 4
  INPUT_DROPOUT_PROB = 0.0
  DROPOUT_PROB = 0.0
  LEARNING_RATE = 1e-3
  WEIGHT_DECAY = 1e-3
  USE_REPEATED_LAYER = False
  ACTIVATION_CLS = activations.ReLU
  USE_GATED_ACTIVATION = False
  DECAY_END = 300000
  REL_POS_EMB_DIM = None
  PACKED_INPUT = True
  ATTEN_LOGIT_CAP = 50.0
  USE_BIAS = False

  def task(self) -> pax_fiddle.Config:
    """Returns the task config."""
    task_p = pax_fiddle.Config(tasks_lib.SingleTask, name="xformer_task")
    task_p.model = pax_fiddle.Config(models.LanguageModel, name="xformer_lm")
    model_p = task_p.model
    model_p.lm_tpl.packed_input = self.PACKED_INPUT
    model_p.lm_tpl.model_dims = self.MODEL_DIMS
    model_p.lm_tpl.vocab_size = self.VOCAB_SIZE
    model_p.lm_tpl.softmax_tpl.scale_sqrt_depth = True
    stack = pax_fiddle.Config(layers.StackedTransformer)
    stack.model_dims = self.MODEL_DIMS
    stack.hidden_dims = self.HIDDEN_DIMS
    stack.num_layers = self.NUM_LAYERS
    stack.num_heads = self.NUM_HEADS
    stack.input_dropout_prob = self.INPUT_DROPOUT_PROB
    stack.dropout_prob = self.DROPOUT_PROB
    layer = stack.transformer_layer_params_tpl
    layer.tr_atten_tpl.atten_logit_cap = self.ATTEN_LOGIT_CAP
    layer.tr_atten_tpl.use_bias = self.USE_BIAS
    layer.tr_fflayer_tpl.activation_tpl = pax_fiddle.Config(self.ACTIVATION_CLS)
    layer.tr_fflayer_tpl.use_gated_activation = self.USE_GATED_ACTIVATION
    if self.REL_POS_EMB_DIM is not None:
      atten_xl = pax_fiddle.Config(layers.DotProductAttentionXL)
      atten_xl.copy_fields_from(layer.tr_atten_tpl)
      atten_xl.set(rel_pos_emb_dim=self.REL_POS_EMB_DIM)
      layer.tr_atten_tpl = atten_xl
    if self.USE_REPEATED_LAYER:
      stack.num_layers = 1
      model_p.lm_tpl.stacked_transformer_tpl = pax_fiddle.Config(
        layers.StackedTransformerRepeated, block=stack, x_times=self.NUM_LAYERS
      )
    else:
      model_p.lm_tpl.stacked_transformer_tpl = stack
    model_p.lm_tpl.softmax_tpl.params_init = WeightInit.Gaussian(1.0 / math.sqrt(self.MODEL_DIMS))
    maybe_setup_moe_params(model_p.lm_tpl.stacked_transformer_tpl)
    set_default_adam(task_p, self.LEARNING_RATE, self.WEIGHT_DECAY, decay_end=self.DECAY_END)
    return task_p


class _C4AdamFields:
  """c4's Adam fields (a mixin of TransformerLmSpmdAdam and TransformerLmSpmdPipelineAdam)."""

  NUM_LAYERS = 32
  NUM_HEADS = 16
  MODEL_DIMS = 1024
  HIDDEN_DIMS = MODEL_DIMS * 4
  FPROP_DTYPE = jnp.float32
  PACKED_INPUT = True
  USE_BIAS = False
  EMBEDDING_LOOKUP_STYLE = "matmul"

  LEARNING_RATE = 1e-3
  ADAM_BETA1 = 0.9
  ADAM_BETA2 = 0.99
  ADAM_CLIP_THRESHOLD = 1.0
  ADAM_EPSILON = 1e-6
  ADAM_EPSILON_ROOT = 0.0

  LR_SCHEDULE = "linear_rampup_exponential_decay"
  LR_LRED_WARMUP = 4000
  LR_LRED_DECAY_START = 4001
  LR_LRED_DECAY_END = 300000
  LR_LRED_MIN_RATIO = 0.1
  LR_LRED_MAX = 1.0

  LR_COS_MIN_RATIO = 0.1
  LR_COS_MAX = 1.0
  LR_COS_WARMUP = 4000
  LR_COS_DECAY_START = 4001
  LR_COS_DECAY_END = 300000

  def task(self) -> pax_fiddle.Config:
    """The base's task with PACKED_INPUT, USE_BIAS on attention and c4's Adam."""
    task_p = super().task()  # pytype: disable=attribute-error
    model_p = task_p.model
    model_p.lm_tpl.packed_input = self.PACKED_INPUT
    stack = model_p.lm_tpl.stacked_transformer_tpl
    if fdl.get_callable(stack) is layers.PipelinedTransformer:
      stack = stack.pipeline_stage
    if self.USE_REPEATED_LAYER:
      stack = stack.block
    stack.transformer_layer_params_tpl.tr_atten_tpl.use_bias = self.USE_BIAS
    return set_adam_and_learning_rate_schedule(cls=self, task_p=task_p)


class TransformerLmSpmdAdam(_C4AdamFields, TransformerLmSpmdAdafactor):
  """Pax's c4 `TransformerLmSpmdAdam`: TransformerLmSpmdAdafactor with c4's Adam (32 x 1024,
  float32, learning rate 1e-3)."""


class TransformerLmSpmdPipelineAdam(_C4AdamFields, TransformerLmSpmdPipelineAdafactor):
  """Pax's c4 `TransformerLmSpmdPipelineAdam`: the pipelined base with c4's Adam."""


class ClassificationModelAdam(base_experiment.BaseExperiment):
  """Pax's MLP experiment base (lm_cloud's LargeMlp / SmallMlp): ClassificationMLPModel with
  Adam for NUM_TRAIN_STEPS, on a MESH_SHAPE mesh when set."""

  NUM_LAYER = 8
  INPUT_DIM = 4096
  HIDDEN_DIM = 7168
  OUTPUT_DIM = 4096
  LEARNING_RATE = 1e-3
  WEIGHT_DECAY = 1e-3
  CHECKPOINT_EVERY_N_STEPS = 5
  SUMMARY_INTERVAL_STEPS = 5
  NUM_TRAIN_STEPS = 10
  MLP_WEIGHT_SHARDING = None
  SOFTMAX_WEIGHT_SHARDING = None
  MESH_SHAPE = None
  TRAINING_OPTIMIZED_SHARDING = True

  def task(self) -> pax_fiddle.Config:
    task_p = pax_fiddle.Config(tasks_lib.SingleTask, name="classification_task")
    task_p.model = pax_fiddle.Config(models.ClassificationMLPModel, name="classification_model")
    model_p = task_p.model
    model_p.mlp_tpl.ff_tpl.input_dims = self.INPUT_DIM
    model_p.mlp_tpl.ff_tpl.output_dims = self.OUTPUT_DIM
    model_p.mlp_tpl.hidden_dims = self.HIDDEN_DIM
    model_p.mlp_tpl.num_layers = self.NUM_LAYER
    model_p.softmax_tpl.input_dims = self.INPUT_DIM
    model_p.softmax_tpl.num_classes = self.INPUT_DIM
    task_p.train.save_interval_steps = self.CHECKPOINT_EVERY_N_STEPS
    task_p.train.summary_interval_steps = self.SUMMARY_INTERVAL_STEPS
    # Pax's per-weight placements (wt = [-1, -1]: replicated) are the rules table's here.
    set_sharding_annotations_v1(task_p, self.TRAINING_OPTIMIZED_SHARDING, self.MESH_SHAPE)
    set_default_adam(task_p, self.LEARNING_RATE, self.WEIGHT_DECAY)
    task_p.train.num_train_steps = self.NUM_TRAIN_STEPS
    return task_p
