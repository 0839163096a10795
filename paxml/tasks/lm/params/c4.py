"""Pax's C4 experiments: decoder-only LMs on C4 text prepared as TFRecord shards.

Pax reads C4 through SeqIO from a Google Cloud bucket that is not publicly readable. Here the
data is any directory laid out as `paxml/data:prepare` writes it (C4 or another corpus):

  DATA_DIR/train-*.tfrecord   tf.train.Example with a bytes feature `text`, one per document
  DATA_DIR/eval-*.tfrecord    the validation documents
  DATA_DIR/spm.model          a SentencePiece model with at most VOCAB_SIZE (32000) pieces

given on the command line:

  ./bazelw run //paxml:main -- --exp=tasks.lm.params.c4.C4Spmd1BAdam4Replicas \
      --data_dir=/data/c4 --job_log_dir=DIR

Documents are tokenised, concatenated and split into MAX_SEQ_LEN rows (packed, with
segment ids), as Pax's C4 pipeline does; training shuffles, evaluation makes one padded pass.

  experiment                 layers  dims  heads  per-core  ICI mesh    params
  C4Spmd1BAdam4Replicas      13      2560  20     32        [1, 4, 1]   1.1B
  C4Spmd2BAdam4Replicas      18      3072  24     32        [1, 4, 1]   2.1B
  C4Spmd16BAdam32Replicas    36      6144  48     16        [1, 16, 2]  16.4B
"""

import os

import fiddle as fdl
import jax

from paxml import experiment_registry
from paxml.tasks.lm import model_params
from praxis.layers import activations


class C4SpmdAdam(model_params.TransformerLmSpmdAdam):
  """Base of the C4 family: Adam at 1e-3, GELU, scanned layers, C4 read from DATA_DIR."""

  DATA_DIR = None  # Set by --data_dir; see the module docstring for the layout.
  TRAIN_FILES = "train-*.tfrecord"
  EVAL_FILES = "eval-*.tfrecord"
  TOKENIZER = "spm.model"

  LEARNING_RATE = 1e-3
  ACTIVATION_CLS = activations.GELU
  USE_REPEATED_LAYER = True
  CHECKPOINT_POLICY = "SAVE_NOTHING"
  CHECKPOINT_EVERY_N_STEPS = 1000
  SUMMARY_INTERVAL_STEPS = 10

  def _path(self, name: str) -> str:
    if not self.DATA_DIR:
      raise ValueError(
        f"{type(self).__name__} reads C4 from a directory: pass --data_dir=DIR holding "
        f"{self.TRAIN_FILES}, {self.EVAL_FILES} and {self.TOKENIZER} (write them with "
        "`bazel run //paxml/data:prepare`)"
      )
    return os.path.join(self.DATA_DIR, name)

  def _input(self, files: str, is_training: bool, name: str) -> fdl.Config:
    # Imported here, not at the top: main imports this module to register the experiments, and
    # TensorFlow (which text_pipeline needs) prints start-up notices and takes seconds to load.
    from paxml.data import text_pipeline  # pylint: disable=g-import-not-at-top

    return fdl.Config(
      text_pipeline.TextInput,
      name=name,
      is_training=is_training,
      file_pattern=self._path(files),
      tokenizer_path=self._path(self.TOKENIZER),
      file_format="tfrecord",
      seq_len=self.MAX_SEQ_LEN,
      packing="pack",
      batch_size=round(self.PERCORE_BATCH_SIZE * jax.local_device_count()),
      num_infeed_hosts=jax.process_count(),
      infeed_host_index=jax.process_index(),
      # Eval: one full padded pass over the validation files per evaluation (Pax's
      # reset_for_eval=True on its C4 validation split).
      reset_for_eval=not is_training,
    )

  def datasets(self) -> list[fdl.Config]:
    return [
      self._input(self.TRAIN_FILES, True, "train"),
      self._input(self.EVAL_FILES, False, "C4Validation"),
    ]

  def decode_datasets(self) -> list[fdl.Config]:
    # Pax's C4 experiments configure a decoder (eos_id=1, seqlen=MAX_SEQ_LEN; the base class's
    # DECODE_* fields) but no decode data; the base's synthetic prompts would be meaningless.
    return []


@experiment_registry.register
class C4Spmd1BAdam4Replicas(C4SpmdAdam):
  """1.1B (13 x 2560, 20 heads) on 4 devices; global batch 128 x 1024 tokens.

  ./bazelw run //paxml:main -- --exp=c4.C4Spmd1BAdam4Replicas --data_dir=DIR --job_log_dir=DIR
  """

  NUM_LAYERS = 13
  MODEL_DIMS = 2560
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 20
  DIMS_PER_HEAD = 128
  PERCORE_BATCH_SIZE = 32
  ICI_MESH_SHAPE = [1, 4, 1]


@experiment_registry.register
class C4Spmd2BAdam4Replicas(C4SpmdAdam):
  """2.1B (18 x 3072, 24 heads) on 4 devices; global batch 128 x 1024 tokens.

  ./bazelw run //paxml:main -- --exp=c4.C4Spmd2BAdam4Replicas --data_dir=DIR --job_log_dir=DIR
  """

  NUM_LAYERS = 18
  MODEL_DIMS = 3072
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 24
  DIMS_PER_HEAD = 128
  PERCORE_BATCH_SIZE = 32
  ICI_MESH_SHAPE = [1, 4, 1]


@experiment_registry.register
class C4Spmd16BAdam32Replicas(C4SpmdAdam):
  """16.4B (36 x 6144, 48 heads) on 32 devices, 2-way tensor parallel; global batch 512.

  ./bazelw run //paxml:main -- --exp=c4.C4Spmd16BAdam32Replicas --data_dir=DIR --job_log_dir=DIR
  """

  NUM_LAYERS = 36
  MODEL_DIMS = 6144
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 48
  DIMS_PER_HEAD = 128
  PERCORE_BATCH_SIZE = 16
  ICI_MESH_SHAPE = [1, 16, 2]
