"""The C4 experiments' default input is SeqIO over TFDS C4, as in Pax.

A tiny `c4/en:3.0.1` is written here in TFDS's own format (a DatasetBuilder's
download_and_prepare, nothing downloaded) and read through `--tfds_data_dir`'s override, SeqIO's
TfdsDataSource and our SeqIOInput; a small C4 experiment trains on it. Every experiment of
lm_cloud.py, c4.py and c4_multislice.py builds its task and datasets with no data present.
"""

import os
import shutil
import tempfile

from absl.testing import absltest
import fiddle as fdl
import numpy as np
import sentencepiece as spm

from hostenv import quiet_tensorflow

quiet_tensorflow.import_tensorflow()
import seqio  # noqa: E402  (after TensorFlow's quiet import)
import tensorflow_datasets as tfds  # noqa: E402

from paxml import experiment_registry  # noqa: E402
from paxml import seqio_input  # noqa: E402
from paxml import trainer  # noqa: E402
from paxml.data import input_error  # noqa: E402
from paxml.tasks.lm import c4_seqio_tasks  # noqa: E402
from paxml.tasks.lm.params import c4  # noqa: E402
from paxml.tasks.lm.params import c4_multislice  # noqa: E402, F401
from paxml.tasks.lm.params import lm_cloud  # noqa: E402, F401
from praxis import base_hyperparams  # noqa: E402
from praxis import layers  # noqa: E402

_WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()


def _document(i: int) -> str:
  rng = np.random.default_rng(i)
  return " ".join(rng.choice(_WORDS, size=12 + i % 7))


def _runs_documents_together(words: list[str], docs: list[list[str]]) -> bool:
  """Whether `words` is a piece of one document, or one's end, whole ones, then one's start."""

  def rest_ok(rest):  # Whole documents, then the start of one.
    if not rest or any(d[: len(rest)] == rest for d in docs):
      return True
    return any(rest[: len(d)] == d and rest_ok(rest[len(d) :]) for d in docs)

  n = len(words)
  inside = any(d[i : i + n] == words for d in docs for i in range(len(d) - n + 1))
  return inside or any(
    any(d[-k:] == words[:k] for d in docs) and rest_ok(words[k:]) for k in range(1, n)
  )


class C4(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """TFDS's c4/en at 3.0.1 in miniature: the real builder's features, a few documents."""

  VERSION = tfds.core.Version("3.0.1")
  # No source file to look up checksums beside (TFDS's lookup needs importlib_resources, which
  # the pinned stack lacks): nothing is downloaded anyway.
  code_path = None
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="en")]

  def _info(self):
    names = ("text", "url", "content-type", "content-length", "timestamp")
    features = tfds.features.FeaturesDict({k: tfds.features.Text() for k in names})
    return tfds.core.DatasetInfo(builder=self, features=features)

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train": self._generate_examples(0, 40), "validation": self._generate_examples(40, 6)}

  def _generate_examples(self, start, count):
    for i in range(start, start + count):
      text = _document(i)
      yield (
        i,
        {
          "text": text,
          "url": f"https://example.com/{i}",
          "content-type": "text/plain",
          "content-length": str(len(text)),
          "timestamp": "2019-04-25T00:00:00Z",
        },
      )


class TinyC4(c4.C4SpmdAdam):
  """C4SpmdAdam's input and optimizer on one CPU device: 1 layer x 16."""

  NUM_LAYERS = 1
  MODEL_DIMS = 16
  HIDDEN_DIMS = 32
  NUM_HEADS = 2
  DIMS_PER_HEAD = 8
  VOCAB_SIZE = 40
  MAX_SEQ_LEN = 16
  PERCORE_BATCH_SIZE = 2
  ICI_MESH_SHAPE = [1, 1, 1]
  CHECKPOINT_POLICY = layers.AutodiffCheckpointType.SAVE_NOTHING
  TRAIN_MIXTURE = "c4_tiny_lm"
  EVAL_MIXTURE = "c4_tiny_lm_eval"

  def task(self):
    task_p = super().task()
    task_p.train.num_train_steps = 3
    task_p.train.eval_interval_steps = 3
    task_p.train.save_interval_steps = 3
    task_p.train.summary_interval_steps = 1
    return task_p


class C4SeqIOTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.tfds_dir = os.path.join(cls.tmp, "tfds")
    C4(config="en", data_dir=cls.tfds_dir).download_and_prepare()
    model_prefix = os.path.join(cls.tmp, "spm")
    spm.SentencePieceTrainer.train(
      sentence_iterator=iter([_document(i) for i in range(40)]),
      model_prefix=model_prefix,
      vocab_size=TinyC4.VOCAB_SIZE,
      model_type="word",
      hard_vocab_limit=False,
      bos_id=-1,
      eos_id=1,
      unk_id=2,
      pad_id=0,
    )
    cls.vocab = seqio.SentencePieceVocabulary(model_prefix + ".model")
    # The tasks of c4_seqio_tasks with a local vocabulary; TFDS's directory as --tfds_data_dir
    # gives it (pax_flags: seqio's override).
    c4_seqio_tasks.register(TinyC4.TRAIN_MIXTURE, TinyC4.EVAL_MIXTURE, vocabulary=cls.vocab)
    seqio.set_tfds_data_dir_override(cls.tfds_dir)

  @classmethod
  def tearDownClass(cls):
    seqio.set_tfds_data_dir_override(None)
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  def test_written_directory_is_tfds_c4_en_301(self):
    self.assertTrue(os.path.isdir(os.path.join(self.tfds_dir, "c4", "en", "3.0.1")))
    builder = tfds.builder("c4/en:3.0.1", data_dir=self.tfds_dir)
    self.assertEqual(builder.info.splits["validation"].num_examples, 6)

  def test_train_batches_are_documents_run_together_in_rows(self):
    train_p, _ = TinyC4().datasets()
    self.assertIs(fdl.get_callable(train_p), seqio_input.SeqIOInput)
    self.assertEqual(train_p.split_name, "train")
    batch = base_hyperparams.instantiate(train_p).get_next()
    self.assertEqual(batch.ids.shape, (2, 16))
    docs = [_document(i).split() for i in range(40)]
    for row in range(2):
      if (batch.segment_ids[row] == 1).all():  # One piece of the stream (not two packed).
        words = self.vocab.decode(batch.ids[row].tolist()).split()
        self.assertTrue(_runs_documents_together(words, docs), words)
      # Pax's reverse_bos_padding: ids are the targets; labels are the next token.
      np.testing.assert_array_equal(batch.labels[row, :-1], batch.ids[row, 1:])

  def test_eval_reads_every_validation_token_once(self):
    _, eval_p = TinyC4().datasets()
    self.assertEqual((eval_p.split_name, eval_p.reset_for_eval), ("validation", True))
    inp = base_hyperparams.instantiate(eval_p)
    tokens = sum(len(self.vocab.encode(_document(i))) for i in range(40, 46))
    # Token id 0 is padding: every other id of the pass is a validation token.
    seen = sum(int((b["ids"] != 0).sum()) for b in inp.dataset.as_numpy_iterator())
    self.assertEqual(seen, tokens)

  def test_missing_tfds_c4_is_an_input_error_naming_the_flags(self):
    class Missing(TinyC4):
      TRAIN_MIXTURE, EVAL_MIXTURE = "c4_missing_lm", "c4_missing_lm_eval"

    # Fresh tasks: a source reads the override once, on first use.
    c4_seqio_tasks.register(Missing.TRAIN_MIXTURE, Missing.EVAL_MIXTURE, vocabulary=self.vocab)
    train_p, _ = Missing().datasets()
    empty = os.path.join(self.tmp, "empty")
    os.makedirs(empty, exist_ok=True)
    seqio.set_tfds_data_dir_override(empty)
    try:
      with self.assertRaisesRegex(input_error.InputDataError, "--tfds_data_dir=DIR.*--data_dir"):
        base_hyperparams.instantiate(train_p)
    finally:
      seqio.set_tfds_data_dir_override(self.tfds_dir)

  def test_small_c4_experiment_trains_through_seqio(self):
    job_log_dir = os.path.join(self.tmp, "job")
    metrics = trainer.train_and_evaluate(TinyC4(), job_log_dir, eval_on_test=True)
    self.assertEqual(metrics["step"], 3)
    self.assertTrue(all(np.isfinite(v) for v in metrics.values()), metrics)
    self.assertTrue(os.path.isdir(os.path.join(job_log_dir, "summaries")))


class AllExperimentsWithoutDataTest(absltest.TestCase):
  def test_55_experiments_build_task_and_datasets_without_data(self):
    modules = {f"paxml.tasks.lm.params.{m}" for m in ("lm_cloud", "c4", "c4_multislice")}
    names = [
      n
      for n in experiment_registry.canonical_names()
      if experiment_registry.get(n).__module__ in modules
    ]
    # Pax's 55 and c4.C4SpmdPipelineGpt3SmallAdam64Replicas (docs/experiments.md).
    self.assertLen(names, 56)
    seqio_inputs = 0
    for name in names:
      experiment = experiment_registry.get(name)()
      experiment.task()
      for ds in experiment.datasets():
        if fdl.get_callable(ds) is seqio_input.SeqIOInput:
          seqio_inputs += 1
          task = seqio.get_mixture_or_task(ds.mixture_name)
          self.assertEqual(task.source.tfds_dataset.name, c4_seqio_tasks.C4_TFDS_NAME)
    # c4's 17 C4 experiments (its LmCloudSpmdAdam pair is synthetic) and c4_multislice's 18:
    # a train and an eval input each.
    self.assertEqual(seqio_inputs, 2 * 35)


if __name__ == "__main__":
  absltest.main()
