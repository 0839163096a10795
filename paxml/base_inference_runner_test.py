"""Tests of BaseInferenceRunner: outputs serialize per row and read back equal."""

from typing import Any

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from paxml import base_inference_runner
from praxis import pax_fiddle
from praxis import py_utils


class _Doubler(base_inference_runner.BaseInferenceRunner):
  output_schema: Any = None

  def infer(self, train_state, prng_key, var_weight_hparams, input_batch):
    return py_utils.NestedMap(x=input_batch.x * 2, tag=input_batch.tag)


class BaseInferenceRunnerTest(absltest.TestCase):
  def test_serialize_outputs_row_by_row(self):
    schema = py_utils.NestedMap(
      x=tfds.features.Tensor(shape=(2,), dtype=tf.int32), tag=tfds.features.Text()
    )
    runner = pax_fiddle.build(pax_fiddle.Config(_Doubler, output_schema=schema))
    batch = py_utils.NestedMap(
      x=np.arange(6, dtype=np.int32).reshape(3, 2), tag=np.array([b"a", b"b", b"c"], dtype=object)
    )
    serialized = runner.serialize_outputs(runner.infer(None, None, None, batch))
    self.assertLen(serialized, 3)
    features = tfds.features.FeaturesDict(schema)
    row = features.deserialize_example(serialized[2])
    np.testing.assert_array_equal(row["x"].numpy(), [8, 10])
    self.assertEqual(row["tag"].numpy(), b"c")

  def test_infer_and_schema_are_required(self):
    with self.assertRaises(TypeError):
      base_inference_runner.BaseInferenceRunner()  # pylint: disable=abstract-class-instantiated


if __name__ == "__main__":
  absltest.main()
