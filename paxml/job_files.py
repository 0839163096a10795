"""The text files Pax leaves in `job_log_dir`, describing what a run used.

  model_params.txt            the datasets' and the task's configs, one `path : value` per line
  experiment_cls_vars.txt     the experiment class's UPPERCASE fields and where each is defined
  post_init_model_params.txt  every model variable: path, shape, dtype, logical axes, sharding
  input_specs.json            shape and dtype of each field of a training batch (per host)

A non-train mode prefixes the first two with the mode (`eval_model_params.txt`), as Pax does,
so an eval job does not overwrite the trainer's files. Only process 0 writes
(`write_*` does nothing elsewhere), so a multi-host job leaves one copy.
"""

import json
import os
from typing import Any

import flax.linen as nn
import jax

from paxml import leader
from praxis import base_hyperparams
from praxis import pytypes

MODEL_PARAMS = "model_params.txt"
EXPERIMENT_CLS_VARS = "experiment_cls_vars.txt"
POST_INIT_MODEL_PARAMS = "post_init_model_params.txt"
INPUT_SPECS = "input_specs.json"


class JobLogDirError(OSError):
  """`job_log_dir` cannot be created or written."""


def prepare(job_log_dir: str) -> None:
  """Creates `job_log_dir` and checks that this process can write there, before any work.

  Raises:
    JobLogDirError: naming the directory and the reason.
  """
  probe = os.path.join(job_log_dir, f".write_test.{os.getpid()}")
  try:
    os.makedirs(job_log_dir, exist_ok=True)
    with open(probe, "w") as f:
      f.write("ok")
    os.remove(probe)
  except OSError as e:
    raise JobLogDirError(
      f"--job_log_dir={job_log_dir} cannot be written ({e.strerror or e}); pass a directory "
      "you can create and write to"
    ) from e


def _write(path: str, text: str) -> None:
  # Written to a temporary name then renamed: a reader never sees half a file.
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, path)


def _prefixed(mode: str, name: str) -> str:
  return name if mode == "train" else f"{mode}_{name}"


def model_params_text(datasets: list[Any], task: Any) -> str:
  text = base_hyperparams.nested_struct_to_text(list(datasets), prefix="datasets")
  return text + base_hyperparams.nested_struct_to_text(task, prefix="task")


def experiment_cls_vars_text(experiment: Any) -> str:
  """`NAME : value  # Class` for every UPPERCASE class field, as the instance resolves it."""
  lines = []
  cls = type(experiment)
  names = sorted(
    {
      name
      for klass in cls.__mro__
      for name in vars(klass)
      if name.isupper() and not name.startswith("_")
    }
  )
  for name in names:
    owner = next(k for k in cls.__mro__ if name in vars(k))
    lines.append(
      f"{name} : {getattr(experiment, name)!r}  # {owner.__module__}.{owner.__qualname__}"
    )
  return f"# {cls.__module__}.{cls.__qualname__}\n" + "\n".join(lines) + "\n"


def post_init_model_params_text(abstract_params: Any, shardings: Any) -> str:
  """One line per variable; `abstract_params` boxed (with logical names), `shardings` unboxed."""
  logical = nn.get_partition_spec(abstract_params)
  values = nn.unbox(abstract_params)
  flat_values = jax.tree_util.tree_flatten_with_path(values)[0]
  flat_logical = jax.tree.leaves(
    logical, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec)
  )
  flat_shardings = jax.tree.leaves(shardings)
  lines = []
  total = 0
  for (path, value), names, sharding in zip(flat_values, flat_logical, flat_shardings):
    total += value.size
    spec = sharding.spec if hasattr(sharding, "spec") else sharding
    lines.append(
      f"{pytypes.path_name(path)}    shape={tuple(value.shape)} dtype={value.dtype} "
      f"logical_axes={tuple(names)} sharding={tuple(spec)}"
    )
  lines.append(f"# {len(lines)} variables, {total} parameters")
  return "\n".join(lines) + "\n"


def input_specs(batch: Any) -> dict[str, Any]:
  return {
    jax.tree_util.keystr(path).strip("[]'\""): {"shape": list(x.shape), "dtype": str(x.dtype)}
    for path, x in jax.tree_util.tree_flatten_with_path(batch)[0]
  }


def write_config_files(
  job_log_dir: str, mode: str, experiment: Any, datasets: list[Any], task: Any
) -> None:
  """model_params.txt and experiment_cls_vars.txt (mode-prefixed outside training)."""
  if not leader.is_leader():
    return
  _write(
    os.path.join(job_log_dir, _prefixed(mode, MODEL_PARAMS)), model_params_text(datasets, task)
  )
  _write(
    os.path.join(job_log_dir, _prefixed(mode, EXPERIMENT_CLS_VARS)),
    experiment_cls_vars_text(experiment),
  )


def write_post_init_files(
  job_log_dir: str, abstract_params: Any, param_shardings: Any, host_batch: Any
) -> None:
  """post_init_model_params.txt and input_specs.json."""
  if not leader.is_leader():
    return
  _write(
    os.path.join(job_log_dir, POST_INIT_MODEL_PARAMS),
    post_init_model_params_text(abstract_params, param_shardings),
  )
  _write(
    os.path.join(job_log_dir, INPUT_SPECS),
    json.dumps(input_specs(host_batch), indent=2, sort_keys=True) + "\n",
  )
