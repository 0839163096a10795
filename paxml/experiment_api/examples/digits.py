"""A JAXline-style experiment on the digits data; this file is also its config.

  bazel run //paxml/experiment_api/examples:digits -- \
      --config=paxml/experiment_api/examples/digits.py \
      --config.checkpoint_dir=/tmp/jaxline_digits --jaxline_mode=train_eval_multithreaded

Training runs in a background thread and saves "latest" every 100 steps; the
evaluator (main thread) evaluates the newest checkpoint on the test split and
keeps the best one by accuracy. Kill and rerun: training resumes from
"latest", and the data from the batch after the last one trained on.

Written in DeepMind's usual JAXline style: the checkpointed attributes are
None after `__init__` and built on the first step (or restored from a
checkpoint before it); `_note` is a checkpointed string. The data
come from paxml.data.digits (scikit-learn's 8x8 digits, no download), split
as in the bobbin-style example: 1,297 train images, 250 test images.
"""

import functools
import os
import signal

from absl import app
from absl import flags
import flax.linen as nn
import jax
import jax.numpy as jnp
from ml_collections import config_dict
import numpy as np
import optax

from paxml.experiment_api import base_config
from paxml.experiment_api import experiment
from paxml.experiment_api import platform
from paxml.experiment_api import utils
from paxml.data import digits as digits_input


def get_config() -> config_dict.ConfigDict:
  config = base_config.get_base_config()
  config.checkpoint_dir = "/tmp/jaxline_digits"
  config.training_steps = 800
  config.interval_type = "steps"
  config.save_checkpoint_interval = 100
  config.log_tensors_interval = 100
  config.log_train_data_interval = 50
  config.best_model_eval_metric = "accuracy"
  # Not a JAXline field: how often the evaluator looks for a checkpoint.
  config.eval_poll_interval_secs = 2.0
  config.experiment_kwargs = config_dict.ConfigDict(
    {
      "batch_size": 64,
      "learning_rate": 3e-3,
      "hidden": 128,
      # For tests: SIGTERM this process after this step (a preemption); 0: never.
      "terminate_at_step": 0,
    }
  )
  return config


class Mlp(nn.Module):
  hidden: int

  @nn.compact
  def __call__(self, x):  # x: [B, 8, 8, 1]
    x = x.reshape(x.shape[0], -1)  # [B, 64]
    return nn.Dense(10)(nn.relu(nn.Dense(self.hidden)(x)))  # [B, 10]


class Experiment(experiment.AbstractExperiment):
  """Pmapped training; the parameters and optimizer state are checkpointed."""

  CHECKPOINT_ATTRS = {"_params": "params", "_opt_state": "opt_state"}
  NON_BROADCAST_CHECKPOINT_ATTRS = {"_note": "note"}

  def __init__(self, mode, init_rng, *, batch_size, learning_rate, hidden, terminate_at_step=0):
    self.mode = mode
    self._init_rng = init_rng
    self._terminate_at_step = terminate_at_step
    # 500 held out: dev (unused here) and test, 250 each.
    self._train_input = digits_input.DigitsInput(
      split="train",
      batch_size=batch_size,
      num_eval_examples=500,
      input_random_seed=0,
      is_training=True,
    )
    self._eval_input = digits_input.DigitsInput(
      split="test", batch_size=125, num_eval_examples=500, is_training=False, reset_for_eval=True
    )
    self._model = Mlp(hidden)
    self._tx = optax.adam(learning_rate)
    self._update = jax.pmap(self._update_fn, axis_name="i", donate_argnums=(0, 1))
    self._predict = jax.jit(self._model.apply)
    # Checkpointed; built lazily by _initialize_train unless restored first.
    self._params = None
    self._opt_state = None
    self._note = None
    self._train_input_positioned = False

  def _initialize_train(self):
    params = self._model.init(self._init_rng, jnp.zeros((1, 8, 8, 1)))["params"]
    # Pmapped attributes carry a leading device axis.
    self._params = utils.bcast_local_devices(params)
    self._opt_state = utils.bcast_local_devices(self._tx.init(params))

  # ---------------------------------- train ----------------------------------
  def _update_fn(self, params, opt_state, batch):
    def loss_fn(p):
      logits = self._model.apply({"params": p}, batch["image"])  # [B/dev, 10]
      return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "i")
    updates, opt_state = self._tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, jax.lax.pmean(loss, "i")

  def step(self, *, global_step, rng, writer):
    del rng, writer
    if self._params is None:
      self._initialize_train()
    if not self._train_input_positioned:
      # One batch per step, and batch i depends only on (seed, i): a resumed run
      # continues with the batches it has not yet trained on.
      self._train_input.set_state(
        {**self._train_input.get_state(), "num_batches": int(np.asarray(global_step)[0])}
      )
      self._train_input_positioned = True
    n = jax.local_device_count()
    # [B, ...] -> [devices, B / devices, ...]
    batch = jax.tree.map(lambda x: x.reshape((n, -1) + x.shape[1:]), self._train_input.get_next())
    self._params, self._opt_state, loss = self._update(self._params, self._opt_state, batch)
    step = int(np.asarray(global_step)[0]) + 1
    self._note = f"trained to step {step} in mode {self.mode}"
    if step == self._terminate_at_step:
      os.kill(os.getpid(), signal.SIGTERM)
    return {"loss": utils.get_first(loss)}

  # ---------------------------------- eval -----------------------------------
  def evaluate(self, *, global_step, rng, writer):
    del global_step, rng, writer
    if self._params is None:  # eval_initial_weights, before any checkpoint
      self._initialize_train()
    params = utils.get_first(self._params)
    correct = count = 0.0
    self._eval_input.reset()
    for batch in self._eval_input:
      logits = self._predict({"params": params}, batch["image"])  # [B, 10]
      # The last batch is padded with weight-0 rows.
      correct += float(jnp.sum((logits.argmax(-1) == batch["label"]) * batch["weights"]))
      count += float(batch["weights"].sum())
    return {"accuracy": correct / count}


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  app.run(functools.partial(platform.main, Experiment))
