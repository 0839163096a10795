"""The settings Pax's LM experiments apply to a task config: heads, sharding, optimizers.

Pax keeps these in `paxml.tasks.lm.model_params`, which re-exports every one of them under its
Pax name (`model_params.set_default_adam(task_p, lr, wd)` works as in Pax); the base
experiment classes that call them are there.

  num_heads, dims_per_head          N and H from NUM_HEADS / DIMS_PER_HEAD / MODEL_DIMS
  set_sharding_annotations_v1       the mesh on the model config, the batch split
  set_default_adam                  lm_cloud's Adam (beta2 0.99, clip 5, warm-up 4000)
  set_default_adafactor             ShardedAdafactor with Adam-style decay
  set_adam_and_learning_rate_schedule   c4's Adam and LR_SCHEDULE from the experiment's fields
  maybe_setup_moe_params            Pax's MoE switch (dense stacks only here)
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import fiddle as fdl
import jax

from praxis import layers
from praxis import optimizers
from praxis import pax_fiddle
from praxis import pytypes
from praxis import schedules

NestedMap = pytypes.NestedMap


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
  replicated). An LM class that defines its own `set_sharding_params_v1` gets it called as in
  Pax; TransformerLm's (praxis/layers/transformer_sharding.py) is not called here, since it
  writes the same placements as per-layer mesh mappings and sets `mesh_axis_names`.
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
  library_setter = layers.TransformerLm.set_sharding_params_v1.__func__
  if setter is not None and getattr(setter, "__func__", setter) is not library_setter:
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
