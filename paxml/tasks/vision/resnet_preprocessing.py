"""ResNet's ImageNet preprocessing (Pax's `resnet_preprocessing`), in TensorFlow.

Training: decode a random crop covering 8%-100% of the image with aspect ratio in [3/4, 4/3]
(falling back to the center crop when sampling keeps the whole image), resize it bicubically to
`image_size`, flip left-right at random. Evaluation: decode the central square whose side is
`image_size / (image_size + padding)` of the shorter side, with padding chosen so that the crop
is CROP_FRACTION (0.875) of it, and resize. Pixel values stay in [0, 255]; the output is float32
(or bfloat16) `[image_size, image_size, 3]`.
"""

import tensorflow as tf

IMAGE_SIZE = 224
CROP_FRACTION = 0.875


def distorted_bounding_box_crop(
  image_bytes,
  bbox,
  min_object_covered=0.1,
  aspect_ratio_range=(0.75, 1.33),
  area_range=(0.05, 1.0),
  max_attempts=100,
):
  """Decodes only a randomly sampled window of the JPEG (see
  `tf.image.sample_distorted_bounding_box`); `bbox` [1, num_boxes, 4] in [0, 1)."""
  with tf.name_scope("distorted_bounding_box_crop"):
    shape = tf.image.extract_jpeg_shape(image_bytes)
    begin, size, _ = tf.image.sample_distorted_bounding_box(
      shape,
      bounding_boxes=bbox,
      min_object_covered=min_object_covered,
      aspect_ratio_range=aspect_ratio_range,
      area_range=area_range,
      max_attempts=max_attempts,
      use_image_if_no_bounding_boxes=True,
    )
    # Window as (y, x, height, width).
    window = tf.stack([begin[0], begin[1], size[0], size[1]])
    return tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)


def _resize(image, image_size):
  return tf.image.resize([image], [image_size, image_size], method=tf.image.ResizeMethod.BICUBIC)[0]


def _decode_and_center_crop(image_bytes, image_size):
  shape = tf.image.extract_jpeg_shape(image_bytes)
  height, width = shape[0], shape[1]
  padding = round(image_size * (1 / CROP_FRACTION - 1))
  side = tf.cast(
    image_size / (image_size + padding) * tf.cast(tf.minimum(height, width), tf.float32), tf.int32
  )
  top = (height - side + 1) // 2
  left = (width - side + 1) // 2
  image = tf.image.decode_and_crop_jpeg(image_bytes, tf.stack([top, left, side, side]), channels=3)
  return _resize(image, image_size)


def _decode_and_random_crop(image_bytes, image_size):
  whole = tf.constant([0.0, 0.0, 1.0, 1.0], dtype=tf.float32, shape=[1, 1, 4])
  image = distorted_bounding_box_crop(
    image_bytes,
    whole,
    min_object_covered=0.1,
    aspect_ratio_range=(3.0 / 4, 4.0 / 3.0),
    area_range=(0.08, 1.0),
    max_attempts=10,
  )
  # Sampling gave up and kept the whole image: use the evaluation crop instead.
  kept_whole = tf.reduce_all(tf.equal(tf.image.extract_jpeg_shape(image_bytes), tf.shape(image)))
  return tf.cond(
    kept_whole,
    lambda: _decode_and_center_crop(image_bytes, image_size),
    lambda: _resize(image, image_size),
  )


def _to_dtype(image, image_size, use_bfloat16):
  image = tf.reshape(image, [image_size, image_size, 3])
  return tf.image.convert_image_dtype(image, dtype=tf.bfloat16 if use_bfloat16 else tf.float32)


def preprocess_for_train(image_bytes, use_bfloat16, image_size=IMAGE_SIZE):
  image = tf.image.random_flip_left_right(_decode_and_random_crop(image_bytes, image_size))
  return _to_dtype(image, image_size, use_bfloat16)


def preprocess_for_eval(image_bytes, use_bfloat16, image_size=IMAGE_SIZE):
  return _to_dtype(_decode_and_center_crop(image_bytes, image_size), image_size, use_bfloat16)


def preprocess_image(image_bytes, is_training=False, use_bfloat16=False, image_size=IMAGE_SIZE):
  """JPEG bytes -> `[image_size, image_size, 3]` image in [0, 255] (module docstring)."""
  if is_training:
    return preprocess_for_train(image_bytes, use_bfloat16, image_size)
  return preprocess_for_eval(image_bytes, use_bfloat16, image_size)
