"""Pax's `praxis.metric_utils`: metrics computed from model outputs."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def top_k_accuracy(
  top_k: int,
  logits: jax.Array,
  label_ids: jax.Array | None = None,
  label_probs: jax.Array | None = None,
  weights: jax.Array | None = None,
) -> jax.Array:
  """The weighted fraction of examples whose label's logit is among the top_k logits.

  logits [..., C]; label_ids [...] or label_probs [..., C] (their argmax is the label); weights
  [...] (default ones). A label tied with the k-th largest logit counts as correct (Pax's).
  """
  if label_ids is None and label_probs is None:
    raise ValueError("top_k_accuracy needs label_ids [...] or label_probs [..., C].")
  if label_ids is None:
    label_ids = jnp.argmax(label_probs, axis=-1)
  if weights is None:
    weights = jnp.ones(logits.shape[:-1])
  threshold = jnp.min(jax.lax.top_k(logits, top_k)[0], axis=-1)  # [...]: the k-th largest
  label_logit = jnp.take_along_axis(logits, label_ids[..., None], axis=-1)[..., 0]  # [...]
  correct = jnp.greater_equal(label_logit, threshold)
  return jnp.sum(correct * weights) / jnp.maximum(1.0, jnp.sum(weights))
