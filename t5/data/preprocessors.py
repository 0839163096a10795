"""The three `t5.data.preprocessors` that Pax's C4 tasks use, on tf.data.

rekey                            SeqIO's: {new key: example[old key]} ('' for a None old key)
reduce_concat_tokens             concatenates `feature_key` of every `batch_size` examples
                                 into one example (documents run together, GPT-style)
split_tokens_to_targets_length   cuts each example's `targets` into pieces of the task's
                                 targets length (the last piece shorter)
"""

from hostenv import quiet_tensorflow

tf = quiet_tensorflow.import_tensorflow()
import seqio  # After TensorFlow's quiet import: seqio imports TensorFlow too.

rekey = seqio.preprocessors.rekey


def reduce_concat_tokens(
  dataset: tf.data.Dataset, feature_key: str = "targets", batch_size: int = 128
) -> tf.data.Dataset:
  """One example per `batch_size` examples: their `feature_key` tokens end to end."""
  dataset = dataset.map(
    lambda x: {feature_key: x[feature_key]}, num_parallel_calls=tf.data.AUTOTUNE
  )
  dataset = dataset.padded_batch(batch_size, padded_shapes={feature_key: [-1]})

  def concat(batch):
    tokens = batch[feature_key]  # [batch_size, longest]; padding is 0
    return {feature_key: tf.boolean_mask(tokens, tf.not_equal(tokens, 0))}

  return dataset.map(concat, num_parallel_calls=tf.data.AUTOTUNE)


def split_tokens(
  dataset: tf.data.Dataset, max_tokens_per_segment: int, feature_key: str = "targets"
) -> tf.data.Dataset:
  """Each example's `feature_key` in consecutive pieces of at most `max_tokens_per_segment`."""

  def split(x):
    tokens = x[feature_key]
    n = tf.size(tokens)
    pieces = (n + max_tokens_per_segment - 1) // max_tokens_per_segment
    padded = tf.pad(tokens, [[0, pieces * max_tokens_per_segment - n]])
    rows = tf.reshape(padded, [pieces, max_tokens_per_segment])
    lengths = tf.minimum(n - tf.range(pieces) * max_tokens_per_segment, max_tokens_per_segment)
    return tf.data.Dataset.from_tensor_slices({"rows": rows, "lengths": lengths})

  dataset = dataset.flat_map(split)
  return dataset.map(
    lambda x: {feature_key: x["rows"][: x["lengths"]]}, num_parallel_calls=tf.data.AUTOTUNE
  )


def split_tokens_to_targets_length(
  dataset: tf.data.Dataset, sequence_length: dict[str, int], output_features=None, **unused
) -> tf.data.Dataset:
  """`split_tokens` at the task's targets length (SeqIO passes `sequence_length`)."""
  del output_features, unused
  return split_tokens(dataset, sequence_length["targets"])
