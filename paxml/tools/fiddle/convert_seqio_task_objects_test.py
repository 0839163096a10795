"""Tests of convert_seqio_task_objects with a task registered by the test."""

from absl.testing import absltest
import fiddle as fdl
import seqio
import tensorflow as tf

from paxml.tools.fiddle import convert_seqio_task_objects
from praxis import pax_fiddle

_NAME = "p31_convert_seqio_task_objects_test"


def _source(split, shuffle_files, seed=None):
  del split, shuffle_files, seed
  return tf.data.Dataset.from_tensor_slices({"x": [1, 2]})


class ConvertSeqioTaskObjectsTest(absltest.TestCase):
  def test_tasks_become_configs_that_build_them(self):
    task = seqio.TaskRegistry.add(
      _NAME, seqio.FunctionDataSource(_source, splits=["train"]), output_features={}
    )
    self.addCleanup(seqio.TaskRegistry.remove, _NAME)
    converted = convert_seqio_task_objects.convert_seqio_tasks({"a": [task], "b": 3})
    self.assertIsInstance(converted["a"][0], pax_fiddle.Config)
    self.assertEqual(fdl.ordered_arguments(converted["a"][0]), {"task_or_mixture_name": _NAME})
    self.assertIs(pax_fiddle.build(converted)["a"][0], task)
    self.assertEqual(converted["b"], 3)


if __name__ == "__main__":
  absltest.main()
