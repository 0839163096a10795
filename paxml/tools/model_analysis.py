r"""Parameters, FLOPs per step and memory of any registered experiment, without building it.

  ./bazelw run //paxml/tools:model_analysis -- --exp=tasks.lm.params.lm_cloud.LmCloudSpmd2B

prints (everything from `jax.eval_shape`; no weights are allocated, no devices needed):

  parameters          count of the abstract weights
  tokens per step     global batch rows x sequence length
  FLOPs per step      6 N + 12 L H Q T per token (progress.py) x tokens: the model FLOPs MFU uses
  memory per device   weights and optimizer state, each divided by the shards the sharding rules
                      give it on the experiment's declared mesh; activations are not included

With --memory_plan it also compiles the train step ahead of time for that mesh and prints the
trainer's memory preflight line (paxml/memory_plan.py): XLA's need per device, split into
parameters + optimizer state, activations/temp and the rest, against what a device has. When the
mesh needs more devices than this machine has, the step compiles on that many fake CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count, set here before JAX starts); their memory
is not a target device's, so the need is compared only with --device_memory_gib. The plan is
the CPU compiler's: an accelerator's compiler lays out memory differently (expect the same order
of magnitude, not the same bytes).

  ./bazelw run //paxml/tools:model_analysis -- --exp=lm_cloud.LmCloudSpmd2B --memory_plan \
      --device_memory_gib=16
"""

from collections.abc import Sequence
import math
import os
import sys

from absl import app
from absl import flags

from paxml import experiment_registry
from paxml import memory_plan
from paxml import partitioning
from paxml import tasks_lib
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

_MEMORY_PLAN = flags.DEFINE_bool(
  "memory_plan",
  False,
  "Also compile the train step for the mesh (fake CPU devices if this machine has fewer) and "
  "print its memory plan per device, as the trainer checks it before the first step.",
)
_DEVICE_MEMORY_GIB = flags.DEFINE_float(
  "device_memory_gib",
  None,
  "--memory_plan: compare the need with this many GiB per device (default: this machine's "
  "device, when the step compiles on real devices).",
)
_FORCE_COUNT = "--xla_force_host_platform_device_count"


def mesh_devices_needed(exp: str, num_devices: int | None = None) -> int | None:
  """Devices `exp`'s declared mesh needs, read before JAX starts (None: no declared mesh)."""
  task = tasks_lib.to_task_config(experiment_registry.get_experiment(exp)().task())
  if task.ici_mesh_shape is None:
    return num_devices
  return math.prod(task.ici_mesh_shape) * math.prod(task.dcn_mesh_shape or ())


def use_fake_devices(count: int | None) -> bool:
  """Before JAX starts: gives the CPU platform `count` devices (when more than one and XLA_FLAGS
  does not already set a count); True when it did."""
  flags_now = os.environ.get("XLA_FLAGS", "")
  if not count or count <= 1 or _FORCE_COUNT in flags_now:
    return False
  os.environ["XLA_FLAGS"] = f"{flags_now} {_FORCE_COUNT}={count}".strip()
  return True


def memory_plan_line(
  exp: str,
  num_devices: int | None = None,
  device_memory_gib: float | None = None,
  fake_devices: bool = False,
) -> str:
  """The train step's memory plan on `exp`'s mesh, one line (the trainer's preflight line)."""
  import jax  # pylint: disable=g-import-not-at-top

  built = abstract_build.build(experiment_registry.get_experiment(exp)())
  needed = math.prod(abstract_build.mesh_shape(built.task, num_devices).values())
  devices = jax.devices()
  fake_devices = fake_devices and devices[0].platform == "cpu"
  if len(devices) < needed:
    devices, fake_devices = jax.devices("cpu"), True
  if len(devices) < needed:
    raise ValueError(
      f"the mesh needs {needed} devices and only {len(devices)} CPU devices exist: run with "
      f"XLA_FLAGS={_FORCE_COUNT}={needed} (or leave XLA_FLAGS unset)"
    )
  partitioner = built.experiment.partitioner()
  if partitioner is None:
    mesh = partitioning.create_mesh(
      built.task.ici_mesh_shape, built.task.dcn_mesh_shape, devices[:needed]
    )
    partitioner = partitioning.Partitioner(mesh, partitioning.rules_for(mesh.axis_names))
  compiled, partitioner = abstract_build.compile_train_step(built, partitioner)
  state = abstract_build.abstract_train_state(built, partitioner)
  plan = memory_plan.plan(compiled, "the train step", state)
  if plan is None:
    return "memory plan         not reported by this backend's compiler"
  batch = jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=partitioner.batch_sharding()),
    built.batch,
  )
  hint = memory_plan.settings_hint(built.task.model, partitioner.mesh, batch, plan)
  if device_memory_gib is not None:
    available = (device_memory_gib * 2.0**30, "--device_memory_gib")
  elif fake_devices:
    available = None
  else:
    available = memory_plan.available_bytes(partitioner.mesh.devices.flat[0])
  if available is None:
    where = f"{needed} fake CPU devices" if fake_devices else "this machine"
    return (
      f"memory plan         {plan.need()}; compiled on {where}: pass --device_memory_gib to compare"
    )
  fits, line = memory_plan.verdict(plan, available, hint)
  line = line.removeprefix("Memory plan: ")
  return f"memory plan         {line if fits else 'does not fit: ' + line}"


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
    fake = False
    if _MEMORY_PLAN.value:  # Before anything starts JAX: XLA reads XLA_FLAGS only then.
      fake = use_fake_devices(mesh_devices_needed(_EXP.value, _NUM_DEVICES.value))
    print(format_report(_EXP.value, analyse(_EXP.value, _NUM_DEVICES.value)))
    if _MEMORY_PLAN.value:
      print(memory_plan_line(_EXP.value, _NUM_DEVICES.value, _DEVICE_MEMORY_GIB.value, fake))
  except (experiment_registry.Error, ValueError, TypeError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  flags.mark_flags_as_required(["exp"])
  app.run(main)
