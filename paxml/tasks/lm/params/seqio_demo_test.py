"""A tiny SeqIODemoLm trains, evaluates and decodes; its summaries hold the SeqIO metrics."""

import glob
import json
import os

from absl.testing import absltest

from paxml import trainer
from paxml.tasks.lm.params import seqio_demo
from paxml.testing import event_files
from paxml.testing import kjv_file


class SeqIODemoLmTest(absltest.TestCase):
  def test_eval_and_decode_summaries_report_the_tasks_seqio_metrics(self):
    tmp = self.create_tempdir().full_path
    corpus = os.path.join(tmp, "kjv.txt")
    kjv_file.write_kjv(corpus, 100)  # 95 train chapters, 5 held out.

    class Tiny(seqio_demo.SeqIODemoLm):
      CORPUS_PATH = corpus
      DATA_DIR = os.path.join(tmp, "data")
      VOCAB_SIZE = 300
      SEQ_LEN = 16
      BATCH_SIZE = 4
      DECODE_BATCH_SIZE = 2
      PROMPT_LEN = 16
      TARGET_LEN = 8
      DECODE_STEPS = 8
      MODEL_DIMS = 16
      HIDDEN_DIMS = 32
      NUM_LAYERS = 1
      NUM_TRAIN_STEPS = 4
      EVAL_INTERVAL_STEPS = 4
      DECODE_INTERVAL_STEPS = 4
      SAVE_INTERVAL_STEPS = 4
      SUMMARY_INTERVAL_STEPS = 4

    job_log_dir = os.path.join(tmp, "job")
    trainer.train_and_evaluate(Tiny(), job_log_dir, eval_on_test=True, decode_during_train=True)

    summaries = os.path.join(job_log_dir, "summaries")
    evals = event_files.read_scalars(os.path.join(summaries, "eval_test_kjv_lm_validation"))
    score = evals["scoring_eval/document_log_likelihood"][4]
    # Mean over the 5 held-out chapters of each one's summed log-likelihood: the LM's own
    # avg_xent times the scored tokens, over the documents, with the sign flipped.
    # num_predictions is a per-batch mean; the 5 chapters make 2 batches of 4 (one padded).
    tokens = evals["Metrics/num_predictions"][4] * 2
    self.assertAlmostEqual(score, -evals["Metrics/avg_xent"][4] * tokens / 5, delta=1e-3 * -score)
    self.assertLess(score, 0.0)

    decodes = event_files.read_scalars(
      os.path.join(summaries, "decode_test_kjv_continuation_validation")
    )
    for name in ("decoder/exact_match", "decoder/word_f1"):
      self.assertBetween(decodes[name][4], 0.0, 100.0)

    # SeqIO's JSONLogger copies, as Pax writes them.
    [scored] = glob.glob(os.path.join(job_log_dir, "eval_out", "kjv_lm_validation", "*.jsonl"))
    with open(scored) as f:
      line = json.loads(f.readline())
    self.assertEqual(line["step"], 4)
    self.assertAlmostEqual(line["document_log_likelihood"], score, places=3)
    self.assertNotEmpty(
      glob.glob(
        os.path.join(job_log_dir, "decoder_out", "kjv_continuation_validation", "*-metrics.jsonl")
      )
    )


if __name__ == "__main__":
  absltest.main()
