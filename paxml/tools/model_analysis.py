r"""Parameters, FLOPs per step and memory of any registered experiment, without building it.

  ./bazelw run //paxml/tools:model_analysis -- --exp=tasks.lm.params.lm_cloud.LmCloudSpmd2B

prints (everything from `jax.eval_shape`; no weights are allocated, no devices needed):

  parameters          count of the abstract weights
  tokens per step     global batch rows x sequence length
  FLOPs per step      6 N + 12 L H Q T per token (progress.py) x tokens: the model FLOPs MFU uses
  memory per device   weights and optimizer state, each divided by the shards the sharding rules
                      give it on the experiment's declared mesh; activations are not included
"""

from collections.abc import Sequence
import sys

from absl import app
from absl import flags

from paxml import experiment_registry
from paxml.tools import abstract_build

# Registers the built-in experiments, so short names (lm_cloud.LmCloudSpmd2B) resolve.
from paxml.tasks.lm.params import c4  # pylint: disable=unused-import
from paxml.tasks.lm.params import demo  # pylint: disable=unused-import
from paxml.tasks.lm.params import lm_cloud  # pylint: disable=unused-import

_EXP = flags.DEFINE_string("exp", None, "Registered experiment name (or a dotted suffix).")
_NUM_DEVICES = flags.DEFINE_integer(
  "num_devices",
  None,
  "Devices to assume for an experiment without ICI_MESH_SHAPE (all on `data`); default: "
  "the devices this process sees.",
)


def analyse(exp: str, num_devices: int | None = None) -> dict[str, float]:
  """The numbers the tool prints, for `exp`."""
  built = abstract_build.build(experiment_registry.get_experiment(exp)())
  memory = built.state_bytes_per_device(num_devices)
  mesh = abstract_build.mesh_shape(built.task, num_devices)
  mesh_devices = mesh["replica"] * mesh["data"] * mesh["mdl"]
  tokens = built.tokens_per_step
  percore = getattr(built.experiment, "PERCORE_BATCH_SIZE", None)
  if percore:
    # The dataset config sized the batch for this process's devices; report the declared mesh's.
    tokens = round(percore * mesh_devices) * built.batch.ids.shape[1]
  return {
    "parameters": built.num_params,
    "tokens_per_step": tokens,
    "flops_per_step": built.flops_per_step() / built.tokens_per_step * tokens,
    "mesh_devices": mesh_devices,
    "param_bytes_per_device": memory["params"],
    "opt_state_bytes_per_device": memory["opt_state"],
  }


def format_report(exp: str, numbers: dict[str, float]) -> str:
  gib = 2.0**30
  state = numbers["param_bytes_per_device"] + numbers["opt_state_bytes_per_device"]
  return "\n".join(
    [
      f"experiment          {exp}",
      f"parameters          {numbers['parameters']:,} ({numbers['parameters'] / 1e9:.3f} B)",
      f"tokens per step     {numbers['tokens_per_step']:,}",
      f"FLOPs per step      {numbers['flops_per_step']:.4g} (6N + 12LHQT per token; remat "
      "not counted)",
      f"mesh devices        {numbers['mesh_devices']}",
      f"memory per device   weights {numbers['param_bytes_per_device'] / gib:.3f} GiB + "
      f"optimizer state {numbers['opt_state_bytes_per_device'] / gib:.3f} GiB = "
      f"{state / gib:.3f} GiB (activations and gradients not included)",
    ]
  )


def main(argv: Sequence[str]) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  try:
    print(format_report(_EXP.value, analyse(_EXP.value, _NUM_DEVICES.value)))
  except (experiment_registry.Error, ValueError, TypeError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  flags.mark_flags_as_required(["exp"])
  app.run(main)
