r"""The trainer's step time against a bare jitted flax/optax step of the same model, and the stall
an asynchronous checkpoint save adds.

  ./bazelw run //paxml/benchmarks:trainer_overhead -- \
      --exp=tasks.lm.params.lm_cloud.LmCloudSpmdTest --warmup=3 --steps=10 --repeats=3

Trainer: `trainer.train_and_evaluate` on the experiment, in a fresh directory, for
warmup + steps steps. Its step hook (the one the PGLE profiler uses) waits for the step's
outputs after step `warmup` and after the last step; the time between, over `steps`, is the loop's
steady state: reading and placing the batch, the step (NaN/Inf guard, gradient norms, metrics),
the trigger checks, the per-step checkpoint check and the summaries at the experiment's
`summary_interval_steps`. Compilation, the initial and final checkpoint and the final evaluation
fall outside the window; checkpoints and evaluations inside the run are switched off.

Bare: the same model, optax transformation (the task's praxis optimizer, built) and input,
`jax.jit(step, donate_argnums=0)` with `loss, grads = value_and_grad(...)` and
`optax.apply_updates`; each step reads the next batch from the same input and places it on the
device, as any real loop must. Timed over the same window, waiting at both ends.

Train step alone: the trainer's `train_step` jitted in that same plain loop, which splits the
overhead into the step program's extra work and the loop's. Because timings on a shared machine
are noisy, the two step programs are also compared by XLA's own static cost estimate (flops and
bytes accessed of the compiled programs), which does not depend on load.

Sides alternate (trainer, train step alone, bare, trainer, ...) `repeats` times; the fastest of each is kept (the
least disturbed by other processes), and every time is printed.

Checkpoint stall: `checkpoints.Checkpointer.save` of the trained state, after `prepare_save` (as
the trainer calls it before its loop); the time `save` blocks the loop (device-to-host copy) and
the time until the background write finishes, as a fraction of a step.
"""

from collections.abc import Sequence
import dataclasses
import functools
import os
import tempfile
import time
import typing

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
_WARMUP = flags.DEFINE_integer(
  "warmup", 3, "Steps before the timed window (compilation, first saves)."
)
_STEPS = flags.DEFINE_integer("steps", 10, "Steps in the timed window.")
_REPEATS = flags.DEFINE_integer(
  "repeats", 3, "Measure each side this many times; keep the fastest."
)


class _Timed(base_experiment.BaseExperiment):
  """`inner` with its step count replaced and no checkpoints or evals inside the run."""

  def __init__(self, inner: base_experiment.BaseExperiment, num_steps: int):
    self.inner, self.num_steps = inner, num_steps

  def datasets(self):
    return self.inner.datasets()

  def partitioner(self):
    return self.inner.partitioner()

  def task(self):
    task = self.inner.task()
    return dataclasses.replace(
      task,
      num_train_steps=self.num_steps,
      save_interval_steps=10**9,
      eval_interval_steps=None,
      decode_interval_steps=None,
      summary_interval_steps=min(task.summary_interval_steps, self.num_steps),
    )


class _Window:
  """Trainer step hook: seconds from the end of step `start` to the end of step `stop`."""

  def __init__(self, start: int, stop: int):
    self.start, self.stop = start, stop
    self.began = self.seconds = None

  def before_step(self, step: int) -> None:
    del step

  def after_step(self, step: int, outputs) -> None:
    if step in (self.start, self.stop):
      jax.block_until_ready(outputs)  # The step's metrics come from the same program as its state.
      now = time.perf_counter()
      if step == self.start:
        self.began = now
      else:
        self.seconds = now - self.began

  def close(self) -> None:
    pass


def trainer_step_seconds(experiment_cls, warmup: int, steps: int) -> float:
  window = _Window(warmup, warmup + steps)
  with tempfile.TemporaryDirectory() as job_log_dir:
    trainer.train_and_evaluate(
      _Timed(experiment_cls(), warmup + steps), job_log_dir, profiler=window
    )
  return window.seconds / steps


class _Loop:
  """A jitted step over the experiment's input, outside the trainer; subclasses make the step."""

  def __init__(self, experiment_cls):
    experiment = experiment_cls()
    self.task = experiment.task()
    self.data = fdl.build(experiment.train_dataset())
    self.first = self._next_batch()

  def _next_batch(self):
    return jax.device_put(pytypes.NestedMap(self.data.get_next()))

  def _run(self, state, batch):
    raise NotImplementedError

  def program_cost(self) -> dict[str, float]:
    """XLA's static estimate for one compiled step: flops and bytes accessed."""
    cost = self._step.lower(self.state, self.first, *self._step_args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost  # Older jax returns one dict per device.
    return {k: float(cost.get(k, 0.0)) for k in ("flops", "bytes accessed")}

  def step_seconds(self, warmup: int, steps: int) -> float:
    for _ in range(warmup):  # The first call compiles.
      self.state, out = self._run(self.state, self._next_batch())
    jax.block_until_ready(out)
    start = time.perf_counter()
    for _ in range(steps):
      self.state, out = self._run(self.state, self._next_batch())
    jax.block_until_ready((self.state, out))
    return (time.perf_counter() - start) / steps


class BareLoop(_Loop):
  """A plain jitted flax/optax step of the experiment's model and optimizer."""

  def __init__(self, experiment_cls):
    super().__init__(experiment_cls)
    model = self.task.model
    optimizer = train_states.make_optimizer(self.task)[0].tx  # The optax chain the trainer runs.

    def init(rng):
      params = nn.unbox(model.init(rng, self.first)["params"])
      return params, optimizer.init(params)

    @functools.partial(jax.jit, donate_argnums=0)
    def step(state, batch):
      params, opt_state = state

      def loss_fn(p):
        metrics, _ = model.apply({"params": p}, batch)
        return metrics["total_loss"][0]

      loss, grads = jax.value_and_grad(loss_fn)(params)
      updates, opt_state = optimizer.update(grads, opt_state, params)
      return (optax.apply_updates(params, updates), opt_state), loss

    self._step, self._step_args, self._run = step, (), step
    self.state = jax.jit(init)(jax.random.PRNGKey(0))


class TrainStepLoop(_Loop):
  """The trainer's own `train_step` (NaN/Inf guard, gradient norms, metrics, dropout key), jitted
  and called in the same plain loop: it splits the trainer's overhead into the step program's
  extra work (this / bare) and the loop's (trainer / this)."""

  def __init__(self, experiment_cls):
    super().__init__(experiment_cls)
    optimizer = train_states.make_optimizer(self.task)[0]
    step = jax.jit(
      functools.partial(trainer.train_step, model=self.task.model, optimizer=optimizer),
      donate_argnums=0,
    )
    rng = jax.random.PRNGKey(1)
    self._step, self._step_args = step, (rng,)
    self._run = lambda state, batch: step(state, batch, rng)
    self.state = jax.jit(
      lambda r: nn.unbox(train_states.init_state(self.task.model, optimizer, r, self.first))
    )(jax.random.PRNGKey(0))


def _abstract(x: typing.Any) -> typing.Any:
  return (
    jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding) if hasattr(x, "sharding") else x
  )


def checkpoint_stall(state) -> tuple[float, float]:
  """(seconds `save` blocks, seconds until the write is complete) for `state`."""
  with tempfile.TemporaryDirectory() as job_log_dir:
    with checkpoints.Checkpointer(job_log_dir, save_interval_steps=1, max_to_keep=1) as ckpt:
      # As the trainer does before its loop (while its step compiles).
      ckpt.prepare_save(jax.tree.map(_abstract, state)).join()
      start = time.perf_counter()
      ckpt.save(1, state, {"seed": 0, "num_batches": 0}, force=True)
      blocked = time.perf_counter() - start
      ckpt.wait_until_finished()
      return blocked, time.perf_counter() - start


def main(argv: Sequence[str]) -> None:
  del argv
  logging.set_verbosity(logging.WARNING)
  experiment_cls = experiment_registry.get_experiment(_EXP.value)
  if _WARMUP.value < 1 or _STEPS.value < 1:
    raise app.UsageError("--warmup and --steps must be at least 1")

  bare, step_only = BareLoop(experiment_cls), TrainStepLoop(experiment_cls)
  times = {"trainer": [], "train_step": [], "bare": []}
  for _ in range(_REPEATS.value):
    times["trainer"].append(trainer_step_seconds(experiment_cls, _WARMUP.value, _STEPS.value))
    times["train_step"].append(step_only.step_seconds(_WARMUP.value, _STEPS.value))
    times["bare"].append(bare.step_seconds(_WARMUP.value, _STEPS.value))
  best = {k: min(v) for k, v in times.items()}
  cost_train_step, cost_bare = step_only.program_cost(), bare.program_cost()
  blocked, total = checkpoint_stall(bare.state)
  num_params = sum(x.size for x in jax.tree.leaves(bare.state[0]))
  ms = lambda values: ", ".join(f"{1e3 * t:.1f}" for t in values)

  print(
    f"experiment        {experiment_registry.canonical_name(experiment_cls)} "
    f"({num_params:,} parameters)"
  )
  print(
    f"devices           {jax.device_count()} x {jax.devices()[0].device_kind}, "
    f"{os.cpu_count()} host CPUs"
  )
  print(
    f"window            {_STEPS.value} steps after {_WARMUP.value}, "
    f"{_REPEATS.value} repeats per side"
  )
  print(f"trainer step      {1e3 * best['trainer']:.1f} ms (fastest of {ms(times['trainer'])} ms)")
  print(
    f"train_step alone  {1e3 * best['train_step']:.1f} ms (fastest of {ms(times['train_step'])} ms)"
  )
  print(f"bare step         {1e3 * best['bare']:.1f} ms (fastest of {ms(times['bare'])} ms)")
  print(
    f"overhead ratio    {best['trainer'] / best['bare']:.4f} (trainer / bare; goal <= 1.02)"
    f" = loop {best['trainer'] / best['train_step']:.4f} (trainer / train_step alone)"
    f" x step program {best['train_step'] / best['bare']:.4f} (train_step alone / bare)"
  )
  print(
    "step program      XLA estimate, train_step / bare: "
    + ", ".join(
      f"{k} {cost_train_step[k]:.4g} / {cost_bare[k]:.4g} = "
      f"{cost_train_step[k] / max(cost_bare[k], 1.0):.4f}"
      for k in cost_bare
    )
  )
  print(
    f"checkpoint save   blocks the loop {1e3 * blocked:.1f} ms "
    f"({blocked / best['bare']:.2f} steps); written after {1e3 * total:.1f} ms"
  )


if __name__ == "__main__":
  app.run(main)
