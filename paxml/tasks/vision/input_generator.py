"""Pax's ImageNet inputs: batches of preprocessed images from TFRecords of JPEG examples.

Each record holds `image/encoded` (JPEG bytes) and `image/class/label` (int64, 1-based in the
standard ImageNet TFRecords: `label_id_offset=-1` makes it 0-based). A batch is a NestedMap:
  image: [b, h, w, d] float32 in [0, 255] (resnet_preprocessing);
  label_probs: [b, num_classes] one-hot;
  weight: [b], 1.0 for real examples and 0.0 for the padding of a last, short batch.

Pax's generator was a Lingvo one (`Params()`, `GetPreprocessedInputBatch()`); this one is a
praxis `BaseInput` over tf.data and keeps those two names. Lingvo's threading knobs
(num_batcher_threads, file_parallelism, file_buffer_size) set tf.data's parallelism and
shuffle buffer.
"""

from collections.abc import Sequence
import dataclasses
from typing import Any

from absl import logging
import numpy as np
from paxml.tasks.vision import resnet_preprocessing
from praxis import base_input
from praxis import py_utils
import tensorflow as tf

TRAIN_EXAMPLES = 1281167  # ImageNet's training set.
EVAL_EXAMPLES = 50000  # ImageNet's validation set.
IMAGENET_DATA_DIR = "/PATH/TO/IMAGENET_DATA/"


class BaseImageNetInput(base_input.BaseInput):
  """ImageNet-style TFRecords (module docstring). `file_pattern` may start with 'tfrecord:'.

  Training inputs shuffle files and examples and repeat; evaluation inputs read once in order
  and pad the last batch (weight 0).
  """

  batch_size: int | None = 128
  num_classes: int = 1000
  data_shape: Sequence[int] = (224, 224, 3)
  label_id_offset: int = -1
  file_pattern: str = ""
  num_samples: int = 0
  num_batcher_threads: int = 64
  file_parallelism: int = 64
  file_buffer_size: int = 10000
  file_random_seed: int = 0
  use_per_host_infeed: bool = True
  fprop_dtype: str | None = None
  _iterator: Any = dataclasses.field(default=None, init=False, repr=False)

  @classmethod
  def Params(cls):  # pylint: disable=invalid-name
    """Pax's (Lingvo's) name for this input's config."""
    return cls.HParams()

  def _is_training(self) -> bool:
    return self.is_training

  def _preprocess(self, image_bytes):
    return resnet_preprocessing.preprocess_image(
      image_bytes, self._is_training(), image_size=self.data_shape[0]
    )

  def _parse(self, record):
    features = tf.io.parse_single_example(
      record,
      {
        "image/encoded": tf.io.FixedLenFeature((), tf.string, default_value=""),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
      },
    )
    image = self._preprocess(features["image/encoded"])
    if self.fprop_dtype:
      image = tf.cast(image, self.fprop_dtype)
    label = tf.cast(features["image/class/label"], tf.int32) + self.label_id_offset
    return image, tf.one_hot(label, self.num_classes)

  def _dataset(self) -> tf.data.Dataset:
    pattern = self.file_pattern.removeprefix("tfrecord:")
    training = self._is_training()
    files = tf.data.Dataset.list_files(pattern, shuffle=training, seed=self.file_random_seed)
    if self.use_per_host_infeed and self.num_infeed_hosts > 1:
      files = files.shard(self.num_infeed_hosts, self.infeed_host_index)
    records = files.interleave(
      tf.data.TFRecordDataset,
      cycle_length=max(1, self.file_parallelism),
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=not training,
    )
    if training:
      records = records.shuffle(self.file_buffer_size, seed=self.input_random_seed).repeat()
    examples = records.map(self._parse, num_parallel_calls=max(1, self.num_batcher_threads))
    return examples.batch(self.batch_size).prefetch(1)

  def get_next(self) -> py_utils.NestedMap:
    if self._iterator is None:
      logging.info("%s reads %s (image shape %s)", self.name, self.file_pattern, self.data_shape)
      self._iterator = iter(self._dataset())
    images, label_probs = (x.numpy() for x in next(self._iterator))
    return self._padded(images, label_probs)

  def _padded(self, images: np.ndarray, label_probs: np.ndarray) -> py_utils.NestedMap:
    """Pads a short batch to batch_size; weight marks the real rows."""
    n, b = images.shape[0], self.batch_size
    pad = [(0, b - n)]
    return py_utils.NestedMap(
      image=np.pad(images, pad + [(0, 0)] * 3),  # [b, h, w, d]
      label_probs=np.pad(label_probs, pad + [(0, 0)]),  # [b, num_classes]
      weight=np.pad(np.ones([n], np.float32), pad),  # [b]
    )

  # Pax's (Lingvo's) name.
  GetPreprocessedInputBatch = get_next  # noqa: N815

  def reset(self) -> None:
    self._iterator = None

  def ImageBytesToBatch(self, image_bytes):  # pylint: disable=invalid-name
    """One preprocessed image as a batch of one: NestedMap(image=[1, h, w, d])."""
    return py_utils.NestedMap(image=self._preprocess(image_bytes)[tf.newaxis, ...])


class ImageNetTrain(BaseImageNetInput):
  """ImageNet's training set under IMAGENET_DATA_DIR."""

  is_training: bool = True
  file_pattern: str = f"tfrecord:{IMAGENET_DATA_DIR}train-*-of-*"
  num_samples: int = TRAIN_EXAMPLES

  def _is_training(self) -> bool:
    return True


class ImageNetValidation(BaseImageNetInput):
  """ImageNet's validation set under IMAGENET_DATA_DIR."""

  file_pattern: str = f"tfrecord:{IMAGENET_DATA_DIR}validation-*-of-*"
  num_samples: int = EVAL_EXAMPLES

  def _is_training(self) -> bool:
    return False
