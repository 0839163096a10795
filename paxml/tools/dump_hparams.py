r"""Writes an experiment's full configuration as text: its UPPERCASE fields, datasets and task.

  ./bazelw run //paxml/tools:dump_hparams -- --exp=tasks.lm.params.lm_cloud.LmCloudSpmd2B \
      [--output=/tmp/params.txt]

The text is what the trainer writes to `model_params.txt` and `experiment_cls_vars.txt` in a
job_log_dir (paxml/job_files.py), so a run's configuration can be read, or diffed against
another's, before anything is trained.
"""

from collections.abc import Sequence
import sys

from absl import app
from absl import flags

from paxml import experiment_registry
from paxml import job_files

# Registers the built-in experiments, so short names (lm_cloud.LmCloudSpmd2B) resolve.
from paxml.tasks.lm.params import c4  # pylint: disable=unused-import
from paxml.tasks.lm.params import demo  # pylint: disable=unused-import
from paxml.tasks.lm.params import lm_cloud  # pylint: disable=unused-import

_EXP = flags.DEFINE_string("exp", None, "Registered experiment name (or a dotted suffix).")
_OUTPUT = flags.DEFINE_string("output", None, "Write here instead of stdout.")


def hparams_text(exp: str) -> str:
  """The experiment's class variables, then its datasets and task as model_params text."""
  experiment = experiment_registry.get_experiment(exp)()
  if hasattr(experiment, "DATA_DIR") and not experiment.DATA_DIR:
    experiment.DATA_DIR = "<DATA_DIR>"  # Only printed: the files are not read.
  return "\n".join(
    [
      f"# {experiment_registry.canonical_name(type(experiment))}",
      "# experiment_cls_vars",
      job_files.experiment_cls_vars_text(experiment),
      "# model_params",
      job_files.model_params_text(experiment.datasets(), experiment.task()),
    ]
  )


def main(argv: Sequence[str]) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  try:
    text = hparams_text(_EXP.value)
  except (experiment_registry.Error, ValueError, TypeError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      f.write(text)
  else:
    print(text)
  return 0


if __name__ == "__main__":
  flags.mark_flags_as_required(["exp"])
  app.run(main)
