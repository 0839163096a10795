"""Small LMs for demos and tests: `small_language_model` and `ProgressionLm` (arithmetic
progressions, no data needed).

`ProgressionLm` is the body of demo.SyntheticDemoLm and of the tests' TinyLm
(paxml/testing/tiny_lm.py), which set its sizes; its `task()` is a seed-style `TaskConfig`
(`tasks_lib.task_from_fields`). `model_params` re-exports both under their old names.
"""

from __future__ import annotations

import fiddle as fdl

from paxml import base_experiment
from paxml import synthetic_input
from paxml import tasks_lib
from praxis import base_hyperparams
from praxis import base_layer
from praxis.layers import models
from praxis.layers import sample_decode
from praxis.layers import transformer_models
from praxis.layers import transformers


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
  # As Pax's LM experiments: looked up and scaled by sqrt(D), the embeddings have unit
  # variance, as loud as the sinusoidal positions they are added to.
  lm.softmax_tpl.scale_sqrt_depth = True
  lm.softmax_tpl.params_init = base_layer.WeightInit.Gaussian(model_dims**-0.5)
  return base_hyperparams.instantiate(
    models.LanguageModel.HParams.config(
      lm_tpl=lm, decoder_tpl=sample_decode.DecoderHParams(seqlen=decode_seqlen, eos_id=None)
    )
  )


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
