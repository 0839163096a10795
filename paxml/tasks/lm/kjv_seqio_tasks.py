"""SeqIO tasks over the project's KJV corpus (paxml/data/README.md), with their eval metrics.

  kjv_lm            targets = the start of each chapter (documents, as DemoLm's data);
                    score metric: the mean log-likelihood per document (summed over its tokens).
  kjv_continuation  inputs = the first PROMPT_WORDS words of a chapter, targets = the next
                    TARGET_WORDS words; predict metrics: exact match and word-overlap F1 of the
                    model's continuation (cut to the target's word count) against the text.

Splits: "train" (the prepared train shards) and "validation" (the held-out chapters). The
vocabulary is the SentencePiece model `prepare` trained on the train chapters: nothing is
downloaded. The data is prepared on first use into the cache (demo_data.ensure_prepared), so the
tasks are registered by `register(data_dir)` or, in an experiment config, built by `task(...)`:

    fdl.Config(kjv_seqio_tasks.task, name="kjv_lm", vocab_size=1024)

as SeqIOInput's `mixture_or_task`; after `register`, `mixture_name="kjv_lm"` works as well.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Sequence

import numpy as np

from hostenv import quiet_tensorflow

tf = quiet_tensorflow.import_tensorflow()
import seqio  # After TensorFlow's quiet import: seqio imports TensorFlow too.

from paxml.data import demo_data

LM_TASK = "kjv_lm"
CONTINUATION_TASK = "kjv_continuation"
TASK_NAMES = (LM_TASK, CONTINUATION_TASK)
PROMPT_WORDS = 8
TARGET_WORDS = 4


# -- metrics: seqio's calling convention, (targets, scores) and (targets, predictions) ----------


def document_log_likelihood(targets: Sequence[Any], scores: np.ndarray) -> dict[str, float]:
  """The mean over documents of each document's summed token log-likelihood (nats)."""
  del targets  # The scores already belong to the targets, one per document.
  return {"document_log_likelihood": float(np.mean(scores)) if len(scores) else 0.0}


def exact_match(targets: Sequence[str], predictions: Sequence[str]) -> dict[str, float]:
  """Percentage of continuations equal to the text (after whitespace normalisation)."""
  hits = [" ".join(t.split()) == " ".join(p.split()) for t, p in zip(targets, predictions)]
  return {"exact_match": 100.0 * float(np.mean(hits)) if hits else 0.0}


def word_f1(targets: Sequence[str], predictions: Sequence[str]) -> dict[str, float]:
  """Mean word-overlap F1 (SQuAD's bag-of-words F1, a BLEU-1-like score), in percent."""
  scores = []
  for target, prediction in zip(targets, predictions):
    t, p = target.lower().split(), prediction.lower().split()
    common = sum(min(t.count(w), p.count(w)) for w in set(p))
    if not t or not p or not common:
      scores.append(float(t == p))
      continue
    precision, recall = common / len(p), common / len(t)
    scores.append(2 * precision * recall / (precision + recall))
  return {"word_f1": 100.0 * float(np.mean(scores)) if scores else 0.0}


def _cut_to_target_words(text: str, example: Any = None, is_target: bool = False) -> str:
  """Postprocessing: a prediction keeps as many words as its target has."""
  text = text.decode("utf-8") if isinstance(text, bytes) else text
  if is_target or example is None:
    return text
  target = example.get("targets_pretokenized", b"")
  target = target.decode("utf-8") if isinstance(target, bytes) else str(target)
  return " ".join(text.split()[: len(target.split())])


# -- preprocessors ------------------------------------------------------------------------------


@seqio.map_over_dataset
def _split_prompt(ex: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
  words = tf.strings.split(ex["text"])
  return {
    "inputs": tf.strings.reduce_join(words[:PROMPT_WORDS], separator=" "),
    "targets": tf.strings.reduce_join(
      words[PROMPT_WORDS : PROMPT_WORDS + TARGET_WORDS], separator=" "
    ),
  }


def _source(data_dir: str) -> seqio.TFExampleDataSource:
  return seqio.TFExampleDataSource(
    split_to_filepattern={
      "train": os.path.join(data_dir, "train-*.tfrecord"),
      "validation": os.path.join(data_dir, "eval-*.tfrecord"),
    },
    feature_description={"text": tf.io.FixedLenFeature([], tf.string)},
  )


def register(data_dir: str) -> None:
  """Registers both tasks over the prepared KJV in `data_dir` (again if already registered,
  so the latest data directory wins)."""
  vocab = seqio.SentencePieceVocabulary(os.path.join(data_dir, "spm.model"))
  for name in TASK_NAMES:
    seqio.TaskRegistry.remove(name)
  seqio.TaskRegistry.add(
    LM_TASK,
    source=_source(data_dir),
    preprocessors=[
      functools.partial(seqio.preprocessors.rekey, key_map={"targets": "text"}),
      seqio.preprocessors.tokenize,
      seqio.preprocessors.append_eos,
    ],
    output_features={"targets": seqio.Feature(vocab, add_eos=True)},
    metric_fns=[document_log_likelihood],
  )
  seqio.TaskRegistry.add(
    CONTINUATION_TASK,
    source=_source(data_dir),
    preprocessors=[_split_prompt, seqio.preprocessors.tokenize, seqio.preprocessors.append_eos],
    output_features={
      "inputs": seqio.Feature(vocab, add_eos=False),
      "targets": seqio.Feature(vocab, add_eos=True),
    },
    postprocess_fn=_cut_to_target_words,
    metric_fns=[exact_match, word_f1],
  )


def task(
  name: str, data_dir: str | None = None, corpus_path: str | None = None, vocab_size: int = 1024
) -> seqio.Task:
  """The task `name` over the KJV prepared in `data_dir` (None: the cache, prepared if needed)."""
  if name not in TASK_NAMES:
    raise ValueError(f"Unknown KJV SeqIO task {name!r}; the tasks are {TASK_NAMES}.")
  data_dir, _ = demo_data.ensure_prepared(data_dir, corpus_path, vocab_size)
  register(data_dir)
  return seqio.get_mixture_or_task(name)
