"""What the LM benchmarks share: a synthetic batch, a LanguageModel's loss, one Adam step.

Both sides of every comparison use `train_step` (the same `optax.adam` update), and the caller
jits it with the state `(params, opt_state)` donated.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from praxis import pax_fiddle
from praxis import pytypes


def make_batch(batch: int, seq: int, vocab: int) -> pytypes.NestedMap:
  """Random ids [batch, seq], next-token labels, no padding, unit weights."""
  ids = jax.random.randint(jax.random.PRNGKey(1), (batch, seq), 0, vocab, jnp.int32)
  return pytypes.NestedMap(
    ids=ids,
    labels=jnp.roll(ids, -1, axis=1),
    paddings=jnp.zeros((batch, seq), jnp.float32),
    weights=jnp.ones((batch, seq), jnp.float32),
  )


def lm_loss(model) -> Callable[[Any, Any], jax.Array]:
  """A praxis LanguageModel's total_loss as a function of (variables, batch)."""

  def loss_fn(variables, batch):
    (metrics, _), _ = model.apply(variables, batch, mutable=["aux_loss"])
    return metrics["total_loss"][0]

  return loss_fn


def train_step(loss_fn: Callable[[Any, Any], jax.Array]):
  """(step(state, batch) -> (state, loss), the optimizer) for one Adam update of loss_fn."""
  opt = optax.adam(1e-4)

  def step(state, batch):
    params, opt_state = state
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = opt.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss

  return step, opt


def language_model(exp: Any, unroll: int | None = None) -> Any:
  """The built model of `exp.task()` (Pax's `task_p.model`); `unroll` sets a scanned stack's."""
  model_p = exp.task().model
  if unroll is not None:
    model_p.lm_tpl.stacked_transformer_tpl.unroll = unroll
  return pax_fiddle.build(model_p)
