"""The one tiny language model the tests train (seconds on one CPU core).

`tiny_language_model()`: a praxis LanguageModel (`model_params.small_language_model`: one layer,
32 wide, 16 tokens). `TinyLm`: the experiment that trains it on arithmetic progressions
(`model_params.ProgressionLm`, the demo's SyntheticDemoLm's body too) with the task's Adam
shorthand. Tests subclass TinyLm and change the UPPERCASE fields; it sets every size and loop
field itself, so the tests do not depend on what the demo experiment trains.
"""

import copy

from paxml import experiment_registry
from paxml.tasks.lm import model_params
from praxis.layers import models


def tiny_language_model(
  *,
  vocab_size: int = 16,
  model_dims: int = 32,
  num_layers: int = 1,
  num_heads: int = 2,
  hidden_dims: int = 64,
  decode_seqlen: int = 16,
  z_loss_weight: float = 0.0,
) -> models.LanguageModel:
  """TinyLm's model; `z_loss_weight` > 0 adds the softmax's z-loss as an aux loss."""
  model = model_params.small_language_model(
    vocab_size=vocab_size,
    model_dims=model_dims,
    num_layers=num_layers,
    num_heads=num_heads,
    hidden_dims=hidden_dims,
    decode_seqlen=decode_seqlen,
  )
  if z_loss_weight:
    lm = copy.deepcopy(model.lm_tpl)
    lm.softmax_tpl.z_loss_weight = z_loss_weight
    model = model.clone(lm_tpl=lm)
  return model


# Registered, so the docs' commands can be smoke-tested with it: --exp=testing.tiny_lm.TinyLm.
@experiment_registry.register
class TinyLm(model_params.ProgressionLm):
  """One layer x 32 on progressions over 16 tokens; 20 steps of Adam."""

  VOCAB_SIZE = 16
  SEQ_LEN = 16
  BATCH_SIZE = 8
  MAX_STRIDE = 2
  INPUT_SEED = 1  # Fixed: the tests compare losses between runs.
  EVAL_SEED = 1000
  DECODE_PREFIX_LEN = 2  # Prompts are (start, start + stride); the model continues them.

  MODEL_DIMS = 32
  NUM_LAYERS = 1
  NUM_HEADS = 2
  HIDDEN_DIMS = 64

  LEARNING_RATE = 1e-2
  WARMUP_STEPS = 0
  NUM_TRAIN_STEPS = 20
  NUM_MICROBATCHES = 1
  ICI_MESH_SHAPE = None
  DCN_MESH_SHAPE = None
  SAVE_INTERVAL_STEPS = 10
  SAVE_MAX_TO_KEEP = 10
  SUMMARY_INTERVAL_STEPS = 5
  EVAL_INTERVAL_STEPS = None
  DECODE_INTERVAL_STEPS = None
