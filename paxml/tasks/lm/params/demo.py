"""The demo experiments: `DemoLm` (a small LM on the King James Bible) and `SyntheticDemoLm`.

  ./bazelw run //paxml:main -- --exp=tasks.lm.params.demo.DemoLm --job_log_dir=/tmp/pax_demo

`DemoLm` trains praxis' `LanguageModel` (TransformerLm -> StackedTransformer) on the KJV. The
first run prepares the data (SentencePiece model + TFRecord shards, ~5 s) into a cache directory
and logs where and the corpus' unigram entropy (5.43 nats/token at 1024 pieces: what a model that
ignores context reaches); later runs reuse it. Training logs eval_train (a batch not yet trained
on) at steps 200, 400, ...; the held-out chapters and greedy continuations of held-out prompts
come from the same directory afterwards, seconds each:

  ./bazelw run //paxml:main -- --exp=demo.DemoLm --job_log_dir=/tmp/pax_demo --mode=eval
      -> summaries/eval_test_kjv_eval, log line "eval_test_kjv_eval at step 800: ... log_pplx="
  ./bazelw run //paxml:main -- --exp=demo.DemoLm --job_log_dir=/tmp/pax_demo --mode=decode
      -> decoder_out/kjv_prompts/decoder_out_00000800.jsonl (ids and "prefix"/"decoded" text)

or during training with Pax's --eval_on_test / --decode_during_train (every
EVAL_INTERVAL_STEPS / DECODE_INTERVAL_STEPS). Run the train command again and it resumes.

`SyntheticDemoLm` is the earlier demo: a tiny LM on arithmetic progressions that needs no data
and trains in seconds; tests subclass it.
"""

import fiddle as fdl

from paxml import base_experiment
from paxml import experiment_registry
from paxml import tasks_lib
from paxml.data import demo_data
from paxml.data import tokenizer
from paxml.tasks.lm import model_params
from praxis.layers import models
from praxis.layers import sample_decode
from praxis.layers import transformer_models
from praxis.layers import transformers
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantize


@experiment_registry.register
class DemoLm(base_experiment.BaseExperiment):
  """A 2-layer, 128-wide Transformer LM on the KJV: 800 steps of Adam, ~2 minutes on 2 CPU cores."""

  # Data. None: the @corpus//:kjv runfile, prepared into the cache (see demo_data.py).
  CORPUS_PATH = None
  DATA_DIR = None
  # SentencePiece pieces; the prepared data is cached per size. 1024 rather than the prepare
  # tool's 4096: the softmax dominates a model this small, and 1024 halves the step time.
  VOCAB_SIZE = 1024
  SEQ_LEN = 128
  # "concat": chapters run end to end, cut every SEQ_LEN tokens (GPT-style; no padding). See
  # paxml/data/packing.py; "pack" needs packed_input, which LanguageModel.decode lacks so far.
  PACKING = "concat"
  BATCH_SIZE = 16
  # None: a fresh shuffle per run, as Pax advises for training data (the checkpoint records it,
  # so a resumed run continues the same stream).
  INPUT_SEED = None

  # Decoding: greedy continuations of the first PROMPT_LEN tokens (BOS included) of held-out
  # chapters, DECODE_BATCH_SIZE of them per decode, the next ones at the next decode.
  PROMPT_LEN = 16
  DECODE_STEPS = 32
  DECODE_BATCH_SIZE = 8

  MODEL_DIMS = 128
  NUM_LAYERS = 2
  NUM_HEADS = 4
  HIDDEN_DIMS = 4 * MODEL_DIMS  # Computed once: a subclass changing MODEL_DIMS sets this too.

  LEARNING_RATE = 3e-3
  WARMUP_STEPS = 30
  NUM_TRAIN_STEPS = 800
  ICI_MESH_SHAPE = None  # All devices on the data axis.
  DCN_MESH_SHAPE = None
  SAVE_INTERVAL_STEPS = 200
  SAVE_MAX_TO_KEEP = 3
  SUMMARY_INTERVAL_STEPS = 50
  EVAL_INTERVAL_STEPS = 200
  DECODE_INTERVAL_STEPS = 200

  def _input(self, split: str, **fields) -> fdl.Config:
    # A config of demo_data.text_input: building it (not writing it) prepares the data.
    return fdl.Config(
      demo_data.text_input,
      split=split,
      data_dir=self.DATA_DIR,
      corpus_path=self.CORPUS_PATH,
      vocab_size=self.VOCAB_SIZE,
      **fields,
    )

  def datasets(self) -> list[fdl.Config]:
    return [
      self._input(
        "train",
        name="train",
        is_training=True,
        batch_size=self.BATCH_SIZE,
        seq_len=self.SEQ_LEN,
        packing=self.PACKING,
        input_random_seed=self.INPUT_SEED,
      ),
      # One full pass over the 59 held-out chapters per evaluation (short batches padded).
      self._input(
        "eval",
        name="kjv_eval",
        is_training=False,
        reset_for_eval=True,
        batch_size=self.BATCH_SIZE,
        seq_len=self.SEQ_LEN,
        packing=self.PACKING,
      ),
    ]

  def decode_datasets(self) -> list[fdl.Config]:
    # "pad" keeps the start of each held-out chapter, one per row; rolling (not reset), so every
    # row is a real prompt (LanguageModel.decode needs at least one prompt token per row).
    return [
      self._input(
        "eval",
        name="kjv_prompts",
        is_training=False,
        reset_for_eval=False,
        batch_size=self.DECODE_BATCH_SIZE,
        seq_len=self.PROMPT_LEN,
        packing="pad",
        add_eos=False,
        shuffle=False,
      )
    ]

  def model(self) -> models.LanguageModel:
    """praxis' LanguageModel -> TransformerLm -> StackedTransformer, from the fields above."""
    stack = transformers.StackedTransformer.HParams(
      num_layers=self.NUM_LAYERS,
      hidden_dims=self.HIDDEN_DIMS,
      num_heads=self.NUM_HEADS,
      dim_per_head=self.MODEL_DIMS // self.NUM_HEADS,
    )
    lm = transformer_models.TransformerLm.HParams(
      model_dims=self.MODEL_DIMS,
      vocab_size=self.VOCAB_SIZE,
      packed_input=self.PACKING == "pack",
      stacked_transformer_tpl=stack,
    )
    # As Pax's LM experiments: without it the sinusoidal positions (norm ~sqrt(D/2)) swamp the
    # token embeddings (norm ~1) and the loss sits at the unigram entropy for hundreds of steps.
    lm.softmax_tpl.scale_sqrt_depth = True
    decoder = sample_decode.DecoderHParams(
      seqlen=self.PROMPT_LEN + self.DECODE_STEPS,
      max_decode_steps=self.DECODE_STEPS,
      eos_id=tokenizer.EOS_ID,
    )  # Pax's default eos_id 2 is this tokenizer's BOS.
    return models.LanguageModel.HParams(lm_tpl=lm, decoder_tpl=decoder).Instantiate()

  def task(self) -> tasks_lib.TaskConfig:
    # LEARNING_RATE ... DECODE_INTERVAL_STEPS above are TaskConfig's fields, upper-cased.
    return tasks_lib.task_from_fields(self, self.model())


@experiment_registry.register
class SyntheticDemoLm(model_params.ProgressionLm):
  """Two-layer, 64-wide praxis LanguageModel; 300 steps of Adam on arithmetic progressions (no
  data needed).

    ./bazelw run //paxml:main -- --exp=demo.SyntheticDemoLm --job_log_dir=/tmp/pax_synthetic

  The loss starts near ln(VOCAB_SIZE) = 3.47 and falls well below it as the model learns to
  continue arithmetic progressions. Data, model and decoding: model_params.ProgressionLm.
  """

  LEARNING_RATE = 3e-3
  WARMUP_STEPS = 20
  NUM_TRAIN_STEPS = 300
  NUM_MICROBATCHES = 1
  ICI_MESH_SHAPE = None  # All devices on the data axis.
  DCN_MESH_SHAPE = None
  SAVE_INTERVAL_STEPS = 100
  SAVE_MAX_TO_KEEP = 3
  SUMMARY_INTERVAL_STEPS = 20
  EVAL_INTERVAL_STEPS = 100
  DECODE_INTERVAL_STEPS = 100


# int8 DemoLm (quantized training and post-training quantization; docs/experiments.md).
# Quantized: the attention projections, the feed-forward linears and the shared embedding /
# softmax table (per-class scales); layer norms and biases stay float. True would leave the
# attention projections float.
_INT8_LINEAR_ONLY = False
_INT8 = dict(num_bits=8, quantize_embedding_softmax=True, linear_only=_INT8_LINEAR_ONLY)


@experiment_registry.register
@quantize.for_transformer(
  quantization_type=quantization_hparams.QuantizationType.AQT,
  mode=quantization_hparams.QuantizationMode.TRAINING,
  **_INT8,
)
class DemoLmInt8Aqt(DemoLm):
  """DemoLm trained int8-aware (AQT): the forward pass sees the weights quantized to int8 (per
  output channel), the gradients update the float weights (straight-through).

    ./bazelw run //paxml:main -- --exp=demo.DemoLmInt8Aqt --job_log_dir=/tmp/pax_demo_aqt
  """


@experiment_registry.register
@quantize.for_transformer(
  quantization_type=quantization_hparams.QuantizationType.PTQ,
  mode=quantization_hparams.QuantizationMode.INFERENCE,
  **_INT8,
)
class DemoLmInt8Ptq(DemoLm):
  """DemoLm served from int8 weights (post-training quantization): eval / decode only.

  Its checkpoints come from a trained float DemoLm through paxml/tools/quantize_checkpoint.py:

    ./bazelw run //paxml/tools:quantize_checkpoint -- --exp=demo.DemoLmInt8Ptq \
        --float_job_log_dir=/tmp/pax_demo --job_log_dir=/tmp/pax_demo_int8
    ./bazelw run //paxml:main -- --exp=demo.DemoLmInt8Ptq --job_log_dir=/tmp/pax_demo_int8 \
        --mode=eval
  """
