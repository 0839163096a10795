"""Pax's C4 experiments: decoder-only LMs (GPT-3 family) on C4, Pax's names and values.

The 18 registered names, their classes and fields are Pax's (`C4SpmdAdam`: 24 x 2048, 32 heads,
vocab 32128, float32, [1, 4, 2]; the GPT-3 `...AdamOrgHP` and MLPerf sets; the pipelined
family), plus `C4SpmdPipelineGpt3SmallAdam64Replicas`, which Pax's file no longer has (see its
docstring).

Data. As in Pax, the default input is SeqIO: the tasks `c4_lm_v301_gpt` (train) and
`c4_lm_v301_gpt_eval_tokenized` (eval) over TFDS `c4/en:3.0.1` with Pax's GPT SentencePiece
vocabulary (paxml/tasks/lm/c4_seqio_tasks.py, registered when `datasets()` is called), read as
`seqio_input.SeqIOInput` with Pax's fields. A local TFDS copy (DIR/c4/en/3.0.1/) is read with

  ./bazelw run //paxml:main -- --exp=tasks.lm.params.c4.C4Spmd1BAdam4Replicas \\
      --tfds_data_dir=DIR --job_log_dir=DIR

Every experiment builds its task and datasets without data present. Reading prepared TFRecords
instead stays an option: `--data_dir=DIR` (DATA_DIR) holding

  DATA_DIR/train-*.tfrecord   tf.train.Example with a bytes feature `text`, one per document
  DATA_DIR/eval-*.tfrecord    the validation documents
  DATA_DIR/spm.model          a SentencePiece model with at most VOCAB_SIZE pieces

written by `bazel run //paxml/data:prepare`. Documents are tokenised, concatenated and split into
MAX_SEQ_LEN rows (packed, with segment ids) for training; evaluation makes one padded pass. Pax's
own c4.py (its SeqIO tasks) imports and builds against this project too, through the `t5.data`
subset in //t5.

  experiment                 layers  dims   heads  per-core  ICI mesh     params
  C4SpmdAdam                 24      2048   32     1         [1, 4, 2]    1.3B
  C4Spmd1BAdam4Replicas      13      2560   20     32        [1, 4, 1]    1.1B
  C4Spmd2BAdam4Replicas      18      3072   24     32        [1, 4, 1]    2.1B
  C4Spmd16BAdam32Replicas    36      6144   48     16        [1, 16, 2]   16.4B
  C4Spmd32BAdam64Replicas    40      8192   64     8         [1, 16, 4]   32B
  GPT-3 175B sets            96      12288  96     ...       (pipelined: [stage, replica, data, mdl])
"""

import functools
import math
import os

from absl import logging
import jax
from jax import numpy as jnp

from paxml import base_experiment
from paxml import experiment_registry
from paxml.tasks.lm import model_params
from paxml.tasks.lm.params import lm_cloud
from praxis import base_hyperparams
from praxis import base_layer
from praxis import layers
from praxis import pax_fiddle

WeightInit = base_layer.WeightInit

GPT_EOS_ID = 1

# c4's Adam bases live in model_params (one definition); Pax's names for them here.
TransformerLmSpmdAdam = model_params.TransformerLmSpmdAdam
TransformerLmSpmdPipelineAdam = model_params.TransformerLmSpmdPipelineAdam
set_adam_and_learning_rate_schedule = model_params.set_adam_and_learning_rate_schedule


class C4UnsupervisedDataset(base_experiment.BaseExperiment):
  """Pax's C4 input: SeqIO tasks over TFDS C4, or files from DATA_DIR (module docstring)."""

  PERCORE_BATCH_SIZE = 1
  PERCORE_EVAL_BATCH_SIZE = None
  MAX_SEQ_LEN = 1024
  TRAINING_SEED = 9876
  TRAINING_NUM_BATCHES_TO_SKIP = None
  TRAIN_MIXTURE = "c4_lm_v301_gpt"
  EVAL_MIXTURE = "c4_lm_v301_gpt_eval_tokenized"
  # Splits of the public c4/en:3.0.1 (Pax's MLPerf build names them "train2" and
  # "validation_tokenized_5662seqs"; c4_seqio_tasks' docstring).
  TRAIN_SPLIT = "train"
  EVAL_SPLIT = "validation"

  DATA_DIR = None  # Set by --data_dir: read prepared TFRecords instead of SeqIO.
  TRAIN_FILES = "train-*.tfrecord"
  EVAL_FILES = "eval-*.tfrecord"
  TOKENIZER = "spm.model"

  def _batch(self, is_training: bool) -> tuple[int, int]:
    """(rows per process, infeed hosts): Pax's arithmetic, fractional per-core sizes included."""
    percore = self.PERCORE_BATCH_SIZE
    if not is_training and self.PERCORE_EVAL_BATCH_SIZE is not None:
      percore = self.PERCORE_EVAL_BATCH_SIZE
    local = jax.local_device_count()
    global_batch = int(percore * local * jax.process_count() + 1e-6)
    if percore >= 1:
      per_process = int(math.ceil(percore) * local + 1e-6)
      return per_process, global_batch // per_process
    if jax.process_count() > 1:
      return local, global_batch // local
    return int(percore * local + 1e-6), 1

  def _seqio_dataset(self, is_training: bool) -> pax_fiddle.Config:
    """Pax's SeqIOInput config of the C4 mixtures (their tasks registered here if missing)."""
    # Imported here: main imports this module to register the experiments, and TensorFlow
    # (which SeqIO needs) takes seconds to load.
    from paxml import seqio_input  # pylint: disable=g-import-not-at-top
    from paxml.tasks.lm import c4_seqio_tasks  # pylint: disable=g-import-not-at-top

    c4_seqio_tasks.register()
    batch_size, num_infeed_hosts = self._batch(is_training)
    seed = self.TRAINING_SEED if is_training else 4321
    if is_training:
      logging.info("Train input seed: %s", seed)
    return pax_fiddle.Config(
      seqio_input.SeqIOInput,
      name="C4Train" if is_training else "C4Validation",
      mixture_name=self.TRAIN_MIXTURE if is_training else self.EVAL_MIXTURE,
      split_name=self.TRAIN_SPLIT if is_training else self.EVAL_SPLIT,
      task_feature_lengths={"targets": self.MAX_SEQ_LEN},
      use_cached=False,
      repeat=is_training,
      feature_converter=seqio_input.LanguageModelFeatures(
        pack=is_training,
        use_custom_packing_ops=False,
        bos_id=0,
        reverse_bos_padding=True,
        eos_id=GPT_EOS_ID,
      ),
      is_training=is_training,
      input_random_seed=seed,
      batch_size=batch_size,
      drop_remainder=is_training,
      num_batches_to_skip=self.TRAINING_NUM_BATCHES_TO_SKIP,
      num_infeed_hosts=num_infeed_hosts,
      reset_for_eval=not is_training,
      annotate_padding_fields=True,
    )

  def _files_dataset(self, is_training: bool) -> pax_fiddle.Config:
    """TextInput over the TFRecords prepared in DATA_DIR (same batch arithmetic and seeds)."""
    from paxml.data import text_pipeline  # pylint: disable=g-import-not-at-top

    batch_size, num_infeed_hosts = self._batch(is_training)
    seed = self.TRAINING_SEED if is_training else 4321
    path = functools.partial(os.path.join, self.DATA_DIR)
    return pax_fiddle.Config(
      text_pipeline.TextInput,
      name="C4Train" if is_training else "C4Validation",
      is_training=is_training,
      file_pattern=path(self.TRAIN_FILES if is_training else self.EVAL_FILES),
      tokenizer_path=path(self.TOKENIZER),
      file_format="tfrecord",
      seq_len=self.MAX_SEQ_LEN,
      packing="pack",
      batch_size=batch_size,
      num_infeed_hosts=num_infeed_hosts,
      input_random_seed=seed,
      # Eval: one full padded pass over the validation files per evaluation.
      reset_for_eval=not is_training,
    )

  def _dataset_common(self, is_training: bool) -> pax_fiddle.Config:
    if self.DATA_DIR:
      return self._files_dataset(is_training)
    return self._seqio_dataset(is_training)

  def datasets(self) -> list[pax_fiddle.Config]:
    return [self._dataset_common(is_training=True), self._dataset_common(is_training=False)]


def _decoder(task_p: pax_fiddle.Config, seqlen: int) -> None:
  task_p.model.decoder_tpl.eos_id = GPT_EOS_ID
  task_p.model.decoder_tpl.seqlen = seqlen


@experiment_registry.register
class C4SpmdAdam(TransformerLmSpmdAdam, C4UnsupervisedDataset):
  """Base decoder-only transformer on C4: 24 x 2048, 32 heads, vocab 32128, [1, 4, 2]."""

  NUM_LAYERS = 24
  NUM_HEADS = 32
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = None  # MODEL_DIMS // NUM_HEADS.
  VOCAB_SIZE = 32128
  ACTIVATION_CLS = layers.GELU
  USE_GATED_ACTIVATION = False
  CHECKPOINT_POLICY = layers.AutodiffCheckpointType.SAVE_DOT_FOR_MLPERF_200B
  CHECKPOINT_EVERY_N_STEPS = 1000
  ICI_MESH_SHAPE = [1, 4, 2]

  def task(self) -> pax_fiddle.Config:
    task_p = super().task()
    _decoder(task_p, self.MAX_SEQ_LEN)
    return set_adam_and_learning_rate_schedule(cls=self, task_p=task_p)


@experiment_registry.register
class LmCloudSpmdAdam(TransformerLmSpmdAdam, lm_cloud.SyntheticDataset):
  """c4's Adam base on synthetic data: 2 x 2048, GELU, [1, 4, 2]."""

  NUM_LAYERS = 2
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  ACTIVATION_CLS = layers.GELU
  USE_GATED_ACTIVATION = False
  CHECKPOINT_POLICY = layers.AutodiffCheckpointType.SAVE_NOTHING
  ICI_MESH_SHAPE = [1, 4, 2]


@experiment_registry.register
class LmCloudSpmdAdamLimitSteps(LmCloudSpmdAdam):
  """LmCloudSpmdAdam for 4000 steps."""

  def task(self) -> pax_fiddle.Config:
    task_p = super().task()
    task_p.train.num_train_steps = 4000
    return task_p


class EarlyStoppingFn(base_hyperparams.FiddleBaseParameterizable):
  """Pax's: stop once the C4 eval log perplexity reaches `target_log_pplx`.

  Attributes:
    target_log_pplx: the target of eval_test_C4Validation/metrics/log_pplx.
  """

  target_log_pplx: float | None = None

  def __call__(self, metrics, running_mode, global_step, is_last_ckpt, checkpoint_path) -> bool:
    del running_mode, global_step, is_last_ckpt, checkpoint_path
    log_pplx = metrics.get("eval_test_C4Validation/metrics/log_pplx")
    return log_pplx is not None and log_pplx <= self.target_log_pplx


def configure_gpt3_task(cls, task_p: pax_fiddle.Config) -> pax_fiddle.Config:
  """Pax's GPT-3 settings: N(0, 0.006) init, no softmax bias or cap, unscaled matmul embedding
  lookup, LAYERNORM_EPSILON, attention biases without per-dim scale, tanh GELU."""
  model_p = task_p.model
  _decoder(task_p, cls.MAX_SEQ_LEN)
  model_p.params_init = WeightInit.Gaussian(0.006)
  lm = model_p.lm_tpl
  lm.softmax_tpl.params_init = WeightInit.Gaussian(0.006)
  lm.softmax_tpl.feed_forward_tpl.has_bias = False
  lm.softmax_tpl.soft_cap_logits = None
  embedding = lm.separate_embedding_tpl if cls.SEPARATE_EMBEDDING else lm.softmax_tpl
  embedding.scale_sqrt_depth = False
  embedding.lookup_style = cls.EMBEDDING_LOOKUP_STYLE
  if cls.TRAINABLE_POSITION_EMB:
    lm.position_emb_tpl.lookup_style = cls.EMBEDDING_LOOKUP_STYLE

  stack = lm.stacked_transformer_tpl
  if pax_fiddle.get_callable(stack) is layers.PipelinedTransformer:
    stack = stack.pipeline_stage
  if issubclass(pax_fiddle.get_callable(stack), layers.StackedTransformerRepeated):
    stack = stack.block
  layer = stack.transformer_layer_params_tpl
  layer.ln_tpl.epsilon = cls.LAYERNORM_EPSILON
  layer.tr_fflayer_tpl.ln_tpl.epsilon = cls.LAYERNORM_EPSILON
  lm.final_ln_tpl.epsilon = cls.LAYERNORM_EPSILON
  layer.tr_atten_tpl.internal_enable_per_dim_scale = False
  layer.tr_atten_tpl.use_bias = True
  layer.tr_fflayer_tpl.activation_tpl.approximate = True
  for atten in (layer.tr_atten_tpl, layer.cross_atten_tpl):
    if atten is not None:
      atten.weight_split_dims_mapping.proj = ["data", "mdl", None]
  if task_p.early_stopping_fn is None:
    task_p.early_stopping_fn = pax_fiddle.Config(
      EarlyStoppingFn, target_log_pplx=cls.TARGET_LOG_PPLX
    )
  return task_p


class _Gpt3OrgHP:
  """GPT-3 with the paper's hyperparameters (matched to Megatron-LM's convergence)."""

  MAX_SEQ_LEN = 2048
  NUM_LAYERS = 96
  NUM_HEADS = 96
  MODEL_DIMS = 12288
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = None
  VOCAB_SIZE = 50257
  ACTIVATION_CLS = layers.GELU
  USE_GATED_ACTIVATION = False
  SEPARATE_EMBEDDING = False
  TRAINABLE_POSITION_EMB = True
  TRAINABLE_PE_MAX_SEQ_LEN = 16384
  ATTEN_LOGIT_CAP = -1.0  # No cap.

  LEARNING_RATE = 6e-5
  WEIGHT_DECAY = 0.1
  ADAM_BETA1 = 0.9
  ADAM_BETA2 = 0.95
  ADAM_EPSILON = 1e-8
  ADAM_CLIP_THRESHOLD = -1.0  # No per-tensor update cap.
  CLIP_GRADIENT_NORM_TO_VALUE = 1.0
  LAYERNORM_EPSILON = 1e-5

  # In steps at a 1536-sequence batch.
  LR_SCHEDULE = "linear_rampup_cosine_decay"
  LR_COS_WARMUP = 265
  LR_COS_DECAY_START = LR_COS_WARMUP + 1
  LR_COS_DECAY_END = 108600
  LR_COS_MAX = 1.0
  LR_COS_MIN_RATIO = 0.1

  TARGET_LOG_PPLX = 2.69
  CHECKPOINT_POLICY = layers.AutodiffCheckpointType.SAVE_NOTHING
  EVAL_INTERVAL_STEPS = 100
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_EVERY_N_STEPS = 100
  CHECKPOINT_MAX_TO_KEEP = 10

  def task(self) -> pax_fiddle.Config:
    return configure_gpt3_task(self, super().task())  # pytype: disable=attribute-error


class C4SpmdGpt3AdamOrgHP(_Gpt3OrgHP, C4SpmdAdam):
  """GPT-3 175B with the original hyperparameters, scanned layers."""

  USE_REPEATED_LAYER = True


@experiment_registry.register
class C4SpmdGpt3AdamOrgHPBS1p5k1536Replicas(C4SpmdGpt3AdamOrgHP):
  """GPT-3 in float32 on 1536 devices, global batch 1536."""

  VOCAB_SIZE = 51200  # Padded to a TPU-friendly size.
  PERCORE_BATCH_SIZE = 1
  ICI_MESH_SHAPE = [1, 64, 24]
  FPROP_DTYPE = jnp.float32
  CHECKPOINT_MAX_TO_KEEP = 100
  EVAL_INTERVAL_STEPS = 25
  SUMMARY_INTERVAL_STEPS = 1


@experiment_registry.register
class C4SpmdPipelineAdam(TransformerLmSpmdPipelineAdam, C4UnsupervisedDataset):
  """C4SpmdAdam's model pipelined in 2 stages on [2, 1, 2, 2]."""

  NUM_LAYERS = 24
  NUM_HEADS = 32
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = None
  VOCAB_SIZE = 32128
  ACTIVATION_CLS = layers.GELU
  USE_GATED_ACTIVATION = False
  CHECKPOINT_POLICY = layers.AutodiffCheckpointType.SAVE_DOT_FOR_MLPERF_200B
  CHECKPOINT_EVERY_N_STEPS = 1000
  MICROBATCH_SIZE = 2
  ICI_MESH_SHAPE = [2, 1, 2, 2]
  NUM_STAGES = 2
  EMB_W_DATA_DIMS = ("replica", "data")

  def task(self) -> pax_fiddle.Config:
    task_p = super().task()
    _decoder(task_p, self.MAX_SEQ_LEN)
    return set_adam_and_learning_rate_schedule(cls=self, task_p=task_p)


class C4SpmdPipelineGpt3AdamOrgHP(_Gpt3OrgHP, C4SpmdPipelineAdam):
  """GPT-3 175B with the original hyperparameters, pipelined."""

  USE_REPEATED_LAYER = False


class C4SpmdPipelineGpt3AdamMLPerfHP(C4SpmdPipelineGpt3AdamOrgHP):
  """GPT-3 for the MLPerf reference: learning rate and cosine steps from the global batch."""

  VOCAB_SIZE = 51200
  FPROP_DTYPE = jnp.float32
  SUMMARY_INTERVAL_STEPS = 1
  # A subclass sets the eval and checkpoint intervals.
  EVAL_INTERVAL_STEPS = None
  CHECKPOINT_EVERY_N_STEPS = None
  CHECKPOINT_MAX_TO_KEEP = 100
  # None: set_adam_and_learning_rate_schedule derives them from the global batch.
  LEARNING_RATE = None
  LR_COS_WARMUP = None
  LR_COS_DECAY_START = None
  LR_COS_DECAY_END = None


@experiment_registry.register
class C4SpmdPipelineGpt3AdamOrgHPBS1p5k768Replicas(C4SpmdPipelineGpt3AdamOrgHP):
  """GPT-3 in float32 on 768 devices (8 stages), global batch 1536, original HPs."""

  PERCORE_BATCH_SIZE = 2
  VOCAB_SIZE = 51200
  NUM_STAGES = 8
  ICI_MESH_SHAPE = [8, 1, 8, 12]
  # Pax's file misspells this field, so its inherited MICROBATCH_SIZE = 2 is what applies; both
  # are kept, for the same behaviour.
  MICROBATCH_SIAZE = 8
  FPROP_DTYPE = jnp.float32
  CHECKPOINT_MAX_TO_KEEP = 100
  EVAL_INTERVAL_STEPS = 25
  SUMMARY_INTERVAL_STEPS = 1
  CHECKPOINT_EVERY_N_STEPS = 50
  STREAM_IO = False


def _mlperf(
  name: str,
  percore: int,
  stages: int,
  mesh: list[int],
  microbatch: int,
  eval_every: int,
  stream_io: bool,
) -> type:
  """One registered MLPerf GPT-3 set (Pax writes each out; the values below are Pax's)."""
  fields = dict(
    PERCORE_BATCH_SIZE=percore,
    NUM_STAGES=stages,
    ICI_MESH_SHAPE=mesh,
    MICROBATCH_SIZE=microbatch,
    EVAL_INTERVAL_STEPS=eval_every,
    CHECKPOINT_EVERY_N_STEPS=eval_every * 2,
    STREAM_IO=stream_io,
    __doc__=(
      f"GPT-3 in float32 on {math.prod(mesh)} devices, global batch "
      f"{percore * math.prod(mesh)}, MLPerf hyperparameters."
    ),
    __module__=__name__,
  )
  return experiment_registry.register(type(name, (C4SpmdPipelineGpt3AdamMLPerfHP,), fields))


C4SpmdPipelineGpt3AdamMLPerfHPBS1p5k768Replicas = _mlperf(
  "C4SpmdPipelineGpt3AdamMLPerfHPBS1p5k768Replicas", 2, 8, [8, 1, 8, 12], 8, 16, False
)
C4SpmdPipelineGpt3AdamMLPerfHPBS2k512Replicas = _mlperf(
  "C4SpmdPipelineGpt3AdamMLPerfHPBS2k512Replicas", 4, 8, [8, 1, 8, 8], 8, 12, True
)
C4SpmdPipelineGpt3AdamMLPerfHPBS3k768Replicas = _mlperf(
  "C4SpmdPipelineGpt3AdamMLPerfHPBS3k768Replicas", 4, 4, [4, 1, 16, 12], 16, 8, True
)
C4SpmdPipelineGpt3AdamMLPerfHPBS4k1024Replicas = _mlperf(
  "C4SpmdPipelineGpt3AdamMLPerfHPBS4k1024Replicas", 4, 8, [8, 1, 8, 16], 8, 6, True
)
C4SpmdPipelineGpt3AdamMLPerfHPBS8k1024Replicas = _mlperf(
  "C4SpmdPipelineGpt3AdamMLPerfHPBS8k1024Replicas", 8, 4, [4, 1, 16, 16], 16, 3, True
)


class _Gpt3Sized(C4SpmdAdam):
  """c4's GPT-3-sized variants of C4SpmdAdam: scanned, bfloat16, SAVE_NOTHING, vocab 32000."""

  MAX_SEQ_LEN = 1024
  VOCAB_SIZE = 32000
  FPROP_DTYPE = jnp.bfloat16
  USE_REPEATED_LAYER = True
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_POLICY = layers.AutodiffCheckpointType.SAVE_NOTHING


@experiment_registry.register
class C4Spmd1BAdam4Replicas(_Gpt3Sized):
  """1.1B (13 x 2560, 20 heads) on 4 devices; global batch 128 x 1024 tokens.

  ./bazelw run //paxml:main -- --exp=c4.C4Spmd1BAdam4Replicas --tfds_data_dir=DIR --job_log_dir=DIR
  """

  NUM_LAYERS = 13
  MODEL_DIMS = 2560
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 20
  DIMS_PER_HEAD = 128
  PERCORE_BATCH_SIZE = 32
  ICI_MESH_SHAPE = [1, 4, 1]


@experiment_registry.register
class C4Spmd1BAdam4ReplicasLimitSteps(C4Spmd1BAdam4Replicas):
  """C4Spmd1BAdam4Replicas for 15000 steps."""

  def task(self) -> pax_fiddle.Config:
    task_p = super().task()
    task_p.train.num_train_steps = 15000
    return task_p


@experiment_registry.register
class C4Spmd2BAdam4Replicas(_Gpt3Sized):
  """2.1B (18 x 3072, 24 heads) on 4 devices; global batch 128 x 1024 tokens."""

  NUM_LAYERS = 18
  MODEL_DIMS = 3072
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 24
  DIMS_PER_HEAD = 128
  PERCORE_BATCH_SIZE = 32
  ICI_MESH_SHAPE = [1, 4, 1]


@experiment_registry.register
class C4Spmd16BAdam32Replicas(_Gpt3Sized):
  """16.4B (36 x 6144, 48 heads) on 32 devices, 2-way tensor parallel; global batch 512."""

  NUM_LAYERS = 36
  MODEL_DIMS = 6144
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 48
  DIMS_PER_HEAD = 128
  PERCORE_BATCH_SIZE = 16
  ICI_MESH_SHAPE = [1, 16, 2]


@experiment_registry.register
class C4Spmd32BAdam64Replicas(_Gpt3Sized):
  """32B (40 x 8192, 64 heads) on 64 devices, 4-way tensor parallel; global batch 512."""

  NUM_LAYERS = 40
  MODEL_DIMS = 8192
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 64
  DIMS_PER_HEAD = 128
  PERCORE_BATCH_SIZE = 8
  ICI_MESH_SHAPE = [1, 16, 4]


@experiment_registry.register
class C4SpmdGpt3L16AdamOrgHP(C4SpmdGpt3AdamOrgHP):
  """GPT-3 cut to 16 layers, bfloat16, on 64 devices; global batch 192."""

  NUM_LAYERS = 16
  FPROP_DTYPE = jnp.bfloat16
  PERCORE_BATCH_SIZE = 3
  EVAL_INTERVAL_STEPS = 25000
  ICI_MESH_SHAPE = [1, 16, 4]


@experiment_registry.register
class C4SpmdPipelineGpt3SmallAdam8Replicas(C4SpmdPipelineGpt3AdamOrgHP):
  """Pax's "GPT-3 XL" (its docstring says 1.3B; at 24 x 3072 with a 16384-position table it
  is 2.9B) in bfloat16, 2 stages on 8 devices; global batch 512."""

  NUM_STAGES = 2
  NUM_LAYERS = 24
  NUM_HEADS = 24
  MODEL_DIMS = 3072
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = 128
  VOCAB_SIZE = 51200
  PERCORE_BATCH_SIZE = 64
  MICROBATCH_SIZE = 8
  FPROP_DTYPE = jnp.bfloat16
  LEARNING_RATE = 2.0e-4
  ICI_MESH_SHAPE = [2, 1, 2, 2]
  CHECKPOINT_MAX_TO_KEEP = 1000
  EVAL_INTERVAL_STEPS = 10
  SUMMARY_INTERVAL_STEPS = 5
  CHECKPOINT_EVERY_N_STEPS = 200


@experiment_registry.register
class C4SpmdPipelineGpt3SmallAdam64Replicas(C4SpmdPipelineGpt3SmallAdam8Replicas):
  """C4SpmdPipelineGpt3SmallAdam8Replicas' model (2.9B) in 4 stages on 64 devices; batch 512.

  Not in Pax's c4.py any more (the seed's "GPT3-XL on c4"). Reconstructed from its sibling
  C4SpmdPipelineGpt3SmallAdam8Replicas (model, vocabulary 51200, learning rate, checkpoint
  count) and from its last version in google/paxml's history (commit 9b56820: 4 stages,
  [4, 1, 4, 4], microbatches of 16, eval every 100 steps, summaries every step). That version
  set `PER_CORE_BATCH_SIZE = 8`, a misspelling its 512-sequence docstring shows was meant as
  PERCORE_BATCH_SIZE, which is what is set here.

    ./bazelw run //paxml:main -- --exp=tasks.lm.params.c4.C4SpmdPipelineGpt3SmallAdam64Replicas \\
        --tfds_data_dir=DIR --job_log_dir=DIR
  """

  NUM_STAGES = 4
  PERCORE_BATCH_SIZE = 8
  MICROBATCH_SIZE = 16
  ICI_MESH_SHAPE = [4, 1, 4, 4]
  EVAL_INTERVAL_STEPS = 100
  SUMMARY_INTERVAL_STEPS = 1
