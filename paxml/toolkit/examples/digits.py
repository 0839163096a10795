"""A bobbin-style training loop on the digits data: read this first.

  bazel run //paxml/toolkit/examples:digits -- --log_dir_path=/tmp/digits

It shows, in order: a model that sows a summary and has BatchNorm; EvalResults
and an EvalTask; a TrainTask; a CronTab with a checkpoint saver, a log
writer, a progress publisher and eval with keep-best; and the loop, which is
yours. The data come from paxml.data.digits (scikit-learn's 8x8 digits, no
download): 1,297 train images, and 500 held out as dev (250) and test (250).
Outputs in --log_dir_path: all_ckpts/ (resume from here),
best_ckpts/ (best dev accuracy, with its results as JSON), tensorboard/{train,
dev,test}. Run it again with a larger --max_steps to continue training; a run
killed with SIGTERM (a preemption) finishes its pending checkpoint save first.
`evaluate_best(log_dir)` restores best_ckpts/ and evaluates it on test.
"""

from collections.abc import Sequence
import functools
import os
import signal

from absl import app
from absl import flags
from absl import logging
import flax.jax_utils
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml import toolkit as bobbin
from paxml.data import digits as digits_input

_LOG_DIR = flags.DEFINE_string("log_dir_path", "/tmp/toolkit_digits", "Output directory.")
_MAX_STEPS = flags.DEFINE_integer("max_steps", 600, "Train until this step.")
_EVAL_INTERVAL = flags.DEFINE_integer("eval_interval", 200, "Steps between evaluations.")
_TERMINATE_AT = flags.DEFINE_integer(
  "terminate_at_step",
  None,
  "Send this process SIGTERM after this step's actions (simulates a preemption; for tests).",
)

# Images held out of training: the first half is dev (keep-best tunes on it), the rest test.
_NUM_HELD_OUT = 500
_EVAL_BATCH_SIZE = 125


# --- The model: BatchNorm statistics live in extra_vars["batch_stats"]; the
# sown ScalarSummary ends up in extra_vars["tensorboard"] and on TensorBoard.
class Mlp(nn.Module):
  hidden: int = 128

  @nn.compact
  def __call__(self, x, *, train: bool):  # x: [B, 8, 8, 1]
    x = x.reshape(x.shape[0], -1)  # [B, 64]
    x = nn.Dense(self.hidden)(x)  # [B, H]
    x = nn.BatchNorm(use_running_average=not train)(x)
    x = nn.relu(x)
    x = nn.Dropout(0.1, deterministic=not train)(x)
    self.sow("tensorboard", "hidden_mean", bobbin.ScalarSummary(x.mean()))
    return nn.Dense(10)(x)  # [B, 10] logits


# --- Eval results: a monoid (reduce adds counts), ranked by accuracy. The counts
# are sums of example weights: the last eval batch is padded with weight-0 rows.
class DigitsResults(bobbin.EvalResults):
  correct: jax.Array  # weighted number of correct predictions
  count: jax.Array  # weighted number of examples
  loss_sum: jax.Array  # weighted sum of cross-entropies

  def reduce(self, other):
    return DigitsResults(
      self.correct + other.correct, self.count + other.count, self.loss_sum + other.loss_sum
    )

  @property
  def accuracy(self) -> float:
    return float(self.correct) / max(float(self.count), 1.0)

  def is_better_than(self, other):
    return self.accuracy > other.accuracy

  def write_to_tensorboard(self, current_train_state, writer):
    step = int(np.asarray(current_train_state.step))
    writer.scalar("accuracy", self.accuracy, step)
    writer.scalar("loss", float(self.loss_sum) / max(float(self.count), 1.0), step)

  def to_log_message(self):
    return f"accuracy={self.accuracy:.4f} ({int(self.count)} examples)"


class DigitsEvalTask(bobbin.EvalTask):
  def __init__(self, model):
    self.model = model
    self._apply = jax.jit(functools.partial(model.apply, train=False))

  def create_eval_results(self, dataset_name):
    del dataset_name
    return DigitsResults(jnp.float32(0), jnp.float32(0), jnp.float32(0))

  def evaluate(self, batch, model_vars):
    logits = self._apply(model_vars, batch["image"])  # [B, 10]
    xent = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"])  # [B]
    w = batch["weights"]  # [B]
    return DigitsResults(
      jnp.sum((logits.argmax(-1) == batch["label"]) * w), jnp.sum(w), jnp.sum(xent * w)
    )


# --- The train task: the loss, and which mutable collections come back.
class DigitsTrainTask(bobbin.TrainTask):
  def __init__(self, model):
    super().__init__(
      model,
      example_args=(jnp.zeros((1, 8, 8, 1)),),
      example_kwargs={"train": False},
      required_rngs=("dropout",),
    )

  def compute_loss(self, params, batch, *, extra_vars, prng_key, step):
    """Mean cross-entropy over this device's slice of the batch."""
    del step
    logits, mutated = self.model.apply(
      {**extra_vars, "params": params, "tensorboard": {}},
      batch["image"],
      train=True,
      rngs=self.get_rng_dict(prng_key),
      mutable=["batch_stats", "tensorboard"],
    )
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
    return loss, (mutated, None)


def _eval_input(split: str) -> digits_input.DigitsInput:
  return digits_input.DigitsInput(
    split=split,
    batch_size=_EVAL_BATCH_SIZE,
    num_eval_examples=_NUM_HELD_OUT,
    is_training=False,
    reset_for_eval=True,
    name=split,
  )


def _eval_pass(eval_input: digits_input.DigitsInput):
  """A fresh pass over the whole split: RunEval calls this before each evaluation."""
  eval_input.reset()
  return iter(eval_input)


def _model_and_tasks() -> tuple[Mlp, "DigitsTrainTask", "DigitsEvalTask"]:
  model = Mlp()
  return model, DigitsTrainTask(model), DigitsEvalTask(model)


def _eval_gens() -> dict[str, bobbin.BatchGen]:
  return {name: functools.partial(_eval_pass, _eval_input(name)) for name in ("dev", "test")}


def run(
  log_dir: str,
  *,
  max_steps: int,
  eval_interval: int,
  batch_size: int = 64,
  learning_rate: float = 3e-3,
  seed: int = 0,
  terminate_at_step: int | None = None,
) -> dict[str, float]:
  """Trains to `max_steps` (resuming from log_dir); returns the last eval accuracies."""
  _, task, eval_task = _model_and_tasks()
  state = task.initialize_train_state(
    jax.random.PRNGKey(seed),
    optax.adam(learning_rate),
    checkpoint_path=os.path.join(log_dir, "all_ckpts"),
  )
  start_step = int(state.step)
  logging.info("Starting at step %d", start_step)
  # One copy per local device; the step splits each batch across them.
  state = flax.jax_utils.replicate(state)
  step_fn = task.make_training_step_fn().pmap("batch")

  run_eval = eval_task.make_cron_action(
    _eval_gens(), tensorboard_root_path=os.path.join(log_dir, "tensorboard")
  )
  keep_best = run_eval.keep_best_checkpoint("dev", os.path.join(log_dir, "best_ckpts"))
  saver = task.make_checkpoint_saver(os.path.join(log_dir, "all_ckpts"), save_args={"keep": 3})
  train_writer = bobbin.ThreadedSummaryWriter.open(os.path.join(log_dir, "tensorboard", "train"))

  crontab = bobbin.CronTab()
  crontab.schedule(saver, step_interval=eval_interval, at_step=max_steps)
  crontab.schedule(keep_best, name="eval", step_interval=eval_interval, at_step=max_steps)
  crontab.schedule(task.make_log_writer(), time_interval=10.0, at_first_steps_of_process=3)
  crontab.schedule(task.make_training_progress_publisher(train_writer), step_interval=50)

  train_input = digits_input.DigitsInput(
    split="train",
    batch_size=batch_size,
    num_eval_examples=_NUM_HELD_OUT,
    input_random_seed=seed,
    is_training=True,
  )
  # One batch per step, and batch i depends only on (seed, i): a resumed run continues
  # with the batches it has not yet trained on.
  train_input.set_state({**train_input.get_state(), "num_batches": start_step})
  rng = jax.random.PRNGKey(seed + 1)
  last_eval, best = {}, None
  for step in range(start_step, max_steps):
    rng, step_rng = jax.random.split(jax.random.fold_in(rng, step))
    state, step_info = step_fn(state, train_input.get_next(), step_rng)
    results = crontab.run(state, step_info=step_info)
    if "eval" in results:
      last_eval = {name: r.accuracy for name, r in results["eval"].eval_results.items()}
      best = results["eval"].current_best
    if terminate_at_step is not None and step + 1 == terminate_at_step:
      os.kill(os.getpid(), signal.SIGTERM)
  train_writer.close()
  if best is not None:
    last_eval["best_dev"] = best.accuracy
  # No wait for the saves: the toolkit finishes pending saves at exit.
  return last_eval


def evaluate_best(log_dir: str) -> dict[str, float]:
  """Restores the best checkpoint (best_ckpts/) and evaluates it on dev and test.

  Returns {"step": the best checkpoint's step, "dev": ..., "test": ...}.
  """
  _, task, eval_task = _model_and_tasks()
  template = task.initialize_train_state(jax.random.PRNGKey(0), optax.adam(1e-3))
  state = bobbin.training.restore_checkpoint(os.path.join(log_dir, "best_ckpts"), template)
  results = bobbin.eval_datasets(eval_task, _eval_gens(), state.model_vars)
  return {"step": int(state.step), **{k: r.accuracy for k, r in results.items()}}


def main(argv: Sequence[str]) -> None:
  del argv
  results = run(
    _LOG_DIR.value,
    max_steps=_MAX_STEPS.value,
    eval_interval=_EVAL_INTERVAL.value,
    terminate_at_step=_TERMINATE_AT.value,
  )
  print(f"Final accuracies: {results}; outputs in {_LOG_DIR.value}")


if __name__ == "__main__":
  app.run(main)
