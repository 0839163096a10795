"""A user's own script, as wheels_test runs it from a directory outside the repo in a fresh venv.

It imports praxis and paxml from the installed wheels only, the way Pax's docs write code:
  1. a pax_fiddle layer config, instantiated, initialised and applied (checked against numpy);
  2. a Pax-style experiment (a SingleTask config from lm_cloud.LmCloudSpmd, edited) trained for a
     few steps through paxml's library API (`main.run`, the function `paxml.main` calls);
  3. a JAX profiler trace of a jitted step into argv[2], for the `pgle` command to convert.

    python user_script.py JOB_LOG_DIR TRACE_DIR
"""

import json
import os
import sys

import jax
from jax import numpy as jnp
import numpy as np

from paxml import experiment_registry
from paxml import main
from paxml.tasks.lm import input_generator
from paxml.tasks.lm.params import lm_cloud
from praxis import base_input
from praxis import base_layer
from praxis import layers
from praxis import pax_fiddle
from praxis import schedules


def linear_layer() -> float:
  """A praxis Linear from its pax_fiddle config: init, apply, compare with x @ w."""
  config = pax_fiddle.Config(layers.Linear, name="proj", input_dims=4, output_dims=3)
  layer = base_layer.instantiate(config)
  x = jnp.arange(8.0).reshape(2, 4)  # [B, D_in]
  variables = layer.init(jax.random.key(0), x)
  y = layer.apply(variables, x)  # [B, D_out]
  w = np.asarray(variables["params"]["w"])  # [D_in, D_out]
  np.testing.assert_allclose(np.asarray(y), np.asarray(x) @ w, rtol=1e-5)
  return float(np.abs(w).sum())


@experiment_registry.register
class UserLm(lm_cloud.LmCloudSpmd):
  """Two 32-wide layers over 16 tokens of Pax's synthetic LM data, 3 steps."""

  NUM_LAYERS = 2
  MODEL_DIMS = 32
  HIDDEN_DIMS = 64
  DIMS_PER_HEAD = 8
  VOCAB_SIZE = 64
  MAX_SEQ_LEN = 16
  FPROP_DTYPE = jnp.float32
  ICI_MESH_SHAPE = [1, 1, 1]

  def _input(self, is_training: bool) -> pax_fiddle.Config:
    input_p = input_generator.SyntheticLmData.HParams()
    input_p.batch_size = 4
    input_p.seq_len = self.MAX_SEQ_LEN
    return pax_fiddle.Config(base_input.LingvoInputAdaptor, input=input_p, is_training=is_training)

  def datasets(self) -> list[pax_fiddle.Config]:
    return [self._input(True), self._input(False)]

  def task(self) -> pax_fiddle.Config:
    task_p = super().task()
    task_p.train.num_train_steps = 3
    task_p.train.save_interval_steps = 3
    task_p.train.summary_interval_steps = 1
    task_p.train.eval_interval_steps = 3
    task_p.train.learner.optimizer.learning_rate = 1e-2
    task_p.train.learner.optimizer.lr_schedule = pax_fiddle.Config(schedules.Constant)
    return task_p


def trace_a_step(trace_dir: str) -> None:
  @jax.jit
  def step(w, x):  # [D, D], [B, D]
    return jnp.tanh(x @ w) @ w.T

  w, x = jnp.ones((64, 64)) / 64, jnp.ones((16, 64))
  step(w, x).block_until_ready()  # Compiled outside the trace.
  with jax.profiler.trace(trace_dir):
    for _ in range(2):
      x = step(w, x)
    x.block_until_ready()


def run(job_log_dir: str, trace_dir: str) -> dict:
  result = main.run(experiment_registry.canonical_name(UserLm), job_log_dir)
  trace_a_step(trace_dir)
  import paxml  # pylint: disable=g-import-not-at-top
  import praxis  # pylint: disable=g-import-not-at-top

  return {
    "linear_abs_sum": linear_layer(),
    "step": int(result["step"]),
    "loss": float(result["loss"]),
    "checkpoints": sorted(os.listdir(os.path.join(job_log_dir, "checkpoints"))),
    "praxis_file": praxis.__file__,
    "paxml_file": paxml.__file__,
  }


if __name__ == "__main__":
  print("RESULT " + json.dumps(run(sys.argv[1], sys.argv[2])))
