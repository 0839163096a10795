"""TensorBoard scalars under `<job_log_dir>/summaries/<name>/`, via tf.summary.

Pax writes train scalars to `summaries/train` (and eval ones to
`summaries/eval_train`, `summaries/eval_test_<name>`); `tensorboard
--logdir=<job_log_dir>/summaries` shows them side by side.
"""

from collections.abc import Mapping
import os

import tensorflow as tf

# TensorFlow is here only to write event files. Hide any GPU from it, or a GPU
# build of TF reserves most of the GPU memory that JAX needs.
tf.config.set_visible_devices([], "GPU")


def summary_dir(job_log_dir: str, name: str) -> str:
  """Returns the event-file directory for summaries called `name` (e.g. 'train')."""
  return os.path.join(job_log_dir, "summaries", name)


class SummaryWriter:
  """Writes scalar summaries; a no-op when `enabled` is False.

  Only one process of a multi-host job should write (Pax: process 0); the
  others pass `enabled=False` and keep the same code path.
  """

  def __init__(self, job_log_dir: str, name: str, *, enabled: bool = True):
    self.directory = summary_dir(job_log_dir, name)
    if enabled:
      self._writer = tf.summary.create_file_writer(self.directory)
    else:
      self._writer = tf.summary.create_noop_writer()

  def scalars(self, step: int, values: Mapping[str, float]) -> None:
    """Records each `tag: value` at `step`."""
    with self._writer.as_default(step=step):
      for tag, value in values.items():
        tf.summary.scalar(tag, value)

  def flush(self) -> None:
    """Makes everything written so far visible to readers."""
    self._writer.flush()

  def close(self) -> None:
    """Flushes and closes the event file."""
    self._writer.close()

  def __enter__(self) -> "SummaryWriter":
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()
