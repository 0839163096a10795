r"""Checks that an experiment can be built, before any device time is spent on it.

  ./bazelw run //paxml/tools:validate_config -- --exp=tasks.lm.params.lm_cloud.LmCloudSpmd2B

Each check runs in turn and prints `ok` or what is wrong; the exit status is 1 if any failed:

  registry        the name resolves to one experiment
  validate        the experiment's own `validate()`
  task            `task()` builds (a misspelt field is a TypeError that names it)
  datasets        exactly one training dataset, with a batch shape
  abstract state  `jax.eval_shape` of the initial train state (shapes, dtypes, no memory)
  sharding        every weight divides evenly over the declared mesh under the sharding rules
  train step      `jax.eval_shape` of one train step (skipped with --skip_step)

Pax fields the build does not honour (an experiment's `not_applied()`, empty for the built-in
LM experiments) are listed as notes.
"""

from collections.abc import Callable, Sequence
import functools
import sys
from typing import Any

from absl import app
from absl import flags
import flax.linen as nn
import jax

from paxml import experiment_registry
from paxml import tasks_lib
from paxml import trainer
from paxml.tools import abstract_build

# Registers the built-in experiments, so short names (lm_cloud.LmCloudSpmd2B) resolve.
from paxml.tasks.lm.params import c4  # pylint: disable=unused-import
from paxml.tasks.lm.params import demo  # pylint: disable=unused-import
from paxml.tasks.lm.params import lm_cloud  # pylint: disable=unused-import

_EXP = flags.DEFINE_string("exp", None, "Registered experiment name (or a dotted suffix).")
_SKIP_STEP = flags.DEFINE_bool(
  "skip_step",
  False,
  "Skip tracing the train step (slow for unrolled models with hundreds of billions of parameters).",
)


def _check_sharding(built: abstract_build.Built) -> str:
  mesh = abstract_build.mesh_shape(built.task)
  specs = nn.get_partition_spec(built.boxed_state.mdl_vars["params"])
  flat, _ = jax.tree_util.tree_flatten_with_path(nn.unbox(built.boxed_state.mdl_vars["params"]))
  problems = []
  for (path, value), spec in zip(
    flat, jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
  ):
    for dim, axes in zip(value.shape, nn.logical_to_mesh_axes(tuple(spec), built.rules())):
      names = (axes,) if isinstance(axes, str) else tuple(axes or ())
      ways = 1
      for name in names:
        ways *= mesh[name]
      if dim % ways:
        problems.append(
          f"{jax.tree_util.keystr(path)} {value.shape}: dim {dim} over {names} ({ways} ways)"
        )
  if problems:
    raise ValueError(
      "weights that do not divide over mesh " + str(mesh) + ":\n    " + "\n    ".join(problems)
    )
  return f"mesh {mesh}"


def _check_step(built: abstract_build.Built) -> str:
  step = functools.partial(
    trainer.train_step,
    model=built.task.model,
    optimizer=built.optimizer,
    num_microbatches=built.task.num_microbatches,
  )
  state = nn.unbox(built.boxed_state)
  _, metrics = jax.eval_shape(step, state, built.batch, jax.random.PRNGKey(0))
  return f"metrics {sorted(metrics)[:4]}..."


def validate(exp: str, skip_step: bool = False, report: Callable[[str], None] = print) -> bool:
  """Runs the checks on `exp`, reporting each line; True when all passed."""
  state: dict[str, Any] = {}

  def check(name: str, fn: Callable[[], str | None]) -> bool:
    try:
      detail = fn()
    except Exception as e:  # pylint: disable=broad-except
      # Any exception is a finding: report it in one place, with its type, and stop.
      report(f"FAIL  {name}: {type(e).__name__}: {e}")
      return False
    report(f"ok    {name}" + (f" ({detail})" if detail else ""))
    return True

  def resolve():
    state["exp"] = experiment_registry.get_experiment(exp)()
    return experiment_registry.canonical_name(type(state["exp"]))

  def build():
    state["built"] = abstract_build.build(state["exp"])
    return f"{state['built'].num_params:,} parameters"

  steps = [
    ("registry", resolve),
    ("validate", lambda: state["exp"].validate()),
    ("task", lambda: type(tasks_lib.to_task_config(state["exp"].task()).model).__name__),
    ("datasets", lambda: str(abstract_build.batch_spec(state["exp"]).ids.shape)),
    ("abstract state", build),
    ("sharding", lambda: _check_sharding(state["built"])),
  ]
  if not skip_step:
    steps.append(("train step", lambda: _check_step(state["built"])))
  for name, fn in steps:
    if not check(name, fn):
      return False
  for note in getattr(state["exp"], "not_applied", lambda: [])():
    report(f"note  not applied yet: {note}")
  return True


def main(argv: Sequence[str]) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  return 0 if validate(_EXP.value, _SKIP_STEP.value) else 1


if __name__ == "__main__":
  flags.mark_flags_as_required(["exp"])
  app.run(main)
