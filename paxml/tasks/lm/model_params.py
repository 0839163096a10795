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

`small_language_model` and `ProgressionLm` (the demo and test LMs) live in progression_lm.py.
"""

from __future__ import annotations

import math
import typing
from typing import Any, Sequence

import fiddle as fdl
import jax
from jax import numpy as jnp

from paxml import base_experiment
from paxml import tasks_lib
from paxml.tasks.lm import progression_lm
from praxis import base_layer
from praxis import layers
from praxis import optimizers
from praxis import pax_fiddle
from praxis import pytypes
from praxis import schedules
from praxis.layers import activations
from praxis.layers import classification_mlp
from praxis.layers import models

NestedMap = pytypes.NestedMap
WeightInit = base_layer.WeightInit

# The demo and test LMs, under the names other modules import.
small_language_model = progression_lm.small_language_model
ProgressionLm = progression_lm.ProgressionLm


def num_heads(exp: Any) -> int:
  """N as Pax derives it: NUM_HEADS if set (then N * DIMS_PER_HEAD must be MODEL_DIMS), else
  MODEL_DIMS / DIMS_PER_HEAD."""
  name = type(exp).__name__
  if exp.DIMS_PER_HEAD is None:
    if exp.NUM_HEADS is None:
      raise ValueError(f"{name}: set NUM_HEADS or DIMS_PER_HEAD")
    return exp.NUM_HEADS
  if exp.NUM_HEADS is None:
    if exp.MODEL_DIMS % exp.DIMS_PER_HEAD:
      raise ValueError(
        f"{name}: DIMS_PER_HEAD={exp.DIMS_PER_HEAD} does not divide MODEL_DIMS="
        f"{exp.MODEL_DIMS}; change one of them"
      )
    return exp.MODEL_DIMS // exp.DIMS_PER_HEAD
  if exp.NUM_HEADS * exp.DIMS_PER_HEAD != exp.MODEL_DIMS:
    raise ValueError(
      f"{name}: NUM_HEADS * DIMS_PER_HEAD = {exp.NUM_HEADS} * {exp.DIMS_PER_HEAD} must equal "
      f"MODEL_DIMS={exp.MODEL_DIMS}"
    )
  return exp.NUM_HEADS


def dims_per_head(exp: Any) -> int:
  """H: DIMS_PER_HEAD, or MODEL_DIMS / heads when it is None."""
  return exp.DIMS_PER_HEAD or exp.MODEL_DIMS // num_heads(exp)


def set_sharding_annotations_v1(
  task_p: pax_fiddle.Config,
  training_optimized: bool,
  ici_mesh_shape: Sequence[int],
  dcn_mesh_shape: Sequence[int] | None = None,
) -> None:
  """Pax's: the mesh (replica, data, mdl) on the model config, the batch over replica x data.

  The per-layer placements of Pax's `TransformerLm.set_sharding_params_v1` are the rules table
  of praxis/sharding.py here (the same placements, per logical axis), and the mesh's axis
  names are the partitioner's: so, unlike Pax, `model_p.mesh_axis_names` stays None (set, it
  would switch the layers to per-layer split-dims annotations, which leave unannotated weights
  replicated). An LM class that has `set_sharding_params_v1` gets it called as in Pax.
  `training_optimized` is Pax's activation-sharding variant (not used by the table).
  """
  model_p = task_p.model
  model_p.ici_mesh_shape = ici_mesh_shape
  if dcn_mesh_shape is not None:
    model_p.dcn_mesh_shape = dcn_mesh_shape
  mesh_axis_names = ["replica", "data", "mdl"]
  task_p.train.inputs_split_mapping = NestedMap(
    map_1d=(("replica", "data"),), map_2d=(("replica", "data"), None)
  )
  lm_p = getattr(model_p, "lm_tpl", None)
  setter = getattr(pax_fiddle.get_callable(lm_p), "set_sharding_params_v1", None) if lm_p else None
  if setter is not None:
    model_p.lm_tpl = setter(
      lm_p,
      replica_axis="replica",
      data_axis="data",
      mdl_axis="mdl",
      ici_mesh_shape=model_p.ici_mesh_shape,
      dcn_mesh_shape=model_p.dcn_mesh_shape,
      mesh_axis_names=mesh_axis_names,
      training_optimized=training_optimized,
    )


def _lr_schedule(warmup_steps: int, decay_start: int, decay_end: int) -> pax_fiddle.Config:
  return pax_fiddle.Config(
    schedules.LinearRampupExponentialDecay,
    warmup_steps=warmup_steps,
    decay_start=decay_start,
    decay_end=decay_end,
    min_ratio=0.1,
    max=1.0,
  )


def set_default_adam(
  task_p: pax_fiddle.Config,
  learning_rate: float,
  weight_decay: float,
  *,
  warmup_steps: int = 4000,
  decay_start: int = 4001,
  decay_end: int = 300000,
) -> None:
  """Pax's: Adam(0.9, 0.99), decoupled weight decay, global-norm clipping at 5, linear warm-up
  then exponential decay to 0.1x."""
  lp = task_p.train.learner
  lp.loss_name = "total_loss"
  lp.optimizer = pax_fiddle.Config(
    optimizers.Adam,
    beta1=0.9,
    beta2=0.99,
    weight_decay=weight_decay,
    clip_gradient_norm_to_value=5.0,
    learning_rate=learning_rate,
    lr_schedule=_lr_schedule(warmup_steps, decay_start, decay_end),
  )


def set_default_adafactor(
  task_p: pax_fiddle.Config,
  learning_rate: float,
  weight_decay: float,
  *,
  warmup_steps: int = 4000,
  decay_start: int = 4001,
  decay_end: int = 100000,
  clip_gradient_norm_to_value: float = 5.0,
) -> None:
  """Pax's: ShardedAdafactor with Adam-style decay (0.99) and momentum 0.9."""
  lp = task_p.train.learner
  lp.loss_name = "total_loss"
  lp.optimizer = pax_fiddle.Config(
    optimizers.ShardedAdafactor,
    decay_method="adam",
    beta1=0.9,
    decay_adam=0.99,
    weight_decay=weight_decay,
    clip_gradient_norm_to_value=clip_gradient_norm_to_value,
    learning_rate=learning_rate,
    lr_schedule=_lr_schedule(warmup_steps, decay_start, decay_end),
  )


def maybe_setup_moe_params(model_p: pax_fiddle.Config) -> None:
  """Pax's MoE switch: a stack with num_experts > 0 would get MoE feed-forward layers.

  The stacks here are dense (no `num_experts`), so this does nothing for them and refuses a
  stack that asks for experts."""
  if fdl.get_callable(model_p) is layers.StackedTransformerRepeated:
    model_p = model_p.block
  if getattr(model_p, "num_experts", 0):
    raise NotImplementedError(
      "maybe_setup_moe_params: mixture-of-experts stacks (num_experts > 0) are not provided"
    )


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

  def task(self) -> pax_fiddle.Config:
    """Returns the task config."""
    _refuse(self, "USE_FP8", "USE_EXPERT_PARALLEL", "USE_CUDNN_FLASH_ATTENTION")
    task_p = _lm_task(self, self.PACKED_INPUT)
    model_p = task_p.model
    stack = _stack(self, self.NUM_LAYERS, num_heads(self))
    if self.USE_REPEATED_LAYER:
      # One compiled layer scanned NUM_LAYERS times; weights get a leading [layers] dim.
      stack.num_layers = 1
      model_p.lm_tpl.stacked_transformer_tpl = pax_fiddle.Config(
        layers.StackedTransformerRepeated,
        block=stack,
        x_times=self.NUM_LAYERS,
        checkpoint_policy=self.CHECKPOINT_POLICY,
      )
    else:
      model_p.lm_tpl.stacked_transformer_tpl = stack
    model_p.fprop_dtype = self.FPROP_DTYPE
    set_default_adafactor(
      task_p,
      self.LEARNING_RATE,
      self.WEIGHT_DECAY,
      decay_end=self.DECAY_END,
      clip_gradient_norm_to_value=self.CLIP_GRADIENT_NORM_TO_VALUE,
    )
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
    stage = _stack(self, per_stage, num_heads(self))
    if self.USE_REPEATED_LAYER:
      stage.num_layers = 1
      stage = pax_fiddle.Config(
        layers.StackedTransformerRepeated,
        block=stage,
        x_times=per_stage,
        checkpoint_policy=self.CHECKPOINT_POLICY,
      )
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
    set_default_adafactor(
      task_p,
      self.LEARNING_RATE,
      self.WEIGHT_DECAY,
      decay_end=self.DECAY_END,
      clip_gradient_norm_to_value=self.CLIP_GRADIENT_NORM_TO_VALUE,
    )
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


def set_adam_and_learning_rate_schedule(cls: Any, task_p: pax_fiddle.Config) -> pax_fiddle.Config:
  """Pax's c4 helper: Adam from the ADAM_* fields (falsy -> Pax's defaults) and the LR_SCHEDULE
  ('linear_rampup_exponential_decay', 'linear_rampup_cosine_decay' or 'constant'); a None
  LEARNING_RATE or LR_COS_* is derived from the global batch (PERCORE_BATCH_SIZE x devices) by
  Pax's GPT-3 formulas."""
  lp = task_p.train.learner
  lp.loss_name = "total_loss"
  lp.optimizer = pax_fiddle.Config(
    optimizers.Adam,
    beta1=cls.ADAM_BETA1 or 0.9,
    beta2=cls.ADAM_BETA2 or 0.999,
    weight_decay=cls.WEIGHT_DECAY or 0.0,
    epsilon=cls.ADAM_EPSILON or 1e-6,
    epsilon_root=cls.ADAM_EPSILON_ROOT or 0.0,
    clip_gradient_norm_to_value=cls.CLIP_GRADIENT_NORM_TO_VALUE or 5.0,
    clip_threshold=cls.ADAM_CLIP_THRESHOLD or 1.0,
  )
  global_batch_size = None
  if hasattr(cls, "PERCORE_BATCH_SIZE"):
    global_batch_size = int(cls.PERCORE_BATCH_SIZE * jax.device_count() + 1e-6)
    if global_batch_size > 8192:
      raise ValueError(
        f"{type(cls).__name__}: global batch {global_batch_size} exceeds Pax's limit of 8192"
      )

  def derived(what: str) -> int:
    if not global_batch_size:
      raise ValueError(
        f"{type(cls).__name__}: {what} is None and no global batch to derive it from; set it"
      )
    return global_batch_size

  if cls.LEARNING_RATE is not None:
    lp.optimizer.learning_rate = cls.LEARNING_RATE
  else:
    lp.optimizer.learning_rate = 2e-5 if derived("LEARNING_RATE") <= 3584 else 3e-5

  if cls.LR_SCHEDULE == "linear_rampup_exponential_decay":
    lp.optimizer.lr_schedule = pax_fiddle.Config(
      schedules.LinearRampupExponentialDecay,
      warmup_steps=cls.LR_LRED_WARMUP,
      decay_start=cls.LR_LRED_DECAY_START,
      decay_end=cls.LR_LRED_DECAY_END,
      min_ratio=cls.LR_LRED_MIN_RATIO,
      max=cls.LR_LRED_MAX,
    )
  elif cls.LR_SCHEDULE == "linear_rampup_cosine_decay":
    # Pax's GPT-3 numbers are in steps at a 1536-sequence batch.
    warmup = cls.LR_COS_WARMUP
    if warmup is None:
      warmup = math.ceil(265.0 * 1536 / derived("LR_COS_WARMUP") - 1e-6)
    decay_start = cls.LR_COS_DECAY_START if cls.LR_COS_DECAY_START is not None else warmup + 1
    decay_end = cls.LR_COS_DECAY_END
    if decay_end is None:
      decay_end = math.ceil(108600.0 * 1536 / derived("LR_COS_DECAY_END") - 1e-6)
    lp.optimizer.lr_schedule = pax_fiddle.Config(
      schedules.LinearRampupCosineDecay,
      warmup_steps=warmup,
      decay_start=decay_start,
      decay_end=decay_end,
      min_ratio=cls.LR_COS_MIN_RATIO,
      max=cls.LR_COS_MAX,
    )
  elif cls.LR_SCHEDULE == "constant":
    lp.optimizer.lr_schedule = pax_fiddle.Config(schedules.Constant)
  else:
    raise NotImplementedError(
      f"LR_SCHEDULE={cls.LR_SCHEDULE!r}: use 'linear_rampup_exponential_decay', "
      "'linear_rampup_cosine_decay' or 'constant'"
    )
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
    task_p.model = pax_fiddle.Config(
      classification_mlp.ClassificationMLPModel, name="classification_model"
    )
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
