"""Pax's lm_cloud experiments: decoder-only LMs on synthetic data, Pax's names and values.

Every experiment here reads Pax's constant synthetic batches (all ids 1), so the loss falls to 0
quickly: they measure speed and check that a configuration builds, shards and fits, they do not
learn language. Family bases (not registered): `LmCloudSpmd` (SPMD, repeated layers, GELU) and
`LmCloudTransformerAdam` is both a base and registered (Pax's pmap family). Each variant states
what differs from its family; everything else is `model_params.TransformerLmSpmdAdam`.

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

from paxml import experiment_registry
from paxml.tasks.lm import model_params
from praxis.layers import activations

# Pax's AutodiffCheckpointType names (what the backward pass keeps instead of recomputing).
_SAVE_NOTHING = "SAVE_NOTHING"
_SAVE_CONTEXT_AND_OUT_PROJ = "SAVE_CONTEXT_AND_OUT_PROJ"


# -- Data parallel (Pax's pmap configs; here an SPMD mesh with every device on `data`). ---------


@experiment_registry.register
class LmCloudTransformerAdam(model_params.TransformerLmSpmdAdam):
  """32-layer, 1024-wide Transformer LM with Adam, pure data parallel (Pax's pmap family).

  ./bazelw run //paxml:main -- --exp=lm_cloud.LmCloudTransformerAdam --job_log_dir=DIR
  """

  NUM_LAYERS = 32
  NUM_HEADS = 16
  DIMS_PER_HEAD = None  # 1024 / 16 = 64.
  MODEL_DIMS = 1024
  HIDDEN_DIMS = MODEL_DIMS * 4
  LEARNING_RATE = 1e-3
  # Pax's TransformerLmPmapAdam differs from the SPMD base in these:
  FPROP_DTYPE = "float32"  # No bf16 activations.
  SOFTMAX_CAP_LOGITS = 0.0  # No logit cap on the softmax.
  ICI_MESH_SHAPE = None  # Every device on `data`: pure data parallelism (weights FSDP-sharded).


@experiment_registry.register
class LmCloudTransformerAdamTest(LmCloudTransformerAdam):
  """LmCloudTransformerAdam with 2 layers.

  ./bazelw run //paxml:main -- --exp=lm_cloud.LmCloudTransformerAdamTest --job_log_dir=DIR
  """

  NUM_LAYERS = 2


@experiment_registry.register
class LmCloudTransformerAdamLimitSteps(LmCloudTransformerAdam):
  """LmCloudTransformerAdam with 10 layers for 2000 steps (the README's data-parallel example).

  ./bazelw run //paxml:main -- --exp=lm_cloud.LmCloudTransformerAdamLimitSteps --job_log_dir=DIR
  """

  NUM_LAYERS = 10
  NUM_TRAIN_STEPS = 2000


# -- SPMD. -----------------------------------------------------------------------------------------


class LmCloudSpmd(model_params.TransformerLmSpmdAdam):
  """Base of the SPMD family: 10 x 2048, GELU, one scanned layer remat'd with SAVE_NOTHING."""

  NUM_LAYERS = 10
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  ACTIVATION_CLS = activations.GELU
  USE_GATED_ACTIVATION = False
  USE_REPEATED_LAYER = True
  CHECKPOINT_POLICY = _SAVE_NOTHING


@experiment_registry.register
class LmCloudSpmdTest(LmCloudSpmd):
  """2 x 64 for a CPU smoke run on one device (global batch 4 x 1024 tokens).

    ./bazelw run //paxml:main -- --exp=tasks.lm.params.lm_cloud.LmCloudSpmdTest --job_log_dir=DIR

  Pax trains it "forever" (1e7 steps); here it stops after 20 steps, with checkpoints every 10,
  so the command finishes on a laptop and a second run shows the resume.
  """

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 2
  MODEL_DIMS = 64
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = 8
  ICI_MESH_SHAPE = [1, 1, 1]
  NUM_TRAIN_STEPS = 20
  CHECKPOINT_EVERY_N_STEPS = 10
  SUMMARY_INTERVAL_STEPS = 5
  EVAL_INTERVAL_STEPS = 10


@experiment_registry.register
class LmCloudSpmd2B(LmCloudSpmd):
  """2.1B parameters (18 x 3072, 24 heads of 128) on 4 devices, FSDP over `data`.

    ./bazelw run //paxml:main -- --exp=lm_cloud.LmCloudSpmd2B --job_log_dir=DIR

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
  """LmCloudSpmd2B for 300 steps (the README's quick start; it never leaves LR warm-up).

  ./bazelw run //paxml:main -- --exp=lm_cloud.LmCloudSpmd2BLimitSteps --job_log_dir=DIR
  """

  NUM_TRAIN_STEPS = 300


@experiment_registry.register
class LmCloudSpmd32B(LmCloudSpmd):
  """32B: 40 x 8192 on 64 devices.

  ./bazelw run //paxml:main -- --exp=lm_cloud.LmCloudSpmd32B --job_log_dir=DIR
  """

  PERCORE_BATCH_SIZE = 8
  NUM_LAYERS = 40
  MODEL_DIMS = 8192
  HIDDEN_DIMS = MODEL_DIMS * 4
  CHECKPOINT_POLICY = _SAVE_CONTEXT_AND_OUT_PROJ
  ICI_MESH_SHAPE = [1, 16, 4]


@experiment_registry.register
class LmCloudSpmd64B(LmCloudSpmd):
  """64B: 51 x 10240 on 128 devices.

  ./bazelw run //paxml:main -- --exp=lm_cloud.LmCloudSpmd64B --job_log_dir=DIR
  """

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 51
  MODEL_DIMS = 10240
  HIDDEN_DIMS = MODEL_DIMS * 4
  CHECKPOINT_POLICY = _SAVE_CONTEXT_AND_OUT_PROJ
  ICI_MESH_SHAPE = [1, 16, 8]


@experiment_registry.register
class LmCloudSpmd128B(LmCloudSpmd):
  """128B: 71 x 12288 on 256 devices.

  ./bazelw run //paxml:main -- --exp=lm_cloud.LmCloudSpmd128B --job_log_dir=DIR
  """

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 71
  MODEL_DIMS = 12288
  HIDDEN_DIMS = MODEL_DIMS * 4
  CHECKPOINT_POLICY = _SAVE_NOTHING
  ICI_MESH_SHAPE = [1, 64, 4]


@experiment_registry.register
class LmCloudSpmd256B(LmCloudSpmd):
  """256B: 80 x 16384 on 512 devices.

  ./bazelw run //paxml:main -- --exp=lm_cloud.LmCloudSpmd256B --job_log_dir=DIR
  """

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 80
  MODEL_DIMS = 16384
  HIDDEN_DIMS = MODEL_DIMS * 4
  CHECKPOINT_POLICY = _SAVE_NOTHING
  ICI_MESH_SHAPE = [1, 64, 8]


@experiment_registry.register
class LmCloudSpmd512B(LmCloudSpmd):
  """512B: 102 x 20480 on 1024 devices.

  ./bazelw run //paxml:main -- --exp=lm_cloud.LmCloudSpmd512B --job_log_dir=DIR
  """

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 102
  MODEL_DIMS = 20480
  HIDDEN_DIMS = MODEL_DIMS * 4
  CHECKPOINT_POLICY = _SAVE_NOTHING
  ICI_MESH_SHAPE = [1, 64, 16]


@experiment_registry.register
class LmCloudSpmd1024B(LmCloudSpmd):
  """1024B: 142 x 24576 on 2048 devices.

  ./bazelw run //paxml:main -- --exp=lm_cloud.LmCloudSpmd1024B --job_log_dir=DIR
  """

  PERCORE_BATCH_SIZE = 2
  NUM_LAYERS = 142
  MODEL_DIMS = 24576
  HIDDEN_DIMS = MODEL_DIMS * 4
  CHECKPOINT_POLICY = _SAVE_NOTHING
  ICI_MESH_SHAPE = [1, 256, 8]


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


class LmCloudSpmdPipeline(model_params.TransformerLmSpmdPipelineAdam):
  """Base of the pipelined family: 10 x 2048, GELU, SAVE_NOTHING remat of each iteration."""

  NUM_LAYERS = 10
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  ACTIVATION_CLS = activations.GELU
  USE_GATED_ACTIVATION = False
  CHECKPOINT_POLICY = _SAVE_NOTHING


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
  FPROP_DTYPE = "float32"
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
  FPROP_DTYPE = "bfloat16"
  ICI_MESH_SHAPE = [1, 1, 1, 16]
  DCN_MESH_SHAPE = [8, 1, 1, 1]


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
  ICI_MESH_SHAPE = [1, 4, 1, 1]
  DCN_MESH_SHAPE = [2, 1, 1, 1]
  EMB_W_DATA_DIMS = ("replica", "data")
  STREAM_IO = True


@experiment_registry.register
class LmCloudSpmdPipelineMultislice2BCircular(LmCloudSpmdPipelineMultislice2B):
  """LmCloudSpmdPipelineMultislice2B with 3 circular passes (3 layers per stage and pass)."""

  MICROBATCH_SIZE = 8
  CIRCULAR_REPEAT = 3
