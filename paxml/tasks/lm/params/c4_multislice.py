"""Pax's c4_multislice experiments: C4 GPT models over several slices (DCN_MESH_SHAPE).

Names, classes and values are Pax's (18 registered). A slice is one ICI mesh; DCN_MESH_SHAPE
[n, 1, 1] puts n slices on the `replica` axis (data parallel across slices), so the global
batch is PERCORE_BATCH_SIZE x devices of all slices. `C4Spmd22BAdam...` sizes: "1xv4_128" is
one TPU v4-128 slice (64 chips), "2x" two of them, and so on. Data: c4.py's module docstring.

  ./bazelw run //paxml:main -- --exp=tasks.lm.params.c4_multislice.C4Spmd22BAdam2xv4_8 \\
      --tfds_data_dir=DIR --job_log_dir=DIR

  family               layers  dims  heads x dims  per-core  ICI mesh     DCN sets
  C4Spmd22BAdam*v4_128  48      6144  24 x 256      16        [1, 64, 1]   1x, 2x, 4x
  C4Spmd22BAdam*v4_384  24      9216  24 x 384      10        [1, 192, 1]  1x, 2x
  C4Spmd22BAdam*v4_8    16      2048  8 x 256       16        [1, 4, 1]    1x, 2x, 4x
  C4Spmd32BAdam*v5_256  40      8192  32 x 256      2         [1, 128, 1]  1x, 2x
"""

from jax import numpy as jnp

from paxml import experiment_registry
from paxml.tasks.lm.params import c4
from praxis import layers
from praxis import pax_fiddle

_SAVE_NOTHING = layers.AutodiffCheckpointType.SAVE_NOTHING


def _limit_steps(base: type, name: str) -> type:
  """`base` for 300 steps (Pax's ...LimitSteps variants)."""

  def task(self) -> pax_fiddle.Config:
    task_p = super(cls, self).task()
    task_p.train.num_train_steps = 300
    return task_p

  cls = type(
    name,
    (base,),
    {"task": task, "__doc__": f"{base.__name__} for 300 steps.", "__module__": __name__},
  )
  return experiment_registry.register(cls)


def _slices(base: type, name: str, dcn: list[int], **fields) -> type:
  """`base` on `dcn[0]` slices (and the fields that differ)."""
  doc = f"{base.__name__} on {dcn[0]} slices (DCN_MESH_SHAPE={dcn})."
  attrs = {"DCN_MESH_SHAPE": dcn, "__doc__": doc, "__module__": __name__, **fields}
  return experiment_registry.register(type(name, (base,), attrs))


@experiment_registry.register
class C4Spmd22BAdamMaxText(c4.C4SpmdAdam):
  """22B (48 x 6144, 24 heads of 256), MaxText's comparison point; global batch 16 x devices."""

  NUM_LAYERS = 48
  MODEL_DIMS = 6144
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 24
  DIMS_PER_HEAD = 256
  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024
  VOCAB_SIZE = 32768
  FPROP_DTYPE = jnp.bfloat16
  USE_REPEATED_LAYER = True
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_POLICY = _SAVE_NOTHING


@experiment_registry.register
class C4Spmd22BAdam1xv4_128(C4Spmd22BAdamMaxText):  # noqa: N801 (Pax's name)
  """22B on one v4-128 slice (64 devices, FSDP over `data`); global batch 1024."""

  ICI_MESH_SHAPE = [1, 64, 1]
  PERCORE_BATCH_SIZE = 16
  CHECKPOINT_POLICY = _SAVE_NOTHING


C4Spmd22BAdam2xv4_128 = _slices(C4Spmd22BAdam1xv4_128, "C4Spmd22BAdam2xv4_128", [2, 1, 1])
C4Spmd22BAdam4xv4_128 = _slices(C4Spmd22BAdam1xv4_128, "C4Spmd22BAdam4xv4_128", [4, 1, 1])
C4Spmd22BAdam1xv4_128LimitSteps = _limit_steps(
  C4Spmd22BAdam1xv4_128, "C4Spmd22BAdam1xv4_128LimitSteps"
)
C4Spmd22BAdam2xv4_128LimitSteps = _limit_steps(
  C4Spmd22BAdam2xv4_128, "C4Spmd22BAdam2xv4_128LimitSteps"
)
C4Spmd22BAdam4xv4_128LimitSteps = _limit_steps(
  C4Spmd22BAdam4xv4_128, "C4Spmd22BAdam4xv4_128LimitSteps"
)


@experiment_registry.register
class C4Spmd22BAdam1xv4_384(C4Spmd22BAdamMaxText):  # noqa: N801 (Pax's name)
  """24 x 9216 (24 heads of 384) on one v4-384 slice (192 devices); global batch 1920."""

  NUM_LAYERS = 24
  MODEL_DIMS = 9216
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 24
  DIMS_PER_HEAD = 384
  PERCORE_BATCH_SIZE = 10
  ICI_MESH_SHAPE = [1, 192, 1]


C4Spmd22BAdam2xv4_384 = _slices(
  C4Spmd22BAdam1xv4_384, "C4Spmd22BAdam2xv4_384", [2, 1, 1], CHECKPOINT_POLICY=_SAVE_NOTHING
)


@experiment_registry.register
class C4Spmd22BAdam1xv4_8(C4Spmd22BAdamMaxText):  # noqa: N801 (Pax's name)
  """16 x 2048 (8 heads of 256) on one v4-8 slice (4 devices); global batch 64."""

  NUM_LAYERS = 16
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 8
  DIMS_PER_HEAD = 256
  ICI_MESH_SHAPE = [1, 4, 1]
  PERCORE_BATCH_SIZE = 16
  CHECKPOINT_POLICY = _SAVE_NOTHING


C4Spmd22BAdam2xv4_8 = _slices(C4Spmd22BAdam1xv4_8, "C4Spmd22BAdam2xv4_8", [2, 1, 1])
C4Spmd22BAdam4xv4_8 = _slices(C4Spmd22BAdam1xv4_8, "C4Spmd22BAdam4xv4_8", [4, 1, 1])
C4Spmd22BAdam1xv4_8LimitSteps = _limit_steps(C4Spmd22BAdam1xv4_8, "C4Spmd22BAdam1xv4_8LimitSteps")
C4Spmd22BAdam2xv4_8LimitSteps = _limit_steps(C4Spmd22BAdam2xv4_8, "C4Spmd22BAdam2xv4_8LimitSteps")
C4Spmd22BAdam4xv4_8LimitSteps = _limit_steps(C4Spmd22BAdam4xv4_8, "C4Spmd22BAdam4xv4_8LimitSteps")


@experiment_registry.register
class C4SpmdGpt3AdamDataParallel2x16x16(c4.C4SpmdGpt3AdamOrgHP):
  """GPT-3 data parallel across 2 slices of 16 x 16 (512 devices), bfloat16, 100 steps."""

  PERCORE_BATCH_SIZE = 0.5
  ICI_MESH_SHAPE = [1, 16, 16]
  DCN_MESH_SHAPE = [2, 1, 1]
  FPROP_DTYPE = jnp.bfloat16
  CHECKPOINT_EVERY_N_STEPS = 2000
  # Pax's name; the base reads CHECKPOINT_MAX_TO_KEEP, so this changes nothing, as in Pax.
  CHECKPOINT_SAVE_MAX_TO_KEEP = 20

  def task(self) -> pax_fiddle.Config:
    task_p = super().task()
    task_p.train.num_train_steps = 100
    task_p.summary_verbosity = 0
    return task_p


@experiment_registry.register
class C4Spmd32BAdam1xv5_256(C4Spmd22BAdam1xv4_128):  # noqa: N801 (Pax's name)
  """32B (40 x 8192, 32 heads of 256, 2048 tokens) on one v5-256 slice (128 devices)."""

  NUM_LAYERS = 40
  MODEL_DIMS = 8192
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 32
  DIMS_PER_HEAD = 256
  PERCORE_BATCH_SIZE = 2
  MAX_SEQ_LEN = 2048
  ICI_MESH_SHAPE = [1, 128, 1]


C4Spmd32BAdam2xv5_256 = _slices(C4Spmd32BAdam1xv5_256, "C4Spmd32BAdam2xv5_256", [2, 1, 1])
