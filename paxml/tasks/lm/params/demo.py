"""`DemoLm`: the default demo, a tiny Transformer LM on learnable synthetic data.

Run it (well under a minute on two CPU cores, most of it start-up and
compilation):

  ./bazelw run //paxml:main -- --exp=tasks.lm.params.demo.DemoLm --job_log_dir=/tmp/pax_demo

The loss starts near ln(VOCAB_SIZE) = 3.47 and falls well below it as the model
learns to continue arithmetic progressions. Run the same command again and it
resumes from the last checkpoint (and, at the end, says there is nothing left
to do); `tensorboard --logdir=/tmp/pax_demo/summaries` shows the curves.
The same directory then serves the other modes:

  ./bazelw run //paxml:main -- --exp=demo.DemoLm --job_log_dir=/tmp/pax_demo --mode=eval
  ./bazelw run //paxml:main -- --exp=demo.DemoLm --job_log_dir=/tmp/pax_demo --mode=decode
"""

import fiddle as fdl

from paxml import base_experiment
from paxml import experiment_registry
from paxml import synthetic_input
from paxml import tasks_lib
from praxis import transformer_lm


@experiment_registry.register
class DemoLm(base_experiment.BaseExperiment):
  """Two-layer, 64-wide LM; 300 steps of Adam on arithmetic progressions."""

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
  # Decoding keeps the first two tokens (start and stride) and continues the progression.
  DECODE_PREFIX_LEN = 2

  MODEL_DIMS = 64
  NUM_LAYERS = 2
  NUM_HEADS = 4
  HIDDEN_DIMS = 4 * MODEL_DIMS  # Computed once: a subclass changing MODEL_DIMS sets this too.

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

  def _input(self, **overrides) -> fdl.Config:
    return fdl.Config(
        synthetic_input.SyntheticLmInput,
        batch_size=self.BATCH_SIZE,
        seq_len=self.SEQ_LEN,
        vocab_size=self.VOCAB_SIZE,
        max_stride=self.MAX_STRIDE,
        **overrides,
    )

  def datasets(self) -> list[fdl.Config]:
    return [
        self._input(seed=self.INPUT_SEED, is_training=True, name="train"),
        self._input(seed=self.EVAL_SEED, is_training=False, name="progressions"),
    ]

  def decode_datasets(self) -> list[fdl.Config]:
    return [self._input(seed=self.EVAL_SEED, is_training=False, name="progressions")]

  def task(self) -> tasks_lib.TaskConfig:
    model = transformer_lm.LmModel(
        lm=transformer_lm.TransformerLm(
            vocab_size=self.VOCAB_SIZE,
            model_dims=self.MODEL_DIMS,
            num_layers=self.NUM_LAYERS,
            num_heads=self.NUM_HEADS,
            hidden_dims=self.HIDDEN_DIMS,
            max_seq_len=self.SEQ_LEN,
        ),
        decode_prefix_len=self.DECODE_PREFIX_LEN,
    )
    return tasks_lib.TaskConfig(
        model=model,
        learning_rate=self.LEARNING_RATE,
        warmup_steps=self.WARMUP_STEPS,
        num_train_steps=self.NUM_TRAIN_STEPS,
        num_microbatches=self.NUM_MICROBATCHES,
        ici_mesh_shape=self.ICI_MESH_SHAPE,
        dcn_mesh_shape=self.DCN_MESH_SHAPE,
        save_interval_steps=self.SAVE_INTERVAL_STEPS,
        save_max_to_keep=self.SAVE_MAX_TO_KEEP,
        summary_interval_steps=self.SUMMARY_INTERVAL_STEPS,
        eval_interval_steps=self.EVAL_INTERVAL_STEPS,
        decode_interval_steps=self.DECODE_INTERVAL_STEPS,
    )
