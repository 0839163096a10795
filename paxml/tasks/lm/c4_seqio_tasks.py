"""Pax's C4 SeqIO tasks, the default input of the c4 experiments (params/c4.py).

  c4_lm_v301_gpt                  training: each document's `text` tokenised, documents run
                                  together in groups of 4096 and cut into rows of the targets
                                  length (GPT-style: no document boundaries, no padding)
  c4_lm_v301_gpt_eval_tokenized   evaluation: the same, in reading order (no shuffling), so an
                                  evaluation scores every validation token once

Both read TFDS `c4/en:3.0.1` (the public C4 release, splits "train" and "validation") through
`seqio.TfdsDataSource`, so `--tfds_data_dir=DIR` (seqio's override) points them at a local TFDS
copy: DIR/c4/en/3.0.1/. The vocabulary is Pax's GPT SentencePiece model (GPT_SPM_PATH, loaded on
first use, not at registration).

Deviation from Pax (docs/experiments.md): Pax's file pins MLPerf's private builds of the same
corpus (versions 3.0.4 / 3.0.5 in an MLPerf bucket, splits "train2" and
"validation_tokenized_5662seqs", the latter already tokenised into `ids`). Those builds are not
public; the public 3.0.1 release has `text` in both splits, so the eval task tokenises too.

`register()` is idempotent and skips names that exist already (Pax's own c4.py registers the
same names when it is loaded in place of ours). `register(train, eval, vocabulary=...)` adds the
same pair under other names, e.g. with a locally trained vocabulary; point an experiment's
TRAIN_MIXTURE / EVAL_MIXTURE at them.
"""

from __future__ import annotations

import functools

from hostenv import quiet_tensorflow

quiet_tensorflow.import_tensorflow()
import seqio  # After TensorFlow's quiet import: seqio imports TensorFlow too.

from paxml.data import input_error
from t5.data import preprocessors as t5_preprocessors

C4_TFDS_NAME = "c4/en:3.0.1"
GPT_SPM_PATH = "gs://mlperf-llm-public2/vocab/c4_en_301_5Mexp2_spm.model"
TRAIN_TASK = "c4_lm_v301_gpt"
EVAL_TASK = "c4_lm_v301_gpt_eval_tokenized"
# Documents concatenated per packed group (Pax's reduce_concat_tokens batch size).
CONCAT_DOCUMENTS = 4096


class C4TfdsSource(seqio.TfdsDataSource):
  """SeqIO's TFDS source; C4 missing from the TFDS directory is an error naming the flags."""

  def _check_prepared(self) -> None:
    loader = self.tfds_dataset
    try:
      ready, cause = loader.builder.is_prepared(), ""
    except Exception as e:  # pylint: disable=broad-except  (TFDS: unknown version, no files)
      ready, cause = False, f" ({type(e).__name__}: {e})"
    if not ready:
      where = loader.data_dir or "TFDS's default directory (~/tensorflow_datasets)"
      raise input_error.InputDataError(
        f"TFDS {loader.name} is not in {where}{cause}. Pass --tfds_data_dir=DIR where "
        f"DIR/{loader.name.replace(':', '/')}/ holds the prepared dataset (TFDS's `tfds build "
        f"{loader.name} --data_dir=DIR` writes it), or read prepared TFRecords instead with "
        "--data_dir (`bazel run //paxml/data:prepare`)."
      )

  def list_shards(self, split: str):
    self._check_prepared()
    return super().list_shards(split)

  def get_dataset(self, *args, **kwargs):
    self._check_prepared()
    return super().get_dataset(*args, **kwargs)


def _preprocessors(concat_documents: int) -> list:
  return [
    functools.partial(t5_preprocessors.rekey, key_map={"inputs": None, "targets": "text"}),
    seqio.preprocessors.tokenize,
    functools.partial(t5_preprocessors.reduce_concat_tokens, batch_size=concat_documents),
    t5_preprocessors.split_tokens_to_targets_length,
  ]


def register(
  train_task: str = TRAIN_TASK,
  eval_task: str = EVAL_TASK,
  *,
  vocabulary: seqio.Vocabulary | None = None,
  tfds_name: str = C4_TFDS_NAME,
  tfds_data_dir: str | None = None,
  concat_documents: int = CONCAT_DOCUMENTS,
) -> tuple[str, str]:
  """Registers the train and eval C4 tasks (unless a task of that name exists); their names.

  `tfds_data_dir` None reads TFDS's default directory, or `--tfds_data_dir` when given (seqio's
  override wins over any directory named here, as in Pax).
  """
  vocabulary = vocabulary or seqio.SentencePieceVocabulary(GPT_SPM_PATH)
  features = {"targets": seqio.Feature(vocabulary=vocabulary, add_eos=False)}
  source = C4TfdsSource(tfds_name=tfds_name, tfds_data_dir=tfds_data_dir)
  registered = set(seqio.TaskRegistry.names())
  for name, shuffle_buffer in ((train_task, 10000), (eval_task, None)):
    if name in registered:
      continue
    seqio.TaskRegistry.add(
      name,
      source=source,
      preprocessors=_preprocessors(concat_documents),
      output_features=features,
      metric_fns=[],
      shuffle_buffer_size=shuffle_buffer,
    )
  return train_task, eval_task
