"""Pax's metric summary helpers (`paxml.summary_utils`), the part that writes clu and SeqIO
metric values.

As in Pax, writing goes to the writer of the innermost `get_summary_writer(dir)` block (Pax sets
the TF default writer; here a paxml.summaries event writer, which writes the same event files
without TensorFlow).

  get_summary_writer               opens `<summary_dir>` for the block
  write_clu_metric_summaries       clu values (metric_utils.compute_metric_values) -> summaries
  write_seqio_metric_summaries     SeqIO metric dicts -> summaries under `<prefix>/<name>`

Not written (a warning names each): audio, and raw `clu.values.Summary` lists (videos); the event
writer has no audio encoder and no raw-summary path.
"""

from collections.abc import Iterator, Mapping, Sequence
import contextlib
import threading
from typing import Any

from absl import logging
import clu.values as clu_values
from etils import epath
import numpy as np
import seqio

from paxml import summaries

_local = threading.local()


def _writer() -> summaries.EventFileWriter:
  stack = getattr(_local, "writers", None)
  if not stack:
    raise RuntimeError(
      "no summary writer is open; write summaries inside `with summary_utils."
      "get_summary_writer(summary_dir):`"
    )
  return stack[-1]


@contextlib.contextmanager
def get_summary_writer(summary_dir: epath.PathLike) -> Iterator[summaries.EventFileWriter]:
  """Opens an event file in `summary_dir` as the current writer for the block; closes it."""
  writer = summaries.EventFileWriter(str(summary_dir))
  _local.writers = getattr(_local, "writers", []) + [writer]
  try:
    yield writer
  finally:
    _local.writers.pop()
    writer.close()


def _skip(name: str, what: str) -> None:
  logging.warning("Summary %s not written: %s summaries are not supported here.", name, what)


def write_clu_metric_summaries(metric_values: Mapping[str, Any], step_i: int) -> None:
  """Writes each clu value of `metric_values` ({name: value}) at `step_i`."""
  writer = _writer()
  for name, value in metric_values.items():
    if isinstance(value, clu_values.Scalar):
      writer.scalar(name, float(np.asarray(value.value)), step_i)
    elif isinstance(value, clu_values.Text):
      writer.text(name, value.value, step_i)
    elif isinstance(value, clu_values.Image):
      writer.image(name, value.value, step_i)
    elif isinstance(value, clu_values.Histogram):
      writer.histogram(name, value.value, step_i, bins=value.num_buckets)
    elif isinstance(value, clu_values.Audio):
      _skip(name, "audio")
    elif isinstance(value, clu_values.Summary) or (
      isinstance(value, list) and all(isinstance(v, clu_values.Summary) for v in value)
    ):
      _skip(name, "raw (video)")
    else:
      raise ValueError(
        f"summary {name!r}: {type(value)} is not a clu value (Scalar, Text, Image, Histogram, "
        "Audio); compute it with metric_utils.compute_metric_values"
      )


def write_seqio_metric_summaries(
  seqio_metrics: Sequence[Mapping[str, Any]], metric_name_prefix: str, step: int
) -> None:
  """Writes every SeqIO metric value (or float) of each dict as `<prefix>/<name>` at `step`."""
  writer = _writer()
  for metrics in seqio_metrics:
    for key, value in metrics.items():
      name = f"{metric_name_prefix}/{key}"
      if isinstance(value, seqio.metrics.Text):
        text = value.textdata
        writer.text(name, text.decode() if isinstance(text, bytes) else text, step)
      elif isinstance(value, seqio.metrics.Image):
        writer.image(name, value.image, step, max_outputs=value.max_outputs)
      elif isinstance(value, seqio.metrics.Histogram):
        writer.histogram(name, value.values, step, bins=value.bins)
      elif isinstance(value, seqio.metrics.Audio):
        _skip(name, "audio")
      elif isinstance(value, seqio.metrics.Generic):
        _skip(name, "generic tensor")
      elif isinstance(value, seqio.metrics.Scalar):
        writer.scalar(name, float(value.value), step)
      else:
        writer.scalar(name, float(value), step)
