"""Shared pieces of the language-model experiments: one base class and the functions it calls.

`TransformerLmSpmdAdam` holds Pax's defaults (`TransformerLmSpmdAdafactor` followed by
`set_default_adam`, which is what every `LmCloudSpmd*` and `C4Spmd*` experiment ends up with) as
UPPERCASE class fields. A registered experiment subclasses it and states only what differs; its
`task()` and `datasets()` come from here. The building is done by plain functions, so a test or
a notebook can call them with other values:

  language_model(exp)        the Transformer LM the fields describe
  synthetic_datasets(...)    Pax's `SyntheticDataset` (constant ids) for train and eval
  num_heads(exp)             heads from NUM_HEADS / DIMS_PER_HEAD, as Pax derives them

Pax's chains (LmCloudSpmd2B -> LmCloudSpmd -> TransformerLmSpmdAdafactor + SyntheticDataset ->
BaseExperiment) become: variant -> family (LmCloudSpmd) -> this base; mixins are functions.
"""

from __future__ import annotations

from typing import Any

import fiddle as fdl
import jax

from paxml import base_experiment
from paxml import tasks_lib
from paxml.data import synthetic
from praxis import transformer_lm
from praxis.layers import activations


def num_heads(exp: Any) -> int:
  """N as Pax derives it: NUM_HEADS if set (then N * DIMS_PER_HEAD must be MODEL_DIMS), else
  MODEL_DIMS / DIMS_PER_HEAD."""
  if exp.DIMS_PER_HEAD is None:
    if exp.NUM_HEADS is None:
      raise ValueError(f"{type(exp).__name__}: set NUM_HEADS or DIMS_PER_HEAD")
    return exp.NUM_HEADS
  if exp.NUM_HEADS is None:
    if exp.MODEL_DIMS % exp.DIMS_PER_HEAD:
      raise ValueError(f"{type(exp).__name__}: DIMS_PER_HEAD={exp.DIMS_PER_HEAD} does not "
                       f"divide MODEL_DIMS={exp.MODEL_DIMS}; change one of them")
    return exp.MODEL_DIMS // exp.DIMS_PER_HEAD
  if exp.NUM_HEADS * exp.DIMS_PER_HEAD != exp.MODEL_DIMS:
    raise ValueError(f"{type(exp).__name__}: NUM_HEADS * DIMS_PER_HEAD = {exp.NUM_HEADS} * "
                     f"{exp.DIMS_PER_HEAD} must equal MODEL_DIMS={exp.MODEL_DIMS}")
  return exp.NUM_HEADS


def dims_per_head(exp: Any) -> int:
  """H: DIMS_PER_HEAD, or MODEL_DIMS / heads when it is None (Pax's pmap configs)."""
  return exp.DIMS_PER_HEAD or exp.MODEL_DIMS // num_heads(exp)


def language_model(exp: Any) -> transformer_lm.LmModel:
  """The model of Pax's `TransformerLmSpmdAdafactor.task()`, from the fields of `exp`.

  Built on `praxis.transformer_lm` until praxis.layers' TransformerLm / StackedTransformerRepeated
  land: pre-LayerNorm blocks (LayerNorms with scale and bias), separate Q/K/V/output projections
  without biases (Pax's combined QKV has the same weights, stacked), a biased GELU MLP, a final
  LayerNorm, a tied embedding scaled by sqrt(D) on lookup, sinusoidal positions. Fields honoured:
  VOCAB_SIZE, MODEL_DIMS, NUM_LAYERS, NUM_HEADS/DIMS_PER_HEAD, HIDDEN_DIMS, MAX_SEQ_LEN,
  DROPOUT_PROB. Not yet: FPROP_DTYPE (activations stay float32), USE_REPEATED_LAYER and
  CHECKPOINT_POLICY (layers are unrolled, no remat), ACTIVATION_CLS (always GELU), the logit
  caps and the softmax bias; `validate()` lists the ones a configuration sets differently.
  """
  heads = num_heads(exp)
  if dims_per_head(exp) * heads != exp.MODEL_DIMS:
    raise ValueError(f"{type(exp).__name__}: heads x dims per head = {heads} x "
                     f"{dims_per_head(exp)} must equal MODEL_DIMS={exp.MODEL_DIMS}")
  return transformer_lm.LmModel(lm=transformer_lm.TransformerLm(
      vocab_size=exp.VOCAB_SIZE,
      model_dims=exp.MODEL_DIMS,
      num_layers=exp.NUM_LAYERS,
      num_heads=heads,
      hidden_dims=exp.HIDDEN_DIMS,
      max_seq_len=exp.MAX_SEQ_LEN,
      position_embedding=transformer_lm.PositionEmbedding.SINUSOIDAL,
      dropout_rate=exp.DROPOUT_PROB,
  ))


def synthetic_datasets(percore_batch_size: float, seq_len: int) -> list[fdl.Config]:
  """Pax's `SyntheticDataset`: constant rows of ones, `percore_batch_size` x local devices rows
  per host, for training and (a copy) for eval."""
  batch_size = round(percore_batch_size * jax.local_device_count())
  if batch_size < 1:
    raise ValueError(f"PERCORE_BATCH_SIZE={percore_batch_size} x {jax.local_device_count()} "
                     "local devices rounds to no rows; raise PERCORE_BATCH_SIZE")
  common = dict(batch_size=batch_size, seq_len=seq_len,
                num_infeed_hosts=jax.process_count(), infeed_host_index=jax.process_index())
  return [fdl.Config(synthetic.SyntheticLmData, is_training=True, name="train", **common),
          fdl.Config(synthetic.SyntheticLmData, is_training=False, name="synthetic", **common)]


class TransformerLmSpmdAdam(base_experiment.BaseExperiment):
  """Pax's `TransformerLmSpmdAdafactor` defaults with `set_default_adam`, on synthetic data.

  Subclasses override fields; `task()` and `datasets()` read them. `not_applied()` lists the
  Pax fields this build does not honour yet (validate_config prints them).
  """

  # Architecture.
  NUM_LAYERS = 10
  VOCAB_SIZE = 32000
  DIMS_PER_HEAD = 128
  NUM_HEADS = None  # None: MODEL_DIMS / DIMS_PER_HEAD.
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  FPROP_DTYPE = "bfloat16"
  PACKED_INPUT = True
  ACTIVATION_CLS = activations.ReLU
  USE_GATED_ACTIVATION = False
  SOFTMAX_CAP_LOGITS = 30.0
  ATTEN_LOGIT_CAP = 50.0
  DROPOUT_PROB = 0.0
  USE_REPEATED_LAYER = False
  CHECKPOINT_POLICY = "SAVE_NOTHING"  # Pax's AutodiffCheckpointType name.

  # Optimizer: Pax's set_default_adam. Adam(0.9, 0.99), decoupled weight decay, global-norm
  # clipping at 5, linear warm-up over 4000 steps then exponential decay to 0.1x at DECAY_END.
  LEARNING_RATE = 2.5e-4
  ADAM_BETA1 = 0.9
  ADAM_BETA2 = 0.99
  ADAM_EPSILON = 1e-6
  WEIGHT_DECAY = 1e-3
  CLIP_GRADIENT_NORM_TO_VALUE = 5.0
  WARMUP_STEPS = 4000
  DECAY_END = 300_000  # set_default_adam's; Pax's DECAY_END=100000 is Adafactor's.

  # Input.
  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024

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

  def task(self) -> tasks_lib.TaskConfig:
    return tasks_lib.TaskConfig(
        model=language_model(self),
        learning_rate=self.LEARNING_RATE,
        warmup_steps=self.WARMUP_STEPS,
        num_train_steps=self.NUM_TRAIN_STEPS,
        clip_gradient_norm_to_value=self.CLIP_GRADIENT_NORM_TO_VALUE,
        ici_mesh_shape=self.ICI_MESH_SHAPE,
        dcn_mesh_shape=self.DCN_MESH_SHAPE,
        save_interval_steps=self.CHECKPOINT_EVERY_N_STEPS,
        save_max_to_keep=self.CHECKPOINT_MAX_TO_KEEP,
        summary_interval_steps=self.SUMMARY_INTERVAL_STEPS,
        eval_interval_steps=self.EVAL_INTERVAL_STEPS,
    )

  def not_applied(self) -> list[str]:
    """Pax fields whose values this build cannot honour yet (see `language_model`)."""
    gaps = []
    if self.FPROP_DTYPE != "float32":
      gaps.append(f"FPROP_DTYPE={self.FPROP_DTYPE} (activations run in float32)")
    if self.USE_REPEATED_LAYER:
      gaps.append(f"USE_REPEATED_LAYER with CHECKPOINT_POLICY={self.CHECKPOINT_POLICY} "
                  "(layers are unrolled, no remat)")
    if self.ACTIVATION_CLS is not activations.GELU or self.USE_GATED_ACTIVATION:
      gaps.append(f"ACTIVATION_CLS={self.ACTIVATION_CLS.__name__} (the MLP uses GELU)")
    if self.SOFTMAX_CAP_LOGITS or self.ATTEN_LOGIT_CAP:
      gaps.append("SOFTMAX_CAP_LOGITS / ATTEN_LOGIT_CAP (no logit caps)")
    gaps.append(f"ADAM_BETA2={self.ADAM_BETA2}, WEIGHT_DECAY={self.WEIGHT_DECAY}, decay to "
                f"0.1x at {self.DECAY_END} (the trainer's Adam: beta2 0.999, no weight "
                "decay, constant after warm-up)")
    return gaps
