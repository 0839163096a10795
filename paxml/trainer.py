"""The train loop: `train_and_evaluate(experiment, job_log_dir)`.

Everything happens in this file, top to bottom: build the model, optimizer and
input; restore the latest checkpoint or initialise; then one loop that calls a
pure, jitted `train_step(state, batch, rng) -> (state, metrics)`, writes
summaries and progress lines, and saves checkpoints.

Outputs in `job_log_dir` (Pax's layout):
  checkpoints/checkpoint_%08d/   train state and input position
  summaries/train/               loss, accuracy, lr, grad_norm, Steps/sec
"""

import functools
import time
from typing import Any

from absl import logging
import fiddle as fdl
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml import base_experiment
from paxml import checkpoints
from paxml import summaries
from paxml import tasks_lib
from praxis import transformer_lm

Batch = dict[str, jax.Array]
Metrics = dict[str, jax.Array]


class TrainState(flax.struct.PyTreeNode):
  """Everything a step reads and replaces; what a checkpoint stores."""

  step: jax.Array  # int32 scalar: number of updates applied so far.
  params: Any
  opt_state: optax.OptState


def make_optimizer(
    task: tasks_lib.TaskConfig,
) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """Returns (Adam with optional clipping, its learning-rate schedule)."""
  schedule = optax.constant_schedule(task.learning_rate)
  if task.warmup_steps:
    schedule = optax.join_schedules(
        [optax.linear_schedule(0.0, task.learning_rate, task.warmup_steps), schedule],
        boundaries=[task.warmup_steps],
    )
  transforms = []
  if task.clip_gradient_norm_to_value is not None:
    transforms.append(optax.clip_by_global_norm(task.clip_gradient_norm_to_value))
  transforms.append(optax.adam(schedule))
  return optax.chain(*transforms), schedule


def init_state(
    model: transformer_lm.TransformerLm,
    optimizer: optax.GradientTransformation,
    rng: jax.Array,
) -> TrainState:
  """Returns the step-0 state: fresh parameters and optimizer moments."""
  # Parameter shapes do not depend on batch size or length; one short row will do.
  ids = jnp.zeros((1, 1), jnp.int32)
  params = model.init(rng, ids)["params"]
  return TrainState(
      step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params)
  )


def train_step(
    state: TrainState,
    batch: Batch,
    rng: jax.Array,
    *,
    model: transformer_lm.TransformerLm,
    optimizer: optax.GradientTransformation,
    schedule: optax.Schedule,
) -> tuple[TrainState, Metrics]:
  """One update on `batch`; returns the new state and scalar metrics."""
  # The same base key every step, folded with the step: dropout masks differ
  # per step yet a resumed run reproduces them exactly.
  step_rng = jax.random.fold_in(rng, state.step)

  def loss_fn(params):
    logits = model.apply(
        {"params": params}, batch["ids"], batch["segment_pos"],
        deterministic=False, rngs={"dropout": step_rng},
    )  # [B, T, V]
    return transformer_lm.lm_loss(logits, batch["labels"], batch["weights"])

  (loss, accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  new_state = TrainState(
      step=state.step + 1,
      params=optax.apply_updates(state.params, updates),
      opt_state=opt_state,
  )
  metrics = {
      "loss": loss,
      "accuracy": accuracy,
      "grad_norm": optax.tree.norm(grads),  # Before clipping.
      "lr": schedule(state.step),  # The rate this update used.
  }
  return new_state, metrics


def train_and_evaluate(
    experiment: base_experiment.BaseExperiment, job_log_dir: str, *, profiler=None
) -> dict[str, float]:
  """Trains `experiment` up to its `num_train_steps`, resuming if possible.

  `profiler`, if given, is told about each step (`before_step(step)`, `after_step(step, outputs)`)
  and closed at the end: `pgle_collection.StepWindowProfiler` traces a window of steps.

  Returns:
    The last step's metrics plus `step`, the final step. When the checkpoint
    is already at `num_train_steps`, only `step`.
  """
  task = experiment.task()
  model = task.model
  train_input = fdl.build(experiment.train_dataset())
  optimizer, schedule = make_optimizer(task)
  init_rng, train_rng = jax.random.split(jax.random.PRNGKey(task.random_seed))

  # Data parallel over every device: the state is replicated and the batch is
  # split along its leading (batch) axis.
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  batch_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  init_fn = functools.partial(init_state, model, optimizer)
  abstract_state = jax.eval_shape(init_fn, init_rng)
  state_shardings = jax.tree.map(lambda _: replicated, abstract_state)

  with checkpoints.Checkpointer(
      job_log_dir,
      save_interval_steps=task.save_interval_steps,
      max_to_keep=task.save_max_to_keep,
  ) as checkpointer:
    restored = checkpointer.restore(jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        abstract_state, state_shardings,
    ))
    if restored is not None:
      state = restored.state
      train_input.set_state(restored.input_state)
      logging.info("Restored checkpoint at step %d from %s; resuming",
                   restored.step, checkpointer.directory)
    else:
      state = jax.jit(init_fn, out_shardings=state_shardings)(init_rng)
      num_params = sum(x.size for x in jax.tree.leaves(state.params))
      logging.info("No checkpoint in %s; initialised a new model with %d parameters",
                   checkpointer.directory, num_params)

    step = int(state.step)
    if step >= task.num_train_steps:
      logging.info("Already at step %d of num_train_steps=%d; nothing to train",
                   step, task.num_train_steps)
      return {"step": float(step)}

    # Compiled once; the state is donated so its buffers are reused for the
    # new state instead of holding two copies of parameters and moments.
    step_fn = jax.jit(
        functools.partial(train_step, model=model, optimizer=optimizer,
                          schedule=schedule),
        in_shardings=(state_shardings, batch_sharding, replicated),
        out_shardings=(state_shardings, replicated),
        donate_argnums=0,
    )
    # Leaving the `with` blocks flushes the summaries and waits for
    # asynchronous checkpoint saves, even when training fails.
    with summaries.SummaryWriter(
        job_log_dir, "train", enabled=jax.process_index() == 0
    ) as writer:
      logging.info("Training from step %d to %d", step, task.num_train_steps)
      metrics: dict[str, float] = {}
      interval_start_time, interval_start_step = time.perf_counter(), step
      while step < task.num_train_steps:
        # Before the step, as in Pax: a fresh run saves its initial state, and
        # a state is saved before its buffers are donated to the next step.
        checkpointer.save(step, state, train_input.get_state())
        # Each process feeds its own rows; together they form the global batch.
        batch = jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(batch_sharding, x),
            train_input.get_next(),
        )
        if profiler:
          profiler.before_step(step)
        state, step_metrics = step_fn(state, batch, train_rng)
        step += 1
        if profiler:
          profiler.after_step(step, step_metrics)
        if step % task.summary_interval_steps == 0 or step == task.num_train_steps:
          # Fetching the metrics waits for the step; between summaries (and
          # checkpoint saves) the host runs ahead and queues steps.
          metrics = {k: float(v) for k, v in jax.device_get(step_metrics).items()}
          now = time.perf_counter()
          # The first interval includes compilation, as in Pax.
          metrics["Steps/sec"] = (
              (step - interval_start_step) / (now - interval_start_time))
          interval_start_time, interval_start_step = now, step
          writer.scalars(step, metrics)
          logging.info(
              "step %d/%d loss %.4f accuracy %.3f lr %.2e grad_norm %.3f "
              "steps/sec %.1f",
              step, task.num_train_steps, metrics["loss"], metrics["accuracy"],
              metrics["lr"], metrics["grad_norm"], metrics["Steps/sec"],
          )
      checkpointer.save(step, state, train_input.get_state(), force=True)
      if profiler:
        profiler.close()
  logging.info("Finished at step %d; checkpoints in %s", step, checkpointer.directory)
  return {"step": float(step), **metrics}
