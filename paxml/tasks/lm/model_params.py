"""Shared pieces of the language-model experiments: one base class and the functions it calls.

`TransformerLmSpmdAdam` holds Pax's defaults (`TransformerLmSpmdAdafactor` followed by
`set_default_adam`, which is what every `LmCloudSpmd*` and `C4Spmd*` experiment ends up with) as
UPPERCASE class fields. A registered experiment subclasses it and states only what differs; its
`task()` and `datasets()` come from here. The building is done by plain functions, so a test or
a notebook can call them with other values:

  language_model_config(exp)  the praxis LanguageModel config the fields describe
  language_model(exp)         that config, built
  small_language_model(...)   a plain pre-LN LanguageModel from five sizes, for the small demo
                              and test experiments that have none of the Pax fields
  optimizer_config(exp)       Pax's set_default_adam as a praxis optimizer config
  synthetic_datasets(...)     Pax's `SyntheticDataset` (constant ids) for train and eval
  num_heads(exp)              heads from NUM_HEADS / DIMS_PER_HEAD, as Pax derives them

`ProgressionLm` is the other base: a `small_language_model` on arithmetic progressions, the body
of demo.SyntheticDemoLm and of the tests' TinyLm (paxml/testing/tiny_lm.py), which set its sizes.

Pax's chains (LmCloudSpmd2B -> LmCloudSpmd -> TransformerLmSpmdAdafactor + SyntheticDataset ->
BaseExperiment) become: variant -> family (LmCloudSpmd) -> this base; mixins are functions.
"""

from __future__ import annotations

import math
from typing import Any

import fiddle as fdl
import jax
import jax.numpy as jnp

from paxml import base_experiment
from paxml import synthetic_input
from paxml import tasks_lib
from paxml.data import synthetic
from praxis import base_hyperparams
from praxis import base_layer
from praxis import optimizers
from praxis import schedules
from praxis.layers import activations
from praxis.layers import attentions
from praxis.layers import checkpoint_policy
from praxis.layers import embedding_softmax
from praxis.layers import models
from praxis.layers import pipeline
from praxis.layers import sample_decode
from praxis.layers import transformer_models
from praxis.layers import transformers


def num_heads(exp: Any) -> int:
  """N as Pax derives it: NUM_HEADS if set (then N * DIMS_PER_HEAD must be MODEL_DIMS), else
  MODEL_DIMS / DIMS_PER_HEAD."""
  if exp.DIMS_PER_HEAD is None:
    if exp.NUM_HEADS is None:
      raise ValueError(f"{type(exp).__name__}: set NUM_HEADS or DIMS_PER_HEAD")
    return exp.NUM_HEADS
  if exp.NUM_HEADS is None:
    if exp.MODEL_DIMS % exp.DIMS_PER_HEAD:
      raise ValueError(
        f"{type(exp).__name__}: DIMS_PER_HEAD={exp.DIMS_PER_HEAD} does not "
        f"divide MODEL_DIMS={exp.MODEL_DIMS}; change one of them"
      )
    return exp.MODEL_DIMS // exp.DIMS_PER_HEAD
  if exp.NUM_HEADS * exp.DIMS_PER_HEAD != exp.MODEL_DIMS:
    raise ValueError(
      f"{type(exp).__name__}: NUM_HEADS * DIMS_PER_HEAD = {exp.NUM_HEADS} * "
      f"{exp.DIMS_PER_HEAD} must equal MODEL_DIMS={exp.MODEL_DIMS}"
    )
  return exp.NUM_HEADS


def dims_per_head(exp: Any) -> int:
  """H: DIMS_PER_HEAD, or MODEL_DIMS / heads when it is None (Pax's pmap configs)."""
  return exp.DIMS_PER_HEAD or exp.MODEL_DIMS // num_heads(exp)


def _activation_class(exp: Any) -> type:
  cls = exp.ACTIVATION_CLS
  if not (isinstance(cls, type) and issubclass(cls, activations.BaseActivation)):
    raise ValueError(
      f"{type(exp).__name__}: ACTIVATION_CLS must be a praxis activation class "
      f"such as activations.GELU, got {cls!r}"
    )
  return cls


def fprop_dtype(exp: Any) -> Any:
  """FPROP_DTYPE as a dtype: the activations' (weights stay float32, as in Pax)."""
  try:
    return jnp.dtype(exp.FPROP_DTYPE)
  except TypeError:
    raise ValueError(
      f"{type(exp).__name__}: FPROP_DTYPE={exp.FPROP_DTYPE!r} is not a dtype; use "
      "'bfloat16' or 'float32'"
    ) from None


def remat_policy(exp: Any) -> checkpoint_policy.AutodiffCheckpointType:
  """CHECKPOINT_POLICY (Pax's AutodiffCheckpointType name, e.g. 'SAVE_NOTHING') as the enum."""
  try:
    return checkpoint_policy.AutodiffCheckpointType[exp.CHECKPOINT_POLICY]
  except KeyError:
    valid = ", ".join(t.name for t in checkpoint_policy.AutodiffCheckpointType)
    raise ValueError(
      f"{type(exp).__name__}: CHECKPOINT_POLICY={exp.CHECKPOINT_POLICY!r} is not one of {valid}"
    ) from None


def language_model_config(exp: Any) -> base_hyperparams.Config:
  """Pax's `TransformerLmSpmdAdafactor.task()` model, from the fields of `exp`.

  LanguageModel -> TransformerLm (tied SharedEmbeddingSoftmax scaled by sqrt(D) on lookup,
  initialised N(0, 1/D), logits soft-capped at SOFTMAX_CAP_LOGITS; sinusoidal positions; final
  LayerNorm) -> StackedTransformer of NUM_LAYERS layers, or with USE_REPEATED_LAYER a
  StackedTransformerRepeated scanning a one-layer block NUM_LAYERS times under CHECKPOINT_POLICY
  remat. Each layer: pre-LayerNorm (NORM_POLICY), attention with COMBINE_QKV, no biases and
  logits capped at ATTEN_LOGIT_CAP; a biased ACTIVATION_CLS MLP of HIDDEN_DIMS (gated with
  USE_GATED_ACTIVATION); dropout DROPOUT_PROB. Activations run in FPROP_DTYPE, weights float32.
  """
  heads = num_heads(exp)
  head_dims = dims_per_head(exp)
  if head_dims * heads != exp.MODEL_DIMS:
    raise ValueError(
      f"{type(exp).__name__}: heads x dims per head = {heads} x "
      f"{head_dims} must equal MODEL_DIMS={exp.MODEL_DIMS}"
    )
  layer = transformers.Transformer.HParams.config(
    norm_policy=exp.NORM_POLICY,
    tr_atten_tpl=attentions.DotProductAttention.HParams.config(
      use_bias=False, combine_qkv=exp.COMBINE_QKV, atten_logit_cap=exp.ATTEN_LOGIT_CAP
    ),
    tr_fflayer_tpl=transformers.TransformerFeedForward.HParams.config(
      activation_tpl=_activation_class(exp).HParams.config(),
      use_gated_activation=exp.USE_GATED_ACTIVATION,
    ),
  )
  pipelined = getattr(exp, "NUM_STAGES", None) is not None
  layers = exp.NUM_LAYERS // (exp.NUM_STAGES * exp.CIRCULAR_REPEAT) if pipelined else exp.NUM_LAYERS
  stack = transformers.StackedTransformer.HParams.config(
    num_layers=layers,
    model_dims=exp.MODEL_DIMS,
    hidden_dims=exp.HIDDEN_DIMS,
    num_heads=heads,
    dim_per_head=head_dims,
    dropout_prob=exp.DROPOUT_PROB,
    mask_self_attention=True,
    packed_input=exp.PACKED_INPUT,
    transformer_layer_params_tpl=layer,
  )
  if exp.USE_REPEATED_LAYER:
    # One compiled layer scanned `layers` times; weights get a leading [layers] dim.
    stack.num_layers = 1
    stack = transformers.StackedTransformerRepeated.HParams.config(
      block=stack, x_times=layers, checkpoint_policy=remat_policy(exp)
    )
  if pipelined:
    # Pax's TransformerLmSpmdPipelineAdafactor: the stack above is one stage.
    stack = pipeline.PipelinedTransformer.HParams.config(
      pipeline_stage=stack,
      num_pipeline_stages=exp.NUM_STAGES,
      circular_repeat=exp.CIRCULAR_REPEAT,
      num_pipeline_microbatches=exp.NUM_MICROBATCHES,
      pipeline_microbatch_size=exp.MICROBATCH_SIZE,
      stream_io=exp.STREAM_IO,
      pipeline_broadcast_inputs=exp.PIPELINE_BROADCAST_INPUTS,
      checkpoint_policy=remat_policy(exp),
    )
  softmax = embedding_softmax.SharedEmbeddingSoftmax.HParams.config(
    scale_sqrt_depth=True,
    soft_cap_logits=exp.SOFTMAX_CAP_LOGITS,
    # N(0, 1/D): looked up and scaled by sqrt(D), the embeddings start with unit variance.
    params_init=base_layer.WeightInit.Gaussian(1.0 / math.sqrt(exp.MODEL_DIMS)),
  )
  lm = transformer_models.TransformerLm.HParams.config(
    model_dims=exp.MODEL_DIMS,
    vocab_size=exp.VOCAB_SIZE,
    packed_input=exp.PACKED_INPUT,
    softmax_tpl=softmax,
    position_emb_tpl=embedding_softmax.PositionalEmbedding.HParams.config(),
    stacked_transformer_tpl=stack,
  )
  decoder = sample_decode.DecoderHParams(
    seqlen=exp.MAX_SEQ_LEN, max_decode_steps=exp.DECODE_MAX_STEPS, eos_id=exp.DECODE_EOS_ID
  )
  return models.LanguageModel.HParams.config(
    lm_tpl=lm, decoder_tpl=decoder, fprop_dtype=fprop_dtype(exp)
  )


def language_model(exp: Any) -> models.LanguageModel:
  """The built `language_model_config(exp)`."""
  return base_hyperparams.instantiate(language_model_config(exp))


def small_language_model(
  *,
  vocab_size: int,
  model_dims: int,
  num_layers: int,
  num_heads: int,
  hidden_dims: int,
  decode_seqlen: int,
) -> models.LanguageModel:
  """A small praxis LanguageModel: pre-LN layers (attention without biases, as Pax's LMs; a
  biased ReLU MLP), tied embeddings N(0, 1/D) scaled by sqrt(D), sinusoidal positions, float32.

  `decode` continues each row's prompt greedily to `decode_seqlen` tokens (prompt included),
  never stopping early (no EOS): the experiments that use it decode synthetic progressions.
  """
  layer = transformers.Transformer.HParams.config()
  layer.tr_atten_tpl.use_bias = False
  stack = transformers.StackedTransformer.HParams.config(
    num_layers=num_layers,
    num_heads=num_heads,
    hidden_dims=hidden_dims,
    transformer_layer_params_tpl=layer,
  )
  lm = transformer_models.TransformerLm.HParams.config(
    model_dims=model_dims, vocab_size=vocab_size, stacked_transformer_tpl=stack
  )
  # As language_model_config: looked up and scaled by sqrt(D), the embeddings have unit
  # variance, as loud as the sinusoidal positions they are added to.
  lm.softmax_tpl.scale_sqrt_depth = True
  lm.softmax_tpl.params_init = base_layer.WeightInit.Gaussian(model_dims**-0.5)
  return base_hyperparams.instantiate(
    models.LanguageModel.HParams.config(
      lm_tpl=lm, decoder_tpl=sample_decode.DecoderHParams(seqlen=decode_seqlen, eos_id=None)
    )
  )


def optimizer_config(exp: Any) -> base_hyperparams.Config:
  """Pax's `set_default_adam` (lm_cloud) / `set_adam_and_learning_rate_schedule` (c4).

  Adam(ADAM_BETA1, ADAM_BETA2, ADAM_EPSILON), per-tensor update RMS capped at
  ADAM_CLIP_THRESHOLD, decoupled WEIGHT_DECAY, global-norm clipping at
  CLIP_GRADIENT_NORM_TO_VALUE, LEARNING_RATE times LinearRampupExponentialDecay(WARMUP_STEPS,
  DECAY_START, DECAY_END, LR_MIN_RATIO).
  """
  return optimizers.Adam.HParams.config(
    learning_rate=exp.LEARNING_RATE,
    beta1=exp.ADAM_BETA1,
    beta2=exp.ADAM_BETA2,
    epsilon=exp.ADAM_EPSILON,
    epsilon_root=exp.ADAM_EPSILON_ROOT,
    clip_threshold=exp.ADAM_CLIP_THRESHOLD,
    weight_decay=exp.WEIGHT_DECAY,
    clip_gradient_norm_to_value=exp.CLIP_GRADIENT_NORM_TO_VALUE,
    lr_schedule=schedules.LinearRampupExponentialDecay.HParams.config(
      warmup_steps=exp.WARMUP_STEPS,
      decay_start=exp.DECAY_START,
      decay_end=exp.DECAY_END,
      min_ratio=exp.LR_MIN_RATIO,
      max=1.0,
    ),
  )


def _synthetic(name: str, is_training: bool, percore_batch_size: float, seq_len: int) -> fdl.Config:
  batch_size = round(percore_batch_size * jax.local_device_count())
  if batch_size < 1:
    raise ValueError(
      f"PERCORE_BATCH_SIZE={percore_batch_size} x {jax.local_device_count()} "
      "local devices rounds to no rows; raise PERCORE_BATCH_SIZE"
    )
  return fdl.Config(
    synthetic.SyntheticLmData,
    name=name,
    is_training=is_training,
    batch_size=batch_size,
    seq_len=seq_len,
    num_infeed_hosts=jax.process_count(),
    infeed_host_index=jax.process_index(),
  )


def synthetic_datasets(percore_batch_size: float, seq_len: int) -> list[fdl.Config]:
  """Pax's `SyntheticDataset`: constant rows of ones, `percore_batch_size` x local devices rows
  per host, for training and (a copy) for eval."""
  return [
    _synthetic("train", True, percore_batch_size, seq_len),
    _synthetic("synthetic", False, percore_batch_size, seq_len),
  ]


def synthetic_decode_datasets(percore_batch_size: float, prompt_len: int) -> list[fdl.Config]:
  """Prompts for decoding: Pax's constant rows, `prompt_len` tokens long."""
  return [_synthetic("synthetic", False, percore_batch_size, prompt_len)]


class ProgressionLm(base_experiment.BaseExperiment):
  """`small_language_model` trained to continue arithmetic progressions (paxml/synthetic_input.py).

  The data and model fields are below; a subclass adds the loop's TaskConfig fields
  (LEARNING_RATE ... DECODE_INTERVAL_STEPS, see tasks_lib.task_from_fields) and changes sizes.
  Decoding keeps the first DECODE_PREFIX_LEN tokens of each row (start and stride) and continues
  the progression to SEQ_LEN tokens. Not registered: it has no loop settings of its own.
  """

  VOCAB_SIZE = 32
  SEQ_LEN = 32
  BATCH_SIZE = 16
  # Strides up to 8 keep the task learnable in a few hundred steps; the full
  # range (up to VOCAB_SIZE - 1) needs modular arithmetic and many more steps.
  MAX_STRIDE = 8
  # None: a fresh data stream per run, as Pax advises for training data (the
  # checkpoint records it, so a resumed run continues the same stream).
  INPUT_SEED = None
  # Fixed, so that every evaluation sees the same rows and their numbers compare.
  EVAL_SEED = 1000
  DECODE_PREFIX_LEN = 2

  MODEL_DIMS = 64
  NUM_LAYERS = 2
  NUM_HEADS = 4
  HIDDEN_DIMS = 4 * MODEL_DIMS  # Computed once: a subclass changing MODEL_DIMS sets this too.

  def _input(self, **overrides) -> fdl.Config:
    fields = dict(
      batch_size=self.BATCH_SIZE,
      seq_len=self.SEQ_LEN,
      vocab_size=self.VOCAB_SIZE,
      max_stride=self.MAX_STRIDE,
    )
    fields.update(overrides)  # The decode input replaces seq_len.
    return fdl.Config(synthetic_input.SyntheticLmInput, **fields)

  def datasets(self) -> list[fdl.Config]:
    return [
      self._input(seed=self.INPUT_SEED, is_training=True, name="train"),
      self._input(seed=self.EVAL_SEED, is_training=False, name="progressions"),
    ]

  def decode_datasets(self) -> list[fdl.Config]:
    # Rows of just the prompt: LanguageModel.decode continues each row after its last
    # non-padded token.
    return [
      self._input(
        seed=self.EVAL_SEED, is_training=False, name="progressions", seq_len=self.DECODE_PREFIX_LEN
      )
    ]

  def model(self) -> models.LanguageModel:
    """`small_language_model` from the fields above."""
    return small_language_model(
      vocab_size=self.VOCAB_SIZE,
      model_dims=self.MODEL_DIMS,
      num_layers=self.NUM_LAYERS,
      num_heads=self.NUM_HEADS,
      hidden_dims=self.HIDDEN_DIMS,
      decode_seqlen=self.SEQ_LEN,
    )

  def task(self) -> tasks_lib.TaskConfig:
    return tasks_lib.task_from_fields(self, self.model())


class TransformerLmSpmdAdam(base_experiment.BaseExperiment):
  """Pax's `TransformerLmSpmdAdafactor` defaults with `set_default_adam`, on synthetic data.

  Subclasses override fields; `task()` and `datasets()` read them. `not_applied()` lists the
  Pax fields this build does not honour (validate_config prints them): none at present.
  """

  # Architecture (language_model_config).
  NUM_LAYERS = 10
  VOCAB_SIZE = 32000
  DIMS_PER_HEAD = 128
  NUM_HEADS = None  # None: MODEL_DIMS / DIMS_PER_HEAD.
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  FPROP_DTYPE = "bfloat16"  # Activations; weights stay float32.
  PACKED_INPUT = True
  NORM_POLICY = "pre"
  COMBINE_QKV = True
  ACTIVATION_CLS = activations.ReLU
  USE_GATED_ACTIVATION = False
  SOFTMAX_CAP_LOGITS = 30.0
  ATTEN_LOGIT_CAP = 50.0
  DROPOUT_PROB = 0.0
  USE_REPEATED_LAYER = False
  CHECKPOINT_POLICY = "SAVE_NOTHING"  # Pax's AutodiffCheckpointType name.

  # Optimizer (optimizer_config): Pax's set_default_adam. Adam(0.9, 0.99, eps 1e-6), decoupled
  # weight decay, global-norm clipping at 5, linear warm-up over 4000 steps then exponential
  # decay from step 4001 to 0.1x at DECAY_END.
  LEARNING_RATE = 2.5e-4
  ADAM_BETA1 = 0.9
  ADAM_BETA2 = 0.99
  ADAM_EPSILON = 1e-6
  ADAM_EPSILON_ROOT = 0.0
  ADAM_CLIP_THRESHOLD = 1.0  # praxis Adam's per-tensor update RMS cap (Pax's default).
  WEIGHT_DECAY = 1e-3
  CLIP_GRADIENT_NORM_TO_VALUE = 5.0
  WARMUP_STEPS = 4000
  DECAY_START = WARMUP_STEPS + 1
  DECAY_END = 300_000  # set_default_adam's; Pax's DECAY_END=100000 is Adafactor's.
  LR_MIN_RATIO = 0.1

  # Input.
  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024

  # Decoding (--mode=decode, --decode_during_train): greedy continuations of DECODE_PROMPT_LEN
  # tokens of the eval data, at most DECODE_MAX_STEPS new tokens, stopping at DECODE_EOS_ID
  # (Pax's C4 decoder uses eos_id=1).
  DECODE_PROMPT_LEN = 16
  DECODE_MAX_STEPS = 32
  DECODE_EOS_ID = 1

  # Loop. Pax's Train.num_train_steps default is 1e7: "until stopped".
  NUM_TRAIN_STEPS = 10_000_000
  CHECKPOINT_EVERY_N_STEPS = 5000
  CHECKPOINT_MAX_TO_KEEP = 10
  SUMMARY_INTERVAL_STEPS = 100
  EVAL_INTERVAL_STEPS = 100

  # Mesh (replica, data, mdl). None: every device on `data`.
  ICI_MESH_SHAPE = None
  DCN_MESH_SHAPE = [1, 1, 1]

  def datasets(self) -> list[fdl.Config]:
    return synthetic_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN)

  def decode_datasets(self) -> list[fdl.Config]:
    return synthetic_decode_datasets(self.PERCORE_BATCH_SIZE, self.DECODE_PROMPT_LEN)

  def task(self, **overrides: Any) -> tasks_lib.TaskConfig:
    """The task; `overrides` (TaskConfig fields) are for subclasses."""
    # The other loop fields (NUM_TRAIN_STEPS, the mesh, the intervals) are TaskConfig's names.
    return tasks_lib.task_from_fields(
      self,
      language_model(self),
      optimizer=optimizer_config(self),
      # LEARNING_RATE and WARMUP_STEPS are set_default_adam's, already in optimizer_config;
      # TaskConfig's fields of those names are the optimizer=None shorthand.
      learning_rate=None,
      warmup_steps=0,
      # Pax's names for these two.
      save_interval_steps=self.CHECKPOINT_EVERY_N_STEPS,
      save_max_to_keep=self.CHECKPOINT_MAX_TO_KEEP,
      **overrides,
    )

  def validate(self) -> None:
    """Fails fast on fields that cannot build (bad dtype, remat policy, activation, heads)."""
    fprop_dtype(self)
    remat_policy(self)
    _activation_class(self)
    num_heads(self)
    if self.DECODE_PROMPT_LEN + self.DECODE_MAX_STEPS > self.MAX_SEQ_LEN:
      raise ValueError(
        f"{type(self).__name__}: DECODE_PROMPT_LEN + DECODE_MAX_STEPS = "
        f"{self.DECODE_PROMPT_LEN + self.DECODE_MAX_STEPS} exceeds MAX_SEQ_LEN="
        f"{self.MAX_SEQ_LEN}, the decoder's buffer; shorten them"
      )

  def not_applied(self) -> list[str]:
    """Pax fields whose values this build does not honour. Every field above reaches the model,
    the optimizer or the loop, so the list is empty."""
    return []


class TransformerLmSpmdPipelineAdam(TransformerLmSpmdAdam):
  """Pax's `TransformerLmSpmdPipelineAdafactor` + `set_default_adam`: the stack is pipelined.

  NUM_LAYERS are split over NUM_STAGES stages (x CIRCULAR_REPEAT passes); the stage is a plain
  StackedTransformer (Pax turns the scanned layer off: the pipeline already loops). The mesh
  has Pax's four axes [stage, replica, data, mdl] with ICI_MESH_SHAPE[0] x DCN_MESH_SHAPE[0]
  = NUM_STAGES. Set NUM_MICROBATCHES or MICROBATCH_SIZE.
  """

  NUM_STAGES: int | None = None
  CIRCULAR_REPEAT = 1
  NUM_MICROBATCHES: int | None = None
  MICROBATCH_SIZE: int | None = None
  PIPELINE_BROADCAST_INPUTS = False
  STREAM_IO = False
  # Pax shards the embedding's `data` dim over these axes; here the rules table decides.
  EMB_W_DATA_DIMS: Any = "data"
  USE_REPEATED_LAYER = False
  ICI_MESH_SHAPE = None
  DCN_MESH_SHAPE = [1, 1, 1, 1]

  def task(self, **overrides: Any) -> tasks_lib.TaskConfig:
    # NUM_MICROBATCHES is the pipeline's (Pax's name), not TaskConfig's gradient accumulation.
    return super().task(num_microbatches=1, **overrides)

  def validate(self) -> None:
    super().validate()
    name = type(self).__name__
    if not self.NUM_STAGES or self.NUM_LAYERS % (self.NUM_STAGES * self.CIRCULAR_REPEAT):
      raise ValueError(
        f"{name}: NUM_LAYERS={self.NUM_LAYERS} must split into NUM_STAGES={self.NUM_STAGES} x "
        f"CIRCULAR_REPEAT={self.CIRCULAR_REPEAT} equal stages"
      )
    if (self.NUM_MICROBATCHES is None) == (self.MICROBATCH_SIZE is None):
      raise ValueError(f"{name}: set exactly one of NUM_MICROBATCHES and MICROBATCH_SIZE")
    ici, dcn = self.ICI_MESH_SHAPE, self.DCN_MESH_SHAPE
    if ici is None or len(ici) != 4 or len(dcn) != 4 or ici[0] * dcn[0] != self.NUM_STAGES:
      raise ValueError(
        f"{name}: a pipelined experiment needs 4-entry ICI_MESH_SHAPE and DCN_MESH_SHAPE "
        f"[stage, replica, data, mdl] whose stage sizes multiply to NUM_STAGES="
        f"{self.NUM_STAGES}; got {ici} and {dcn}"
      )

  def not_applied(self) -> list[str]:
    notes = []
    if self.EMB_W_DATA_DIMS != "data":
      notes.append(
        f"EMB_W_DATA_DIMS={self.EMB_W_DATA_DIMS}: the embedding is sharded by the rules table "
        "(its embed dim over `data`)"
      )
    for field in ("STREAM_IO", "PIPELINE_BROADCAST_INPUTS"):
      if getattr(self, field):
        notes.append(
          f"{field}=True: a transfer optimisation of Pax's pipeline; here the inputs start "
          "replicated over the stages (same results)"
        )
    return notes
