"""Reading TensorBoard event files back: the one reader the tests use.

paxml.summaries writes TF2 tensor events (as tf.summary does), so everything here reads tensors.
`path` may be a directory of event files (all are read, as TensorBoard does) or one event file.
"""

import glob
import os
import sys
import types

# TensorBoard's reader imports TensorFlow when it is installed (seconds per test process) unless
# the module tensorboard.compat.notf exists: TensorBoard's own switch (its no_tensorflow target)
# to its pure-Python stub, which reads local event files the same way. tf.summary (which
# TensorBoard implements on the same switch) then fails in this process; nothing here uses it.
sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))

import numpy as np
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util


def _load(path: str) -> event_accumulator.EventAccumulator:
  accumulator = event_accumulator.EventAccumulator(
    path, size_guidance={event_accumulator.TENSORS: 0}
  )  # 0: keep every event.
  accumulator.Reload()
  return accumulator


def tags(path: str) -> list[str]:
  """The sorted tags written under `path`."""
  return sorted(_load(path).Tags()["tensors"])


def read_tensors(path: str, tag: str) -> list[tuple[int, np.ndarray]]:
  """[(step, value)] of `tag`, in the order written; [] when `tag` was never written."""
  accumulator = _load(path)
  if tag not in accumulator.Tags()["tensors"]:
    return []
  return [(e.step, tensor_util.make_ndarray(e.tensor_proto)) for e in accumulator.Tensors(tag)]


def read_scalars(path: str) -> dict[str, dict[int, float]]:
  """{tag: {step: value}} of every scalar under `path` (a later write of a step wins)."""
  accumulator = _load(path)
  result = {}
  for tag in accumulator.Tags()["tensors"]:
    for event in accumulator.Tensors(tag):
      value = tensor_util.make_ndarray(event.tensor_proto)
      if value.ndim == 0 and value.dtype.kind in "fiub":
        result.setdefault(tag, {})[event.step] = float(value)
  return result


def scalars_by_file(
  job_log_dir: str, tag: str = "loss", split: str = "train"
) -> list[dict[int, float]]:
  """[{step: value of `tag`}] per event file of <job_log_dir>/summaries/<split>, oldest file
  first: a run that resumes writes a new file, so this shows what each run wrote."""
  paths = sorted(
    glob.glob(os.path.join(job_log_dir, "summaries", split, "events.*")), key=os.path.getmtime
  )
  return [read_scalars(path).get(tag, {}) for path in paths]
