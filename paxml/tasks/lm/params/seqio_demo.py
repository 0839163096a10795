"""`SeqIODemoLm`: DemoLm's model on SeqIO tasks over the KJV, with SeqIO's eval metrics.

  ./bazelw run //paxml:main -- --exp=seqio_demo.SeqIODemoLm --job_log_dir=/tmp/pax_seqio \\
      --eval_on_test --decode_during_train

Trains on the `kjv_lm` task (the first SEQ_LEN tokens of each train chapter) and, at every
EVAL_INTERVAL_STEPS / DECODE_INTERVAL_STEPS, reports the tasks' SeqIO metrics besides the LM's:
  summaries/eval_test_kjv_lm_validation: scoring_eval/document_log_likelihood
  summaries/decode_test_kjv_continuation_validation: decoder/exact_match, decoder/word_f1
(JSONL copies under eval_out/ and decoder_out/). See paxml/tasks/lm/kjv_seqio_tasks.py.
"""

import fiddle as fdl

from paxml import experiment_registry
from paxml import seqio_input
from paxml.data import tokenizer
from paxml.tasks.lm import kjv_seqio_tasks
from paxml.tasks.lm.params import demo


@experiment_registry.register
class SeqIODemoLm(demo.DemoLm):
  """DemoLm's 2-layer LM; data and metrics from SeqIO tasks instead of TextInput."""

  # The continuation prompts (PROMPT_WORDS words, ~12 pieces at 1024) fit in PROMPT_LEN tokens
  # and their targets (TARGET_WORDS words, EOS) in TARGET_LEN; decode sees both, so
  # PROMPT_LEN + TARGET_LEN must not exceed the decoder's PROMPT_LEN + DECODE_STEPS.
  PROMPT_LEN = 24
  TARGET_LEN = 12
  DECODE_STEPS = 12

  def _task(self, name: str) -> fdl.Config:
    # Building it prepares the KJV (first use) and registers the tasks.
    return fdl.Config(
      kjv_seqio_tasks.task,
      name=name,
      data_dir=self.DATA_DIR,
      corpus_path=self.CORPUS_PATH,
      vocab_size=self.VOCAB_SIZE,
    )

  def _seqio(self, name: str, split: str, **fields) -> fdl.Config:
    # BOS is the tokenizer's (2), as the TextInput data DemoLm was written for; SeqIO's
    # default 0 is this vocabulary's pad id.
    prefix_lm = name == kjv_seqio_tasks.CONTINUATION_TASK
    converter = fdl.Config(
      seqio_input.LanguageModelFeatures,
      bos_id=tokenizer.BOS_ID,
      weights_on_targets_only=True if prefix_lm else None,
    )
    lengths = (
      {"inputs": self.PROMPT_LEN, "targets": self.TARGET_LEN}
      if prefix_lm
      else {"targets": self.SEQ_LEN}
    )
    return fdl.Config(
      seqio_input.SeqIOInput,
      mixture_or_task=self._task(name),
      split_name=split,
      task_feature_lengths=lengths,
      feature_converter=converter,
      **fields,
    )

  def datasets(self) -> list[fdl.Config]:
    return [
      self._seqio(
        kjv_seqio_tasks.LM_TASK,
        "train",
        is_training=True,
        batch_size=self.BATCH_SIZE,
        input_random_seed=self.INPUT_SEED,
      ),
      # One full pass over the held-out chapters per eval: the score metric needs all of them.
      self._seqio(
        kjv_seqio_tasks.LM_TASK,
        "validation",
        is_training=False,
        reset_for_eval=True,
        batch_size=self.BATCH_SIZE,
      ),
    ]

  def decode_datasets(self) -> list[fdl.Config]:
    return [
      self._seqio(
        kjv_seqio_tasks.CONTINUATION_TASK,
        "validation",
        is_training=False,
        reset_for_eval=True,
        batch_size=self.DECODE_BATCH_SIZE,
      )
    ]
