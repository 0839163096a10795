"""Tests of the ImageNet input on a few synthetic JPEG records: batch shapes, one-hot labels
with the id offset, padding weights, and the eval crop against a direct NumPy crop."""

import os
import tempfile

from absl.testing import absltest
import numpy as np
from paxml.tasks.vision import input_generator
from paxml.tasks.vision import resnet_preprocessing
import tensorflow as tf


def _jpeg(image: np.ndarray) -> bytes:
  return tf.io.encode_jpeg(tf.constant(image, tf.uint8), quality=100).numpy()


def _write_records(path: str, labels) -> None:
  rng = np.random.default_rng(0)
  with tf.io.TFRecordWriter(path) as writer:
    for label in labels:
      image = rng.integers(0, 256, size=(40, 48, 3), dtype=np.uint8)
      example = tf.train.Example(
        features=tf.train.Features(
          feature={
            "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[_jpeg(image)])),
            "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
          }
        )
      )
      writer.write(example.SerializeToString())


class ImageNetInputTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    _write_records(os.path.join(self.dir, "validation-00000-of-00001"), [1, 3, 5])

  def test_eval_batches_pad_the_last_one(self):
    p = input_generator.ImageNetValidation.Params()
    p.file_pattern = "tfrecord:" + os.path.join(self.dir, "validation-*-of-*")
    p.set(batch_size=2, data_shape=(16, 16, 3), num_classes=6, num_batcher_threads=1)
    inp = p.Instantiate()
    first, second = inp.GetPreprocessedInputBatch(), inp.get_next()
    self.assertEqual(first.image.shape, (2, 16, 16, 3))
    # Labels 1, 3, 5 shifted by label_id_offset=-1.
    self.assertEqual(first.label_probs.argmax(-1).tolist(), [0, 2])
    np.testing.assert_array_equal(second.label_probs[0], np.eye(6)[4])
    np.testing.assert_array_equal(second.weight, [1.0, 0.0])
    self.assertTrue(np.all(second.image[1] == 0))

  def test_eval_crop_is_the_central_square(self):
    # A smooth image, so JPEG and bicubic resizing barely change it.
    y, x = np.mgrid[0:64, 0:96]
    image = np.stack([y * 2, x * 2, np.full_like(x, 128)], -1).astype(np.uint8)
    out = resnet_preprocessing.preprocess_image(tf.constant(_jpeg(image)), image_size=56).numpy()
    # Reference: side = 56 / (56 + 8) * 64 = 56 pixels centred; resize is then the identity.
    side = 56
    top, left = (64 - side + 1) // 2, (96 - side + 1) // 2
    expected = image[top : top + side, left : left + side].astype(np.float32)
    self.assertEqual(out.shape, (56, 56, 3))
    self.assertLess(np.abs(out - expected).mean(), 3.0)

  def test_train_crop_shape_and_range(self):
    image = np.random.default_rng(1).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    out = resnet_preprocessing.preprocess_image(
      tf.constant(_jpeg(image)), is_training=True, image_size=24
    ).numpy()
    self.assertEqual(out.shape, (24, 24, 3))
    self.assertEqual(out.dtype, np.float32)
    self.assertGreater(out.max(), 1.0)  # Values stay in [0, 255], not rescaled.


if __name__ == "__main__":
  absltest.main()
