"""The train loop: `train_and_evaluate(experiment, job_log_dir)`.

Everything happens in this file, top to bottom: build the inputs, mesh and model; restore the
latest checkpoint or initialise; then one loop that calls a pure, jitted
`train_step(state, batch, rng) -> (state, metrics)` and, on their triggers, writes summaries and
progress lines, evaluates, decodes and saves checkpoints.

Run-ahead. JAX dispatches a step and returns before the device has run it, so the host reads the
next batch meanwhile. The loop lets at most MAX_STEPS_IN_FLIGHT (2) steps be dispatched and not
finished: before dispatching step s it waits for step s - 2 to finish (on one of its scalar
metrics, not its state, which the next step takes over). A SIGTERM is seen at the next step
boundary and its save waits for the steps in flight, so stopping costs at most 2 steps plus the
save (docs/experiments.md: the grace period a job needs).

Outputs in `job_log_dir` (Pax's layout):
  model_params.txt, experiment_cls_vars.txt, post_init_model_params.txt, input_specs.json
  checkpoints/checkpoint_%08d/   train state and input position (the first one may be a warm
                                 start from another run's checkpoint: paxml/warm_start.py)
  summaries/train/               loss, lr, grad norms, Steps/sec, tokens/sec, MFU, Metrics/<name>
  summaries/eval_train/, summaries/eval_test_<name>/, summaries/decode_test_<name>/
  decoder_out/<name>/
"""

import collections
import dataclasses
import functools
from typing import Any

from absl import logging
import fiddle as fdl
import jax
import jax.numpy as jnp
import optax

from paxml import base_experiment
from paxml import checkpoints
from paxml import eval_lib
from paxml import job_files
from paxml import job_lock
from paxml import memory_plan
from paxml import partitioning
from paxml import peekable_input
from paxml import preemption
from paxml import progress
from paxml import tasks_lib
from paxml import train_states
from paxml import triggers
from paxml import warm_start
from praxis import base_layer
from praxis import pytypes

Metrics = dict[str, jax.Array]

# Steps dispatched to the device and not yet finished, at most (module docstring). 1 would leave
# the device idle while the host reads each batch; more only delays a stop.
MAX_STEPS_IN_FLIGHT = 2


def _apply_for_training(
  model: Any, params: Any, batch: pytypes.NestedMap, rng: jax.Array
) -> dict[str, tuple[jax.Array, jax.Array]]:
  """The model's metrics on `batch` with dropout on and the sown aux losses in `total_loss`.

  praxis' convention (praxis/layers/models.py): a "dropout" rng turns dropout on, and a mutable
  "aux_loss" collection lets the model add every layer's `add_aux_loss` into total_loss. The
  collection itself is discarded: it is per step, not state.
  """
  (metrics, _), _ = model.apply(
    {"params": params}, batch, rngs={"dropout": rng}, mutable=[base_layer.AUX_LOSS]
  )
  return metrics


def _loss_and_grads(params, batch, rng, model, num_microbatches):
  """Gradient of the weighted-mean `total_loss`, accumulated over `num_microbatches`.

  Each microbatch m gives its loss l_m with weight w_m (e.g. its token count); the combined
  gradient is sum_m w_m grad(l_m) / sum_m w_m, which is exactly the full batch's gradient of its
  weighted mean. Metrics combine the same way: value = sum v_m w_m / sum w_m, weight = sum w_m.
  """

  def microbatch(mb, mb_rng):
    def weighted_loss(p):
      metrics = _apply_for_training(model, p, mb, mb_rng)
      loss, weight = metrics["total_loss"]
      return loss * weight, metrics

    (_, metrics), grads = jax.value_and_grad(weighted_loss, has_aux=True)(params)
    return grads, metrics

  if num_microbatches == 1:

    def mean_loss(p):
      metrics = _apply_for_training(model, p, batch, rng)
      return metrics["total_loss"][0], metrics

    (_, metrics), grads = jax.value_and_grad(mean_loss, has_aux=True)(params)
    return grads, metrics

  # [B, ...] -> [M, B/M, ...], microbatch m = rows m, m+M, m+2M, ...: every device holds rows of
  # every microbatch, so each one stays split over the batch shards.
  def split(x):
    x = x.reshape((x.shape[0] // num_microbatches, num_microbatches) + x.shape[1:])
    return jnp.swapaxes(x, 0, 1)

  microbatches = jax.tree.map(split, batch)

  def accumulate(carry, inputs):
    index, mb = inputs
    grads, metrics = microbatch(mb, jax.random.fold_in(rng, index))
    grad_sum, metric_sums = carry
    grad_sum = jax.tree.map(jnp.add, grad_sum, grads)
    metric_sums = {
      k: (s[0] + v * w, s[1] + w) for (k, (v, w)), s in zip(metrics.items(), metric_sums.values())
    }
    return (grad_sum, metric_sums), None

  zero_grads = jax.tree.map(jnp.zeros_like, params)
  metric_shapes = jax.eval_shape(
    lambda: microbatch(jax.tree.map(lambda x: x[0], microbatches), rng)[1]
  )
  zero_metrics = {
    k: (jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32)) for k in metric_shapes
  }
  (grad_sum, metric_sums), _ = jax.lax.scan(
    accumulate, (zero_grads, zero_metrics), (jnp.arange(num_microbatches), microbatches)
  )
  total_weight = jnp.maximum(metric_sums["total_loss"][1], 1e-8)
  grads = jax.tree.map(lambda g: g / total_weight, grad_sum)
  metrics = {k: (s / jnp.maximum(w, 1e-8), w) for k, (s, w) in metric_sums.items()}
  return grads, metrics


def train_step(
  state: train_states.TrainState,
  batch: pytypes.NestedMap,
  rng: jax.Array,
  *,
  model: Any,
  optimizer: train_states.Optimizer,
  num_microbatches: int = 1,
) -> tuple[train_states.TrainState, Metrics]:
  """One update on `batch`; returns the new state and scalar metrics.

  The optimizer (a praxis optimizer, train_states.make_optimizer) does all of the update:
  global-norm clipping, its scaling, weight decay, the learning-rate schedule and an EMA. A
  step whose loss or gradient norm is NaN/Inf changes nothing but `step` and `skipped_steps`:
  the weights and the optimizer state (its update count included) stay as they were.
  """
  # The same base key every step, folded with the step: dropout masks differ
  # per step yet a resumed run reproduces them exactly.
  step_rng = jax.random.fold_in(rng, state.step)
  grads, model_metrics = _loss_and_grads(state.params, batch, step_rng, model, num_microbatches)
  loss = model_metrics["total_loss"][0]
  raw_norm = optax.global_norm(grads)
  updates, new_opt_state = optimizer.update(grads, state.opt_state, state.params)
  new_params = optax.apply_updates(state.params, updates)
  valid = jnp.isfinite(loss) & jnp.isfinite(raw_norm)
  keep_old = functools.partial(jax.tree.map, lambda new, old: jnp.where(valid, new, old))
  new_state = train_states.TrainState(
    step=state.step + 1,
    params=keep_old(new_params, state.params),
    opt_state=keep_old(new_opt_state, state.opt_state),
    skipped_steps=state.skipped_steps + (~valid).astype(jnp.int32),
  )
  clipped_norm = raw_norm
  if optimizer.clip_gradient_norm_to_value > 0:
    # What the optimizer's clip_by_global_norm leaves: g * min(1, c / |g|) has norm min(|g|, c).
    clipped_norm = jnp.minimum(raw_norm, optimizer.clip_gradient_norm_to_value)
  metrics = {
    "loss": loss,
    # The rate this update used, from the optimizer's count of updates applied so far.
    "lr": optimizer.learning_rate(state.opt_state),
    "learning/raw_grad_norm": raw_norm,
    "learning/clipped_grad_norm": clipped_norm,
    "learning/is_valid_step": valid.astype(jnp.float32),
    "learning/skipped_steps": new_state.skipped_steps,
  }
  metrics.update({f"Metrics/{k}": v for k, (v, _) in model_metrics.items()})
  return new_state, metrics


def train_and_evaluate(
  experiment: base_experiment.BaseExperiment,
  job_log_dir: str,
  *,
  eval_on_test: bool = False,
  decode_during_train: bool = False,
  enable_checkpoint_saving: bool = True,
  enable_summary_writer: bool = True,
  profiler=None,
) -> dict[str, float]:
  """Trains `experiment` up to its `num_train_steps`, resuming if possible.

  `eval_on_test` also evaluates every eval dataset at eval steps; `decode_during_train`
  decodes the decode datasets at decode steps. `enable_checkpoint_saving=False` writes no
  checkpoint (a checkpoint already there is still restored); `enable_summary_writer=False`
  writes no summaries. `profiler`, if given, is told about each step (`before_step(step)`,
  `after_step(step, outputs)`) and closed at the end.

  Returns:
    The last summarised metrics plus `step`, the final step (and `preempted`: 1.0 when a
    SIGTERM stopped the run after saving). When the checkpoint is already at
    `num_train_steps`, only `step`.

  Raises:
    job_lock.JobLockError: another trainer holds job_log_dir (paxml/job_lock.py).
    TrainingDivergedError: `max_consecutive_skipped_steps` steps in a row were skipped.
    checkpoints.CheckpointError: a save failed (e.g. disk full), or no checkpoint verifies.
  """
  job_files.prepare(job_log_dir)
  # Before anything else touches the directory: a second trainer must not overwrite the
  # config files or clean up the first one's in-progress checkpoint.
  with job_lock.JobLease(job_log_dir):
    setup = _set_up(
      experiment,
      job_log_dir,
      eval_on_test=eval_on_test,
      decode_during_train=decode_during_train,
      enable_summary_writer=enable_summary_writer,
    )
    return _train(
      setup,
      job_log_dir,
      enable_checkpoint_saving=enable_checkpoint_saving,
      enable_summary_writer=enable_summary_writer,
      profiler=profiler,
    )


class TrainingDivergedError(RuntimeError):
  """Every step of a long stretch was skipped (NaN/Inf loss or gradients); see `_SkipWatch`."""


class _SkipWatch:
  """Stops a run that only skips steps, keeping Pax's skip of isolated bad steps.

  Checked at summary steps (the metrics are fetched only then): a summary window in which
  every step was skipped adds its length to the run of skipped steps, any other window resets
  it. Reaching `limit` raises TrainingDivergedError, so the job exits with an error instead of
  "Finished" on unchanged weights. Skipped steps leave the weights as they were, so every
  checkpoint still holds the last good ones.
  """

  def __init__(self, limit: int | None, start_step: int, start_skipped: int):
    self.limit = limit
    self._last_step = start_step
    self._last_skipped = start_skipped
    self._run = 0

  def update(self, step: int, skipped_total: int) -> None:
    window = step - self._last_step
    if window > 0:
      all_skipped = skipped_total - self._last_skipped >= window
      self._run = self._run + window if all_skipped else 0
    self._last_step, self._last_skipped = step, skipped_total
    if self.limit and self._run >= self.limit:
      raise TrainingDivergedError(
        f"the last {self._run} steps (to step {step}) were all skipped because the loss or "
        "the gradient norm was NaN/Inf; stopping (max_consecutive_skipped_steps="
        f"{self.limit}). The checkpoints hold the weights from before; lower the learning "
        "rate or check the data, then run again."
      )


@dataclasses.dataclass(frozen=True)
class _Setup:
  """What the loop trains with, built once before it starts."""

  task: tasks_lib.TaskConfig
  partitioner: partitioning.Partitioner
  train_input: peekable_input.PeekableInput
  host_batch: pytypes.NestedMap
  """The first training batch of this process (peeked: not consumed)."""
  global_batch_size: int
  optimizer: train_states.Optimizer
  layout: train_states.StateLayout
  programs: eval_lib.Programs


def _set_up(
  experiment: base_experiment.BaseExperiment,
  job_log_dir: str,
  *,
  eval_on_test: bool,
  decode_during_train: bool,
  enable_summary_writer: bool,
) -> _Setup:
  """Builds the inputs, mesh, optimizer, state layout and eval/decode programs; writes the
  config files of job_log_dir."""
  task = tasks_lib.to_task_config(experiment.task())
  datasets = experiment.datasets()
  job_files.write_config_files(job_log_dir, "train", experiment, datasets, task)
  partitioner = partitioning.for_experiment(experiment, task)
  # Peeked batches are kept, not replayed: eval_train costs the same at any step.
  train_input = peekable_input.PeekableInput(
    fdl.build(partitioner.preprocess_input_config(experiment.train_dataset()))
  )
  host_batch = train_input.peek()
  global_batch_size = host_batch.ids.shape[0] * jax.process_count()
  partitioner.check_global_batch(global_batch_size)
  if global_batch_size % (partitioner.num_batch_shards * task.num_microbatches):
    raise partitioning.MeshError(
      f"num_microbatches={task.num_microbatches} does not split the global batch of "
      f"{global_batch_size} rows into equal microbatches over {partitioner.num_batch_shards} "
      "batch shards; pick a divisor"
    )
  optimizer, _ = train_states.make_optimizer(task)
  init_rng, _ = _rngs(task)
  layout = train_states.state_layout(task, optimizer, partitioner, host_batch, init_rng)
  job_files.write_post_init_files(
    job_log_dir, layout.boxed.params, layout.shardings.params, host_batch
  )
  programs = eval_lib.Programs.create(
    experiment,
    task.model,
    partitioner,
    layout.shardings.params,
    job_log_dir,
    with_eval_test=eval_on_test,
    with_decode=decode_during_train,
    random_seed=task.random_seed,
    summaries_enabled=enable_summary_writer,
  )
  return _Setup(
    task, partitioner, train_input, host_batch, global_batch_size, optimizer, layout, programs
  )


def _rngs(task: tasks_lib.TaskConfig) -> tuple[jax.Array, jax.Array]:
  """(initialisation key, training key) from the task's seed."""
  init_rng, train_rng = jax.random.split(jax.random.PRNGKey(task.random_seed))
  return init_rng, train_rng


@dataclasses.dataclass
class _LoopState:
  """What the loop and its periodic work share: the train state, its step, the last metrics."""

  state: train_states.TrainState
  step: int
  step_metrics: Metrics | None = None
  """The last step's metrics, still on the device (fetched only for a summary)."""
  metrics: dict[str, float] = dataclasses.field(default_factory=dict)
  """The last summarised metrics, on the host."""
  preempted: bool = False
  in_flight: collections.deque = dataclasses.field(default_factory=collections.deque)
  """(step, a scalar output of it) of the steps dispatched and maybe not finished, oldest first."""

  def wait_for_steps_in_flight(self, at_most: int, done) -> None:
    """Blocks until at most `at_most` dispatched steps are unfinished; `done(step)` is told of
    each step seen finished."""
    while len(self.in_flight) > at_most:
      step, marker = self.in_flight.popleft()
      jax.block_until_ready(marker)
      done(step)


def _train(
  setup: _Setup,
  job_log_dir: str,
  *,
  enable_checkpoint_saving: bool,
  enable_summary_writer: bool,
  profiler,
) -> dict[str, float]:
  """Restores or initialises the state, then runs the loop with its periodic work."""
  task, partitioner, layout = setup.task, setup.partitioner, setup.layout
  init_rng, train_rng = _rngs(task)
  with (
    checkpoints.Checkpointer(
      job_log_dir,
      save_interval_steps=task.save_interval_steps,
      max_to_keep=task.save_max_to_keep,
      save_keep_interval_duration=task.save_keep_interval_duration,
    ) as checkpointer,
    preemption.PreemptionGuard() as preempt,
    setup.programs,
  ):
    restored = checkpointer.restore(layout.abstract)
    if restored is not None:
      state = restored.state
      setup.train_input.set_state(restored.input_state)
      logging.info(
        "Restored checkpoint at step %d from %s; resuming", restored.step, checkpointer.directory
      )
    else:
      state = layout.initialize(init_rng)
      num_params = sum(x.size for x in jax.tree.leaves(state.params))
      logging.info(
        "No checkpoint in %s; initialised a new model with %d parameters on mesh %s",
        checkpointer.directory,
        num_params,
        dict(partitioner.mesh.shape),
      )
      if task.init_from_checkpoint_rules:
        state = warm_start.apply(state, layout.abstract, task.init_from_checkpoint_rules)

    loop = _LoopState(state, int(state.step))
    last = task.num_train_steps
    if loop.step >= last:
      logging.info("Already at step %d of num_train_steps=%d; nothing to train", loop.step, last)
      return {"step": float(loop.step)}

    # Compiled once; the state is donated so its buffers are reused for the new state
    # instead of holding two copies of parameters and moments.
    step_fn = jax.jit(
      functools.partial(
        train_step,
        model=task.model,
        optimizer=setup.optimizer,
        num_microbatches=task.num_microbatches,
      ),
      in_shardings=(layout.shardings, partitioner.batch_sharding(), partitioner.replicated()),
      out_shardings=(layout.shardings, partitioner.replicated()),
      donate_argnums=0,
    )
    # Compiled and checked for its memory per device before anything runs: a step that cannot
    # fit stops here with one line saying what to change (paxml/memory_plan.py).
    step_fn = memory_plan.Preflighted(
      step_fn, "the train step", model=task.model, mesh=partitioner.mesh
    )
    with partitioner.rules_context():  # Now, before the step-0 checkpoint is written.
      step_fn.preflight(state, partitioner.global_batch(setup.host_batch), train_rng)
    # Leaving the `with` blocks flushes the summaries and waits for asynchronous
    # checkpoint saves, even when training fails.
    # The layers' sharding constraints apply when the step is first traced, inside this context.
    with (
      eval_lib.open_writer(job_log_dir, "train", enable_summary_writer) as writer,
      partitioner.rules_context(),
    ):
      work = _PeriodicWork(
        setup,
        loop,
        writer,
        checkpointer if enable_checkpoint_saving else None,
        preempt,
        profiler,
      )
      before_step, after_step = work.schedules()
      logging.info("Training from step %d to %d", loop.step, last)
      while True:
        before_step.run_at(loop.step)
        if loop.preempted or loop.step >= last:
          break
        # Each process feeds its own rows; together they form the global batch. Read while the
        # steps in flight run.
        batch = partitioner.global_batch(setup.train_input.get_next())
        loop.wait_for_steps_in_flight(MAX_STEPS_IN_FLIGHT - 1, work.meter.step_done)
        loop.state, loop.step_metrics = step_fn(loop.state, batch, train_rng)
        loop.step += 1
        loop.in_flight.append((loop.step, loop.step_metrics["loss"]))
        after_step.run_at(loop.step)
      if profiler:
        profiler.close()
  if loop.preempted:
    return {"step": float(loop.step), "preempted": 1.0, **loop.metrics}
  logging.info("Finished at step %d; checkpoints in %s", loop.step, checkpointer.directory)
  return {"step": float(loop.step), **loop.metrics}


class _PeriodicWork:
  """The loop's periodic work, as entries of two triggers.Schedule (STYLE.md 14).

  before each step (and after the last):
    checkpoint   every step boundary; Orbax's manager saves when `save_interval_steps` is due
                 (and a fresh run's initial state); the last step is always saved. Before the
                 step, as in Pax: a state is saved before its buffers are donated to the next.
    preemption   a SIGTERM on any process: save (unless already saved) and stop. Asking every
                 process is a collective: each step alone, each summary with others.
    profiler     every step but after the last, when a profiler is given (its before_step).
  after each step:
    profiler     its after_step, with the step's outputs.
    summaries    every `summary_interval_steps` and the last step: train summaries, progress line.
    eval         every `eval_interval_steps` and the last step: eval_train, eval_test.
    decode       every `decode_interval_steps` and the last step (with --decode_during_train).
  """

  def __init__(self, setup: _Setup, loop: _LoopState, writer, checkpointer, preempt, profiler):
    self.setup, self.loop, self.writer = setup, loop, writer
    self.checkpointer, self.preempt, self.profiler = checkpointer, preempt, profiler
    task = setup.task
    seq_len = setup.host_batch.ids.shape[1]
    self.meter = progress.ProgressMeter(
      num_train_steps=task.num_train_steps,
      tokens_per_step=setup.global_batch_size * seq_len,
      flops_per_token=progress.model_flops_per_token(
        setup.layout.boxed.params, tasks_lib.transformer_dims(task.model), seq_len
      ),
      num_devices=setup.partitioner.mesh.size,
      peak_flops_per_device=progress.peak_flops_per_device(jax.devices()[0]),
      start_step=loop.step,
    )
    self.skip_watch = _SkipWatch(
      task.max_consecutive_skipped_steps, loop.step, int(loop.state.skipped_steps)
    )

  def schedules(self) -> tuple[triggers.Schedule, triggers.Schedule]:
    task = self.setup.task
    last = triggers.AtSteps(task.num_train_steps)
    every_step = triggers.StepInterval(1)
    before, after = triggers.Schedule(), triggers.Schedule()
    if self.checkpointer is not None:
      before.add("checkpoint", every_step, self.save)
    preemption_interval = 1 if jax.process_count() == 1 else task.summary_interval_steps
    before.add("preemption", triggers.StepInterval(preemption_interval), self.check_preemption)
    if self.profiler:
      before.add("profiler", every_step, self.before_profiled_step)
      after.add(
        "profiler",
        every_step,
        lambda: self.profiler.after_step(self.loop.step, self.loop.step_metrics),
      )
    after.add(
      "summaries", triggers.StepInterval(task.summary_interval_steps) | last, self.summarize
    )
    after.add("eval", _interval_or_last(task.eval_interval_steps, last), self.evaluate)
    after.add("decode", _interval_or_last(task.decode_interval_steps, last), self.decode)
    return before, after

  def save(self) -> None:
    step, final = self.loop.step, self.loop.step >= self.setup.task.num_train_steps
    self.checkpointer.save(step, self.loop.state, self.setup.train_input.get_state(), force=final)
    self.checkpointer.check()  # A failed background save stops the run now, not a save later.

  def before_profiled_step(self) -> None:
    if self.loop.step < self.setup.task.num_train_steps:  # Not after the last: no step follows.
      self.profiler.before_step(self.loop.step)

  def check_preemption(self) -> None:
    if self.loop.step >= self.setup.task.num_train_steps:
      return  # Finished: the last step is saved anyway.
    if not self.preempt.requested_on_any_process():
      return
    step = self.loop.step
    if self.checkpointer is None:
      logging.info(
        "Stopping at step %d on SIGTERM (--enable_checkpoint_saving=false: not saved)", step
      )
    else:
      if self.checkpointer.latest_step() != step:  # Not already saved as a regular step.
        self.checkpointer.save(
          step, self.loop.state, self.setup.train_input.get_state(), force=True
        )
      logging.info(
        "Stopping at step %d on SIGTERM; checkpoint saved in %s", step, self.checkpointer.directory
      )
    self.loop.preempted = True

  def summarize(self) -> None:
    step = self.loop.step
    # Fetching the metrics waits for the step; between summaries the host runs ahead.
    metrics = {k: float(v) for k, v in jax.device_get(self.loop.step_metrics).items()}
    rates = self.meter.update(step)
    metrics.update({k: v for k, v in rates.items() if k != "eta_secs"})
    self.writer.scalars(step, metrics)
    logging.info(
      "%s lr %.2e grad_norm %.3f skipped %d",
      self.meter.line(step, metrics["loss"], rates),
      metrics["lr"],
      metrics["learning/raw_grad_norm"],
      metrics["learning/skipped_steps"],
    )
    self.loop.metrics = metrics
    self.skip_watch.update(step, int(metrics["learning/skipped_steps"]))

  def evaluate(self) -> None:
    params, step, programs = self.loop.state.params, self.loop.step, self.setup.programs
    if not self.setup.task.eval_skip_train:
      # The batch the next step trains on, as Pax's peek_padded; read once, kept for that step.
      programs.eval_train(params, step, self.setup.train_input.peek())
    programs.eval_test(params, step)

  def decode(self) -> None:
    self.setup.programs.decode(self.loop.state.params, self.loop.step)


def _interval_or_last(interval: int | None, last: triggers.Trigger) -> triggers.Trigger:
  """Every `interval` steps (none when 0 / None) and at `last`."""
  return triggers.StepInterval(interval) | last if interval else last
