"""Tests that scalars land in a TensorBoard event file with the right tags/steps."""

import glob
import os

from absl.testing import absltest
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

from paxml import summaries


def _read_scalars(directory):
  """Returns {tag: [(step, value), ...]} from the event files in `directory`."""
  accumulator = event_accumulator.EventAccumulator(
      directory, size_guidance={event_accumulator.TENSORS: 0}
  )
  accumulator.Reload()
  # tf.summary (TF2) stores scalars as tensors, not as legacy scalar events.
  return {
      tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
            for e in accumulator.Tensors(tag)]
      for tag in accumulator.Tags()["tensors"]
  }


class SummaryWriterTest(absltest.TestCase):

  def test_scalars_are_written_under_summaries_train(self):
    job_log_dir = self.create_tempdir().full_path
    with summaries.SummaryWriter(job_log_dir, "train") as writer:
      writer.scalars(10, {"loss": 2.5, "Steps/sec": 4.0})
      writer.scalars(20, {"loss": 1.25, "Steps/sec": 5.0})
    directory = os.path.join(job_log_dir, "summaries", "train")
    self.assertEqual(writer.directory, directory)
    self.assertLen(glob.glob(os.path.join(directory, "events.out.tfevents.*")), 1)
    self.assertEqual(
        _read_scalars(directory),
        {"loss": [(10, 2.5), (20, 1.25)], "Steps/sec": [(10, 4.0), (20, 5.0)]},
    )

  def test_flush_makes_values_readable_before_close(self):
    job_log_dir = self.create_tempdir().full_path
    writer = summaries.SummaryWriter(job_log_dir, "train")
    writer.scalars(1, {"lr": 0.5})
    writer.flush()
    self.assertEqual(_read_scalars(writer.directory), {"lr": [(1, 0.5)]})
    writer.close()

  def test_disabled_writer_writes_nothing(self):
    job_log_dir = self.create_tempdir().full_path
    with summaries.SummaryWriter(job_log_dir, "train", enabled=False) as writer:
      writer.scalars(1, {"loss": 1.0})
    self.assertFalse(os.path.exists(os.path.join(job_log_dir, "summaries")))


if __name__ == "__main__":
  absltest.main()
