"""Experiments of tests/checkpoint_faults_test.py, in their own module so that the command line
(`--exp=tests.fault_experiments.FaultsLm`) can import them without importing the test."""

from paxml import experiment_registry
from paxml.testing import tiny_lm


@experiment_registry.register
class FaultsLm(tiny_lm.TinyLm):
  """6 steps, a checkpoint every 2, every one kept; a summary every step."""

  NUM_TRAIN_STEPS = 6
  SAVE_INTERVAL_STEPS = 2
  SAVE_MAX_TO_KEEP = 10
  SUMMARY_INTERVAL_STEPS = 1


@experiment_registry.register
class FaultsLm8(FaultsLm):
  """The same run, continued to step 8."""

  NUM_TRAIN_STEPS = 8


@experiment_registry.register
class DivergingLm(FaultsLm):
  """A learning rate that turns the weights to Inf after one step; every later step is NaN."""

  LEARNING_RATE = 1e38
  MAX_CONSECUTIVE_SKIPPED_STEPS = 3
  CLIP_GRADIENT_NORM_TO_VALUE = None


@experiment_registry.register
class TypoLm(FaultsLm):
  """A misspelt override (never read), and a mesh no test machine has, so it stops early."""

  NUM_TRIAN_STEPS = 3
  ICI_MESH_SHAPE = (1, 64, 2)


@experiment_registry.register
class SlowStepLm(FaultsLm):
  """A step of about a second on two CPU cores (~160 GFLOP: 2 layers x 512, 32 x 128 tokens);
  long enough a run that a SIGTERM lands mid-run, with summaries and saves far apart (before
  the run-ahead bound the loop queued every step up to the next summary)."""

  VOCAB_SIZE = 64
  SEQ_LEN = 128
  BATCH_SIZE = 32
  MODEL_DIMS = 512
  NUM_LAYERS = 2
  NUM_HEADS = 8
  HIDDEN_DIMS = 2048
  NUM_TRAIN_STEPS = 200
  SAVE_INTERVAL_STEPS = 200
  SUMMARY_INTERVAL_STEPS = 200
