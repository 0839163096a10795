r"""Post-training quantization of a checkpoint: a float model's weights -> a quantized one's.

  ./bazelw run //paxml/tools:quantize_checkpoint -- --exp=demo.DemoLmInt8Ptq \
      --float_job_log_dir=/tmp/pax_demo --job_log_dir=/tmp/pax_demo_int8 [--step=800]

`--exp` is the serving experiment: the float experiment's model rewritten by
praxis.layers.quantization.quantize with mode INFERENCE (e.g. `@quantize.for_transformer(
quantization_type=PTQ, mode=INFERENCE)`). The tool

  1. reads the weights (mdl_vars["params"]) of the float checkpoint (newest, or --step);
  2. builds the same model with every quantization.mode set to MATERIALIZE, whose variables
     are the float model's, and runs its quantize_weight(): quantized layers turn each float
     weight into int weights plus per-channel scales (w -> w, w_quantized_scale), the other
     layers pass theirs through;
  3. writes those weights as a checkpoint of the same step under --job_log_dir/checkpoints,
     without optimizer state (nothing trains from it),

so that `main --exp=<serving experiment> --job_log_dir=<that dir> --mode=eval` (or decode)
runs the int8 model. It prints how many weights are integer and the weights' bytes before and
after.
"""

from __future__ import annotations

from collections.abc import Sequence
import copy
import os
import sys
from typing import Any

from absl import app
from absl import flags
import jax
import numpy as np

from paxml import checkpoints
from paxml import experiment_registry
from paxml import tasks_lib
from paxml import train_state_names
from paxml import train_states
from praxis import base_layer
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantize

# Registers the built-in experiments, so short names (demo.DemoLmInt8Ptq) resolve.
from paxml.tasks.lm.params import demo  # pylint: disable=unused-import,g-bad-import-order

_EXP = flags.DEFINE_string(
  "exp", None, "The serving (quantized, mode INFERENCE) experiment, e.g. demo.DemoLmInt8Ptq."
)
_FLOAT_DIR = flags.DEFINE_string(
  "float_job_log_dir", None, "job_log_dir (or its checkpoints/ directory) of the float run."
)
_JOB_LOG_DIR = flags.DEFINE_string(
  "job_log_dir", None, "Where the quantized checkpoint goes (under checkpoints/)."
)
_STEP = flags.DEFINE_integer("step", None, "Float checkpoint step to convert; default: newest.")


class QuantizeCheckpointError(ValueError):
  """The float checkpoint or the serving experiment does not fit this conversion."""


def _checkpoint_dir(job_log_dir: str) -> str:
  sub = checkpoints.checkpoint_dir(job_log_dir)
  return sub if os.path.isdir(sub) else job_log_dir


def read_float_params(float_dir: str, step: int | None = None) -> tuple[int, Any]:
  """(step, params) of the float checkpoint in `float_dir` (a job_log_dir or checkpoints/)."""
  reader = checkpoints.CheckpointReader(_checkpoint_dir(float_dir))
  step = reader.latest_step() if step is None else step
  if step is None:
    raise QuantizeCheckpointError(f"no checkpoint in {float_dir}: train the float model first.")
  saved = reader.state_metadata(step)
  abstract = saved
  for key in train_state_names.params_key(saved):
    abstract = abstract[key]
  restored = reader.restore_params(abstract, step)
  return restored[0], restored[1]


def materialize_model(model: base_layer.BaseLayer) -> base_layer.BaseLayer:
  """The serving model with every quantization.mode MATERIALIZE: the float weights' layout."""
  config = copy.deepcopy(model.hparams)
  quantize._set_mode(config, quantization_hparams.QuantizationMode.MATERIALIZE)  # pylint: disable=protected-access
  return base_layer.instantiate(config)


def quantize_params(model: base_layer.BaseLayer, float_params: Any) -> Any:
  """The serving model's weights ({'params': ...} tree) from the float model's."""
  materialized = materialize_model(model)
  out = jax.jit(
    lambda p: materialized.apply({base_layer.PARAMS: p}, method=materialized.quantize_weight)
  )(float_params)
  return out[base_layer.PARAMS]


def weight_bytes(tree: Any) -> int:
  return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def int_leaves(tree: Any) -> list[str]:
  """Paths of the integer arrays in `tree`."""
  flat = jax.tree_util.tree_flatten_with_path(tree)[0]
  return [
    jax.tree_util.keystr(path) for path, x in flat if np.issubdtype(np.dtype(x.dtype), np.integer)
  ]


def convert(exp: Any, float_dir: str, job_log_dir: str, step: int | None = None) -> dict:
  """Writes the quantized checkpoint of serving experiment `exp` (a registered name or an
  experiment instance); returns a summary (step, weight bytes, integer weights)."""
  experiment = experiment_registry.get_experiment(exp)() if isinstance(exp, str) else exp
  task = tasks_lib.to_task_config(experiment.task())
  step, float_params = read_float_params(float_dir, step)
  params = quantize_params(task.model, float_params)
  state = train_states.TrainState(
    step=np.int32(step), mdl_vars={base_layer.PARAMS: params}, opt_states=[]
  )
  store = checkpoints.save_checkpoint(
    state, checkpoints.checkpoint_dir(job_log_dir), overwrite=True
  )
  store.wait_until_finished()
  store.close()
  return {
    "step": step,
    "float_bytes": weight_bytes(float_params),
    "quantized_bytes": weight_bytes(params),
    "int_weights": int_leaves(params),
  }


def main(argv: Sequence[str]) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  try:
    summary = convert(_EXP.value, _FLOAT_DIR.value, _JOB_LOG_DIR.value, _STEP.value)
  except (experiment_registry.Error, checkpoints.CheckpointError, QuantizeCheckpointError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  ratio = summary["quantized_bytes"] / summary["float_bytes"]
  print(
    f"step {summary['step']}: weights {summary['float_bytes']} -> {summary['quantized_bytes']} "
    f"bytes ({ratio:.3f}); {len(summary['int_weights'])} integer arrays"
  )
  for name in summary["int_weights"]:
    print(f"  int: {name}")
  return 0


if __name__ == "__main__":
  flags.mark_flags_as_required(["exp", "float_job_log_dir", "job_log_dir"])
  app.run(main)
