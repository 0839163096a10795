"""Tests for test_utils.get_tfevent_log_dirs / get_tfevent_scalars on event files written here."""

import os
import tempfile

from absl.testing import absltest
import numpy as np
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.proto import summary_pb2
from tensorboard.summary.writer import event_file_writer
from tensorboard.util import tensor_util

from praxis import test_utils


def _write(logdir, step, tensors=None, simple=None):
  writer = event_file_writer.EventFileWriter(logdir)
  values = []
  for tag, v in (tensors or {}).items():
    meta = summary_pb2.SummaryMetadata(
      plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    )
    values.append(
      summary_pb2.Summary.Value(
        tag=tag, metadata=meta, tensor=tensor_util.make_tensor_proto(np.float32(v))
      )
    )
  for tag, v in (simple or {}).items():
    values.append(summary_pb2.Summary.Value(tag=tag, simple_value=v))
  writer.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=values)))
  writer.close()


class TfEventsTest(absltest.TestCase):
  def test_dirs_and_scalars(self):
    root = tempfile.mkdtemp()
    _write(os.path.join(root, "summaries", "train"), 1, tensors={"loss": 2.5})
    _write(os.path.join(root, "summaries", "eval"), 1, simple={"accuracy": 0.75})
    os.makedirs(os.path.join(root, "empty"))
    self.assertCountEqual(
      test_utils.get_tfevent_log_dirs(root), ["summaries/train", "summaries/eval"]
    )
    self.assertEqual(test_utils.get_tfevent_scalars(root), {"loss": 2.5, "accuracy": 0.75})


if __name__ == "__main__":
  absltest.main()
