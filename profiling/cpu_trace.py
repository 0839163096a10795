"""Test helper: JAX profiler traces of a small but real train step, taken on CPU.

A 3-layer MLP regression trained with plain SGD: matmuls, activations, a loss, its gradient and an
update, so the compiled module has fusions, dots and reductions like a real step.
"""

from __future__ import annotations

import glob
import os

import jax
import jax.numpy as jnp

_SIZES = (32, 64, 64, 8)  # input, hidden, hidden, output
_BATCH = 16
_LEARNING_RATE = 0.05


def init_params(seed: int = 0) -> list[tuple[jax.Array, jax.Array]]:
  keys = jax.random.split(jax.random.key(seed), len(_SIZES) - 1)
  return [
    (jax.random.normal(k, (m, n)) / jnp.sqrt(m), jnp.zeros((n,)))  # [M, N], [N]
    for k, m, n in zip(keys, _SIZES[:-1], _SIZES[1:])
  ]


def _loss(params, x, y):
  h = x  # [B, D]
  for i, (w, b) in enumerate(params):
    h = h @ w + b
    if i < len(params) - 1:
      h = jax.nn.gelu(h)
  return jnp.mean((h - y) ** 2)


@jax.jit
def train_step(params, x, y):
  loss, grads = jax.value_and_grad(_loss)(params, x, y)
  params = jax.tree.map(lambda p, g: p - _LEARNING_RATE * g, params, grads)
  return params, loss


def batch(seed: int = 1) -> tuple[jax.Array, jax.Array]:
  kx, ky = jax.random.split(jax.random.key(seed))
  return (jax.random.normal(kx, (_BATCH, _SIZES[0])), jax.random.normal(ky, (_BATCH, _SIZES[-1])))


def compiled_hlo_text() -> str:
  return train_step.lower(init_params(), *batch()).compile().as_text()


def trace_train_steps(logdir: str, steps: int = 3) -> str:
  """Traces `steps` train steps into `logdir`; returns the run directory with the xplane.pb."""
  params, (x, y) = init_params(), batch()
  params, loss = train_step(params, x, y)  # Compile outside the trace.
  jax.block_until_ready(loss)
  with jax.profiler.trace(logdir):
    for _ in range(steps):
      params, loss = train_step(params, x, y)
    jax.block_until_ready(loss)
  (trace,) = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
  return os.path.dirname(trace)
