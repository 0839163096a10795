"""Reading the trainer's TensorBoard event files back, for the integration tests."""

import glob
import os

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util


def scalars_by_file(job_log_dir: str, tag: str = "loss",
                    split: str = "train") -> list[dict[int, float]]:
  """[{step: value of `tag`}] per event file of summaries/<split>, oldest file first (a run that
  resumes writes a new file)."""
  result = []
  for path in sorted(glob.glob(os.path.join(job_log_dir, "summaries", split, "events.*")),
                     key=os.path.getmtime):
    acc = event_accumulator.EventAccumulator(path, size_guidance={"tensors": 0})
    acc.Reload()
    events = acc.Tensors(tag) if tag in acc.Tags()["tensors"] else []
    result.append({e.step: float(tensor_util.make_ndarray(e.tensor_proto)) for e in events})
  return result
