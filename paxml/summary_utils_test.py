"""Tests of summary_utils: clu and SeqIO values land in the event file with their tags."""

import glob
import shutil
import tempfile

from absl.testing import absltest
import clu.values as clu_values
import numpy as np
import seqio
from tensorboard.backend.event_processing import event_accumulator

from paxml import summary_utils


class SummaryUtilsTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir)

  def test_clu_and_seqio_values_are_written(self):
    with summary_utils.get_summary_writer(self.dir):
      summary_utils.write_clu_metric_summaries(
        {
          "acc": clu_values.Scalar(0.5),
          "txt": clu_values.Text("hello"),
          "img": clu_values.Image(np.ones((2, 4, 4, 3))),
          "hist": clu_values.Histogram(np.arange(10.0), num_buckets=3),
        },
        step_i=3,
      )
      summary_utils.write_seqio_metric_summaries(
        [{"bleu": seqio.metrics.Scalar(7.0), "f1": 0.25}], metric_name_prefix="dec", step=3
      )
    self.assertLen(glob.glob(f"{self.dir}/events.out.tfevents.*"), 1)
    acc = event_accumulator.EventAccumulator(self.dir, size_guidance={"tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["tensors"])
    self.assertTrue({"acc", "txt", "img", "hist", "dec/bleu", "dec/f1"} <= tags, tags)
    (event,) = acc.Tensors("dec/bleu")
    self.assertEqual(event.step, 3)
    self.assertAlmostEqual(float(np.asarray(event.tensor_proto.float_val)[0]), 7.0)

  def test_without_a_writer_the_error_says_what_to_do(self):
    with self.assertRaisesRegex(RuntimeError, "get_summary_writer"):
      summary_utils.write_clu_metric_summaries({"a": clu_values.Scalar(1)}, step_i=0)


if __name__ == "__main__":
  absltest.main()
