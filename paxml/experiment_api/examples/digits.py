"""A JAXline-style experiment on the digits data; this file is also its config.

  bazel run //paxml/experiment_api/examples:digits -- \
      --config=paxml/experiment_api/examples/digits.py \
      --config.checkpoint_dir=/tmp/jaxline_digits --jaxline_mode=train_eval_multithreaded

Training runs in a background thread and saves "latest" every 100 steps; the
evaluator (main thread) evaluates the newest checkpoint on the test split and
keeps the best one by accuracy. Kill and rerun: training resumes from
"latest".
"""

import functools

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
from paxml.experiment_api import rng as rng_lib
from paxml.toolkit.examples import digits_data


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
      {"batch_size": 64, "learning_rate": 3e-3, "hidden": 128})
  return config


class Mlp(nn.Module):
  hidden: int

  @nn.compact
  def __call__(self, x):  # x: [B, 64]
    return nn.Dense(10)(nn.relu(nn.Dense(self.hidden)(x)))  # [B, 10]


class Experiment(experiment.AbstractExperiment):
  """Pmapped training; the parameters and optimizer state are checkpointed."""

  CHECKPOINT_ATTRS = {"_params": "params", "_opt_state": "opt_state"}

  def __init__(self, mode, init_rng, *, batch_size, learning_rate, hidden):
    self.mode = mode
    self._splits = digits_data.load_splits()
    self._model = Mlp(hidden)
    self._tx = optax.adam(learning_rate)
    self._batch_size = batch_size
    params = self._model.init(init_rng, jnp.zeros((1, 64)))["params"]
    # Pmapped attributes carry a leading device axis.
    self._params = rng_lib.bcast_local_devices(params)
    self._opt_state = rng_lib.bcast_local_devices(self._tx.init(params))
    self._update = jax.pmap(self._update_fn, axis_name="i", donate_argnums=(0, 1))
    self._train_batches = None
    self._predict = jax.jit(self._model.apply)

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
    if self._train_batches is None:
      # Start the data where a resumed run left off.
      self._train_batches = digits_data.train_batches(
          self._splits["train"], self._batch_size, seed=int(np.asarray(global_step)[0]))
    n = jax.local_device_count()
    batch = jax.tree.map(lambda x: x.reshape((n, -1) + x.shape[1:]), next(self._train_batches))
    self._params, self._opt_state, loss = self._update(self._params, self._opt_state, batch)
    return {"loss": rng_lib.get_first(loss)}

  # ---------------------------------- eval -----------------------------------
  def evaluate(self, *, global_step, rng, writer):
    del global_step, rng, writer
    params = rng_lib.get_first(self._params)
    correct = 0
    split = self._splits["test"]
    for batch in digits_data.eval_batches(split, 125):
      logits = self._predict({"params": params}, batch["image"])
      correct += int(jnp.sum(logits.argmax(-1) == batch["label"]))
    return {"accuracy": correct / len(split["label"])}


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  app.run(functools.partial(platform.main, Experiment))
