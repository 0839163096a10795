"""Pax's lm_cloud experiments: decoder-only LMs on synthetic data, Pax's names and values.

Every experiment here reads Pax's constant synthetic batches (all ids 1), so the loss falls to 0
quickly: they measure speed and check that a configuration builds, shards and fits, they do not
learn language. Classes, fields and values are Pax's (the same 19 registered names); each
variant states what differs from its family base: `LmCloudSpmd` (model_params.
TransformerLmSpmdAdafactor + `set_default_adam`), `LmCloudSpmdPipeline` (the pipelined base),
`LmCloudTransformerAdam` (model_params.TransformerLmPmapAdam, every device on `data`), and the
MLPs on `model_params.ClassificationModelAdam`. `SyntheticDataset` is Pax's input mixin.

Run one with, e.g.

  ./bazelw run //paxml:main -- --exp=tasks.lm.params.lm_cloud.LmCloudSpmdTest --job_log_dir=/tmp/lmc

Sizes and meshes (replica, data, mdl); the global batch is PERCORE_BATCH_SIZE x devices:

  experiment        layers  dims   heads  per-core  ICI mesh     remat policy
  LmCloudSpmd2B     18      3072   24     8         [1, 4, 1]    SAVE_NOTHING
  LmCloudSpmd32B    40      8192   64     8         [1, 16, 4]   SAVE_CONTEXT_AND_OUT_PROJ
  LmCloudSpmd64B    51      10240  80     4         [1, 16, 8]   SAVE_CONTEXT_AND_OUT_PROJ
  LmCloudSpmd128B   71      12288  96     4         [1, 64, 4]   SAVE_NOTHING
  LmCloudSpmd256B   80      16384  128    4         [1, 64, 8]   SAVE_NOTHING
  LmCloudSpmd512B   102     20480  160    4         [1, 64, 16]  SAVE_NOTHING
  LmCloudSpmd1024B  142     24576  192    2         [1, 256, 8]  SAVE_NOTHING
"""

import math

import jax
from jax import numpy as jnp

from paxml import base_experiment
from paxml import experiment_registry
from paxml.tasks.lm import input_generator
from paxml.tasks.lm import model_params
from praxis import base_input
from praxis import layers
from praxis import pax_fiddle

_SAVE_NOTHING = layers.AutodiffCheckpointType.SAVE_NOTHING
_SAVE_CONTEXT_AND_OUT_PROJ = layers.AutodiffCheckpointType.SAVE_CONTEXT_AND_OUT_PROJ


class SyntheticDataset(base_experiment.BaseExperiment):
  """Pax's synthetic LM input: PERCORE_BATCH_SIZE x local devices constant rows per host."""

  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024

  def _dataset_common(self, is_training: bool) -> pax_fiddle.Config:
    local = jax.local_device_count()
    if self.PERCORE_BATCH_SIZE >= 1:
      batch_size = round(self.PERCORE_BATCH_SIZE * local)
      num_infeed_hosts = jax.process_count()
    else:
      # Fewer rows than devices: whole rows on the first hosts only, as Pax does.
      global_batch_size = int(self.PERCORE_BATCH_SIZE * local * jax.process_count())
      batch_size = math.ceil(self.PERCORE_BATCH_SIZE * local)
      num_infeed_hosts = global_batch_size // batch_size
    input_p = input_generator.SyntheticLmData.HParams()
    input_p.batch_size = batch_size
    input_p.seq_len = self.MAX_SEQ_LEN
    return pax_fiddle.Config(
      base_input.LingvoInputAdaptor,
      input=input_p,
      is_training=is_training,
      num_infeed_hosts=num_infeed_hosts,
    )

  def datasets(self) -> list[pax_fiddle.Config]:
    """A train and an eval copy of the synthetic input."""
    return [self._dataset_common(is_training=True), self._dataset_common(is_training=False)]


@experiment_registry.register
class LargeMlp(model_params.ClassificationModelAdam, SyntheticDataset):
  """An 8-layer MLP, 4096 -> 7168 -> 4096, on 8 devices."""

  NUM_LAYER = 8
  INPUT_DIM = 4096
  OUTPUT_DIM = 4096
  HIDDEN_DIM = 7168
  MESH_SHAPE = [8, 1, 1]
  MLP_WEIGHT_SHARDING = [-1, -1]
  SOFTMAX_WEIGHT_SHARDING = [-1, -1]


@experiment_registry.register
class SmallMlp(model_params.ClassificationModelAdam, SyntheticDataset):
  """An 8-layer MLP, 1024 wide, on 8 devices."""

  NUM_LAYER = 8
  INPUT_DIM = 1024
  OUTPUT_DIM = 1024
  HIDDEN_DIM = 1024
  MESH_SHAPE = [8, 1, 1]
  MLP_WEIGHT_SHARDING = [-1, -1]
  SOFTMAX_WEIGHT_SHARDING = [-1, -1]


# -- Data parallel (Pax's pmap configs; here an SPMD mesh with every device on `data`). ---------


@experiment_registry.register
class LmCloudTransformerAdam(model_params.TransformerLmPmapAdam, SyntheticDataset):
  """32-layer, 1024-wide Transformer LM with Adam, pure data parallel.

  ./bazelw run //paxml:main -- --exp=lm_cloud.LmCloudTransformerAdam --job_log_dir=DIR
  """

  NUM_LAYERS = 32
  VOCAB_SIZE = 32000
  NUM_HEADS = 16
  MODEL_DIMS = 1024
  HIDDEN_DIMS = MODEL_DIMS * 4
  DROPOUT_PROB = 0.0
  LEARNING_RATE = 1e-3

  def task(self) -> pax_fiddle.Config:
    task_p = super().task()
    task_p.train.learner.repeat_prefix_sep = "_"
    return task_p


@experiment_registry.register
class LmCloudTransformerAdamTest(LmCloudTransformerAdam):
  """LmCloudTransformerAdam with 2 layers."""

  NUM_LAYERS = 2


@experiment_registry.register
class LmCloudTransformerAdamLimitSteps(LmCloudTransformerAdam):
  """LmCloudTransformerAdam with 10 layers for 2000 steps (the README's data-parallel example)."""

  NUM_LAYERS = 10

  def task(self) -> pax_fiddle.Config:
    task_p = super().task()
    task_p.train.num_train_steps = 2000
    return task_p


# -- SPMD. -----------------------------------------------------------------------------------------


class LmCloudSpmd(model_params.TransformerLmSpmdAdafactor, SyntheticDataset):
  """Base of the SPMD family: 10 x 2048, GELU, one scanned layer remat'd with SAVE_NOTHING,
  Adam (set_default_adam)."""

  NUM_LAYERS = 10
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  ACTIVATION_CLS = layers.GELU
  USE_GATED_ACTIVATION = False
  USE_REPEATED_LAYER = True
  CHECKPOINT_POLICY = _SAVE_NOTHING

  def task(self) -> pax_fiddle.Config:
    task_p = super().task()
    model_params.set_default_adam(task_p, self.LEARNING_RATE, self.WEIGHT_DECAY)
    task_p.train.learner.repeat_prefix_sep = "_"
    return task_p


@experiment_registry.register
class LmCloudSpmdTest(LmCloudSpmd):
  """2 x 64 for a CPU smoke run on one device (global batch 4 x 1024 tokens).

    ./bazelw run //paxml:main -- --exp=tasks.lm.params.lm_cloud.LmCloudSpmdTest --job_log_dir=DIR

  Like Pax's, it trains "forever" (1e7 steps): stop it, or shorten it with a subclass.
  """

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 2
  MODEL_DIMS = 64
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = 8
  CHECKPOINT_POLICY = _SAVE_NOTHING
  ICI_MESH_SHAPE = [1, 1, 1]


@experiment_registry.register
class LmCloudSpmd2B(LmCloudSpmd):
  """2.1B parameters (18 x 3072, 24 heads of 128) on 4 devices, FSDP over `data`.

  Global batch 8 x 4 = 32 sequences of 1024 (Pax's docstring says 128; that is stale).
  """

  PERCORE_BATCH_SIZE = 8
  NUM_LAYERS = 18
  MODEL_DIMS = 3072
  HIDDEN_DIMS = MODEL_DIMS * 4
  CHECKPOINT_POLICY = _SAVE_NOTHING
  ICI_MESH_SHAPE = [1, 4, 1]


@experiment_registry.register
class LmCloudSpmd2BLimitSteps(LmCloudSpmd2B):
  """LmCloudSpmd2B for 300 steps (the README's quick start; it never leaves LR warm-up)."""

  def task(self) -> pax_fiddle.Config:
    task_p = super().task()
    task_p.train.num_train_steps = 300
    return task_p


def _spmd(name: str, percore: int, layers_: int, dims: int, policy, mesh: list[int]) -> type:
  """One registered LmCloudSpmd size (Pax writes each out; the values below are Pax's)."""
  fields = dict(
    PERCORE_BATCH_SIZE=percore,
    NUM_LAYERS=layers_,
    MODEL_DIMS=dims,
    HIDDEN_DIMS=dims * 4,
    CHECKPOINT_POLICY=policy,
    ICI_MESH_SHAPE=mesh,
    __doc__=f"SPMD LM, {layers_} x {dims}, on {math.prod(mesh)} devices.",
    __module__=__name__,
  )
  return experiment_registry.register(type(name, (LmCloudSpmd,), fields))


LmCloudSpmd32B = _spmd("LmCloudSpmd32B", 8, 40, 8192, _SAVE_CONTEXT_AND_OUT_PROJ, [1, 16, 4])
LmCloudSpmd64B = _spmd("LmCloudSpmd64B", 4, 51, 10240, _SAVE_CONTEXT_AND_OUT_PROJ, [1, 16, 8])
LmCloudSpmd128B = _spmd("LmCloudSpmd128B", 4, 71, 12288, _SAVE_NOTHING, [1, 64, 4])
LmCloudSpmd256B = _spmd("LmCloudSpmd256B", 4, 80, 16384, _SAVE_NOTHING, [1, 64, 8])
LmCloudSpmd512B = _spmd("LmCloudSpmd512B", 4, 102, 20480, _SAVE_NOTHING, [1, 64, 16])
LmCloudSpmd1024B = _spmd("LmCloudSpmd1024B", 2, 142, 24576, _SAVE_NOTHING, [1, 256, 8])


class LmCloudSpmdPipeline(model_params.TransformerLmSpmdPipelineAdafactor, SyntheticDataset):
  """Base of the pipelined family: 10 x 2048, GELU, SAVE_NOTHING remat, Adam."""

  NUM_LAYERS = 10
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  ACTIVATION_CLS = layers.GELU
  USE_GATED_ACTIVATION = False
  CHECKPOINT_POLICY = _SAVE_NOTHING
  MICROBATCH_SIZE = None
  NUM_STAGES = None

  def task(self) -> pax_fiddle.Config:
    task_p = super().task()
    model_params.set_default_adam(task_p, self.LEARNING_RATE, self.WEIGHT_DECAY)
    return task_p


@experiment_registry.register
class LmCloudSpmdPipeline9B(LmCloudSpmdPipeline):
  """9B: 48 x 4096 in 16 stages of 3 layers, 4-way data parallel (64 devices), float32.

  Global batch 8 x 64 = 512 sequences, in microbatches of 4.
  """

  MICROBATCH_SIZE = 4
  PERCORE_BATCH_SIZE = 8
  NUM_STAGES = 16
  NUM_LAYERS = 48
  MODEL_DIMS = 4096
  HIDDEN_DIMS = MODEL_DIMS * 4
  FPROP_DTYPE = jnp.float32
  CHECKPOINT_POLICY = _SAVE_NOTHING
  ICI_MESH_SHAPE = [16, 4, 1, 1]


@experiment_registry.register
class LmCloudSpmdPipeline175B(LmCloudSpmdPipeline):
  """175B (GPT-3 sizes: 96 x 12288, 96 heads of 128, 2048 tokens) in 8 stages over DCN, each
  stage 16-way tensor parallel (8 hosts x 16 GPUs). Global batch 0.75 x 128 = 96 sequences.
  """

  MICROBATCH_SIZE = 2
  PERCORE_BATCH_SIZE = 0.75
  NUM_STAGES = 8
  NUM_LAYERS = 96
  MODEL_DIMS = 12288
  NUM_HEADS = 96
  DIMS_PER_HEAD = 128
  MAX_SEQ_LEN = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  FPROP_DTYPE = jnp.bfloat16
  CHECKPOINT_POLICY = _SAVE_NOTHING
  ICI_MESH_SHAPE = [1, 1, 1, 16]
  DCN_MESH_SHAPE = [8, 1, 1, 1]


@experiment_registry.register
class LmCloudSpmdMultislice2B(LmCloudSpmd):
  """LmCloudSpmd2B's sizes on 2 slices of 4: replicas over DCN, data parallel within a slice.

  Global batch 16 x 8 = 128 sequences.
  """

  PERCORE_BATCH_SIZE = 16
  NUM_LAYERS = 18
  MODEL_DIMS = 3072
  HIDDEN_DIMS = MODEL_DIMS * 4
  CHECKPOINT_POLICY = _SAVE_NOTHING
  ICI_MESH_SHAPE = [1, 4, 1]
  DCN_MESH_SHAPE = [2, 1, 1]


@experiment_registry.register
class LmCloudSpmdPipelineMultislice2B(LmCloudSpmdPipeline):
  """2B (18 x 3072) in 2 stages, one per slice over DCN, 4 replicas within a slice.

  Global batch 16 x 8 = 128 sequences, in microbatches of 4.
  """

  MICROBATCH_SIZE = 4
  PERCORE_BATCH_SIZE = 16
  NUM_STAGES = 2
  NUM_LAYERS = 18
  MODEL_DIMS = 3072
  HIDDEN_DIMS = MODEL_DIMS * 4
  CHECKPOINT_POLICY = _SAVE_NOTHING
  ICI_MESH_SHAPE = [1, 4, 1, 1]
  DCN_MESH_SHAPE = [2, 1, 1, 1]
  EMB_W_DATA_DIMS = ("replica", "data")
  STREAM_IO = True


@experiment_registry.register
class LmCloudSpmdPipelineMultislice2BCircular(LmCloudSpmdPipelineMultislice2B):
  """LmCloudSpmdPipelineMultislice2B with 3 circular passes (3 layers per stage and pass)."""

  MICROBATCH_SIZE = 8
  CIRCULAR_REPEAT = 3
