r"""The trainer's step time against a bare jitted flax/optax step of the same model, and the stall
an asynchronous checkpoint save adds.

  ./bazelw run //paxml/benchmarks:trainer_overhead -- \
      --exp=tasks.lm.params.lm_cloud.LmCloudSpmdTest --steps=10,30

Trainer: `trainer.train_and_evaluate` runs the experiment twice in fresh directories, for the two
step counts; the per-step time is the difference of the wall times over the difference of the
counts, so start-up, compilation, the initial and final checkpoint and the final evaluation
cancel out and what remains is the loop's steady state (input, step dispatch, summaries).
Checkpoints fall only on the first and last step (save interval set beyond the run).

Bare: the same model, batch and optax transformation (the task's praxis optimizer, built),
`jax.jit(step, donate_argnums=0)`, timed the same way (two loop lengths), with one
`block_until_ready` at the end of each.

Checkpoint stall: `checkpoints.Checkpointer.save` of the trained state; the time `save` blocks
the loop (device-to-host copy) and the time until the background write finishes.

Both loops run in this process, one after the other, on the same devices. Prints one line each
and `overhead ratio = trainer / bare` (goal: <= 1.02).
"""

from collections.abc import Sequence
import dataclasses
import functools
import tempfile
import time

from absl import app
from absl import flags
from absl import logging
import fiddle as fdl
import flax.linen as nn
import jax
import optax

from paxml import base_experiment
from paxml import checkpoints
from paxml import experiment_registry
from paxml import train_states
from paxml import trainer
from paxml.tasks.lm.params import demo  # pylint: disable=unused-import
from paxml.tasks.lm.params import lm_cloud  # pylint: disable=unused-import
from praxis import pytypes

_EXP = flags.DEFINE_string("exp", "tasks.lm.params.lm_cloud.LmCloudSpmdTest", "Experiment.")
_STEPS = flags.DEFINE_list("steps", ["10", "30"], "Two loop lengths; time = difference.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Measure each side this many times; keep the "
                                "fastest (the least disturbed by other processes).")


class _Timed(base_experiment.BaseExperiment):
  """`inner` with its step count replaced and no checkpoints or evals inside the run."""

  def __init__(self, inner: base_experiment.BaseExperiment, num_steps: int):
    self.inner, self.num_steps = inner, num_steps

  def datasets(self):
    return self.inner.datasets()

  def partitioner(self):
    return self.inner.partitioner()

  def task(self):
    return dataclasses.replace(
        self.inner.task(), num_train_steps=self.num_steps, save_interval_steps=10**9,
        eval_interval_steps=None, summary_interval_steps=min(self.inner.task().summary_interval_steps,
                                                            self.num_steps))


def trainer_seconds(experiment_cls, num_steps: int) -> float:
  with tempfile.TemporaryDirectory() as job_log_dir:
    start = time.perf_counter()
    trainer.train_and_evaluate(_Timed(experiment_cls(), num_steps), job_log_dir)
    return time.perf_counter() - start


def bare_loop(experiment_cls):
  """Returns (run(num_steps) -> seconds, final state) for a plain jitted step."""
  experiment = experiment_cls()
  task = experiment.task()
  batch = pytypes.NestedMap(fdl.build(experiment.train_dataset()).get_next())
  batch = jax.tree.map(jax.numpy.asarray, batch)
  optimizer = train_states.make_optimizer(task)[0].tx  # The same optax chain the trainer runs.

  def init(rng):
    params = nn.unbox(task.model.init(rng, batch)["params"])
    return params, optimizer.init(params)

  @functools.partial(jax.jit, donate_argnums=0)
  def step(state, batch):
    params, opt_state = state

    def loss_fn(p):
      metrics, _ = task.model.apply({"params": p}, batch)
      return metrics["total_loss"][0]

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss

  holder = {"state": jax.jit(init)(jax.random.PRNGKey(0))}

  def run(num_steps: int) -> float:
    state = holder["state"]
    state, loss = step(state, batch)  # Compiles on the first call; not timed.
    jax.block_until_ready(loss)
    start = time.perf_counter()
    for _ in range(num_steps):
      state, loss = step(state, batch)
    jax.block_until_ready((state, loss))
    holder["state"] = state
    return time.perf_counter() - start

  return run, holder


def checkpoint_stall(state) -> tuple[float, float]:
  """(seconds `save` blocks, seconds until the write is complete) for `state`."""
  with tempfile.TemporaryDirectory() as job_log_dir:
    with checkpoints.Checkpointer(job_log_dir, save_interval_steps=1, max_to_keep=1) as ckpt:
      start = time.perf_counter()
      ckpt.save(1, state, {"seed": 0, "num_batches": 0}, force=True)
      blocked = time.perf_counter() - start
      ckpt.wait_until_finished()
      return blocked, time.perf_counter() - start


def main(argv: Sequence[str]) -> None:
  del argv
  logging.set_verbosity(logging.WARNING)
  experiment_cls = experiment_registry.get_experiment(_EXP.value)
  short, long = (int(s) for s in _STEPS.value)
  if not 0 < short < long:
    raise app.UsageError(f"--steps needs two increasing counts, got {_STEPS.value}")

  trainer_times, bare_times = [], []
  run_bare, holder = bare_loop(experiment_cls)
  for _ in range(_REPEATS.value):
    trainer_times.append(
        (trainer_seconds(experiment_cls, long) - trainer_seconds(experiment_cls, short)) /
        (long - short))
    bare_times.append((run_bare(long) - run_bare(short)) / (long - short))
  trainer_step, bare_step = min(trainer_times), min(bare_times)
  blocked, total = checkpoint_stall(holder["state"])
  num_params = sum(x.size for x in jax.tree.leaves(holder["state"][0]))

  print(f"experiment        {experiment_registry.canonical_name(experiment_cls)} "
        f"({num_params:,} parameters)")
  print(f"devices           {jax.device_count()} x {jax.devices()[0].device_kind}")
  print(f"trainer step      {1e3 * trainer_step:.2f} ms (fastest of {trainer_times})")
  print(f"bare step         {1e3 * bare_step:.2f} ms (fastest of {bare_times})")
  print(f"overhead ratio    {trainer_step / bare_step:.3f} (trainer / bare; goal <= 1.02)")
  print(f"checkpoint save   blocks the loop {1e3 * blocked:.1f} ms; written after "
        f"{1e3 * total:.1f} ms")


if __name__ == "__main__":
  app.run(main)
