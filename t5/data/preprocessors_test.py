"""The t5.data shim: Pax's C4 preprocessing chain on a small in-memory dataset."""

from absl.testing import absltest
import seqio
import tensorflow as tf

import t5.data
from t5.data import preprocessors


def _docs(*docs):
  return tf.data.Dataset.from_generator(
    lambda: ({"targets": d} for d in docs),
    output_signature={"targets": tf.TensorSpec([None], tf.int32)},
  )


class PreprocessorsTest(absltest.TestCase):
  def test_concat_then_split(self):
    docs = _docs([1, 2, 3], [4, 5], [6, 7, 8, 9], [10])
    joined = list(preprocessors.reduce_concat_tokens(docs, batch_size=3).as_numpy_iterator())
    self.assertEqual([list(x["targets"]) for x in joined], [[1, 2, 3, 4, 5, 6, 7, 8, 9], [10]])
    pieces = preprocessors.split_tokens_to_targets_length(
      preprocessors.reduce_concat_tokens(docs, batch_size=3), sequence_length={"targets": 4}
    )
    self.assertEqual(
      [list(x["targets"]) for x in pieces.as_numpy_iterator()],
      [[1, 2, 3, 4], [5, 6, 7, 8], [9], [10]],
    )

  def test_rekey(self):
    docs = tf.data.Dataset.from_tensors({"text": "a", "id": 3})
    out = preprocessors.rekey(docs, key_map={"inputs": None, "targets": "text"})
    self.assertEqual(list(out.as_numpy_iterator()), [{"inputs": b"", "targets": b"a"}])

  def test_task_registry_takes_t5s_call_shape(self):
    source = seqio.FunctionDataSource(lambda split, shuffle_files: _docs([1, 2]), splits=["train"])
    task = t5.data.TaskRegistry.add(
      "t5_shim_test_task",
      seqio.Task,
      source=source,
      output_features={"targets": t5.data.Feature(t5.data.PassThroughVocabulary(size=16))},
    )
    self.assertIs(seqio.get_mixture_or_task("t5_shim_test_task"), task)


if __name__ == "__main__":
  absltest.main()
