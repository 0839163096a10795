"""Pax's next-token samplers: how one decode step turns logits into token ids.

`praxis.sample_decode`'s loop calls a sampler once per step as
`sampler(model, logits [B, V], temperature, decode_loop_state, per_example_top_p=...,
per_example_top_k=..., gumbel_prng_key=...)` and reads `new_ids [B]` (int32) and `logits` (the
logits whose log-softmax is recorded as the token's logprob) from the NestedMap it returns.

DefaultNextTokenSampler (Pax's semantics):
  top_k > 1: keep the k largest logits (per_example_top_k may keep fewer), then top-p inside
    them, then the gumbel-max trick: argmax(logits + temperature * gumbel noise). With a
    temperature of 0 that is the argmax of the top-k.
  top_k == 1: argmax (greedy; no randomness).
  top_k == 0: the whole vocabulary, after top-p; argmax when temperature is a number <= 0.
Noise comes from `model.next_prng_key()` (the "random" stream), or from per-row keys
`gumbel_prng_key [B, 2]` unless every entry of those is decoder_utils.DUMMY_PRNG_KEY.

Shape letters: B rows (batch * samples), V vocabulary, K top_k.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import decoder_utils
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
DUMMY_PRNG_KEY = decoder_utils.DUMMY_PRNG_KEY


def _large_negative(dtype) -> jax.Array:
  return py_utils.get_large_negative_number(dtype)


def _is_typed_key(key: JTensor) -> bool:
  return jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)


def _batch_rngs_random_gumbel(rngs: JTensor, shape: Sequence[int]) -> JTensor:
  """Gumbel noise of `shape` from one key ([2] raw, or a typed key), or one key per row
  (rngs [B, 2] raw or [B] typed, B = shape[0])."""
  key_rank = 0 if _is_typed_key(rngs) else 1
  if rngs.ndim == key_rank:
    return jax.random.gumbel(rngs, shape)
  if rngs.ndim != key_rank + 1 or rngs.shape[0] != shape[0]:
    raise ValueError(
      f"Per-row gumbel keys must be [batch, key] with batch = {shape[0]}, got {rngs.shape}."
    )
  return jax.vmap(lambda key: jax.random.gumbel(key, tuple(shape[1:])))(rngs)


def _gather_last(values: JTensor, index: JTensor) -> JTensor:
  """values [..., K] at index [...] -> [...]."""
  return jnp.take_along_axis(values, index[..., None], axis=-1)[..., 0]


def get_top_k(
  logits: JTensor,
  top_k: int,
  per_example_top_k: JTensor | None,
  top_k_recall_target: float = 1.0,
) -> tuple[JTensor, JTensor]:
  """(top-k logits [B, K], their vocabulary ids [B, K]); top_k 0 keeps the whole vocabulary.

  Rows with a smaller per_example_top_k [B] get the large negative number past their k.
  top_k_recall_target < 1 uses jax.lax.approx_max_k (TPU's fast, possibly inexact top-k).
  """
  if not top_k:
    ids = jnp.broadcast_to(jnp.arange(logits.shape[-1]), logits.shape)
    return logits, ids
  if top_k_recall_target < 1.0:
    if top_k_recall_target <= 0.0:
      raise ValueError(f"top_k_recall_target must be in (0, 1], got {top_k_recall_target}.")
    values, ids = jax.lax.approx_max_k(logits, top_k, recall_target=top_k_recall_target)
  else:
    values, ids = jax.lax.top_k(logits, top_k)
  if per_example_top_k is not None:
    keep = jnp.minimum(per_example_top_k.astype(jnp.int32), top_k)  # [B]
    rank = jnp.arange(top_k, dtype=jnp.int32)[None, :]  # [1, K]
    values = jnp.where(rank < keep[:, None], values, _large_negative(values.dtype))
  return values, ids


def top_p_mask_logits(
  logits: JTensor,
  p: float | JTensor,
  logits_sorted_in_descending_order: bool = False,
  logits_sum: JTensor | None = None,
) -> JTensor:
  """Nucleus filtering: keeps the most likely tokens whose probabilities sum to at least p.

  logits [B, V]; p a number or [B, 1]. The other logits become the large negative number. The
  cut is found on sorted probabilities: ascending (small ones summed first, which is more
  precise) unless the logits already come sorted in descending order (a top-k). `logits_sum`
  replaces the softmax by logits / logits_sum (Pax's global normalisation).
  """
  if not isinstance(p, jax.Array) and p >= 1.0:
    return logits
  if logits_sorted_in_descending_order:
    ordered = logits
  else:
    ordered = jnp.sort(logits, axis=-1)  # ascending
  if logits_sum is not None:
    probs = ordered.astype(jnp.float32) / logits_sum
  else:
    probs = jax.nn.softmax(ordered.astype(jnp.float32), axis=-1)
  cumulative = jnp.cumsum(probs, axis=-1)  # [B, V]
  # Descending: the tokens before the mass reaches p, and the one that reaches it.
  # Ascending: the tokens that together hold at most 1 - p are dropped.
  threshold = p if logits_sorted_in_descending_order else 1.0 - p
  cut = jnp.sum((cumulative <= threshold).astype(jnp.int32), axis=-1)  # [B]
  cutoff = _gather_last(ordered, cut)  # [B]
  return jnp.where(logits < cutoff[:, None], _large_negative(logits.dtype), logits)


def epsilon_mask_logits(logits: JTensor, epsilon: float) -> JTensor:
  """Masks the logits of tokens whose probability is below epsilon (epsilon sampling)."""
  if epsilon <= 0:
    return logits
  probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
  return jnp.where(probs < epsilon, _large_negative(logits.dtype), logits)


def _top_p_of_top_k(
  top_k_logits: JTensor, top_p: float | JTensor | None, logits_sum: JTensor | None
) -> JTensor:
  if top_p is None:
    return top_k_logits
  if isinstance(top_p, jax.Array):
    # Per-row p: skip the sort and cumsum when no row asks for nucleus filtering.
    return jax.lax.cond(
      jnp.any(top_p < 1.0),
      lambda: top_p_mask_logits(top_k_logits, top_p, True, logits_sum),
      lambda: top_k_logits,
    )
  return top_p_mask_logits(top_k_logits, top_p, True, logits_sum)


def _apply_top_p_given_top_k(
  top_k_logits: JTensor,
  top_k_indices: JTensor,
  top_p: float | JTensor | None = None,
  topk_is_sorted: bool = True,
  logits_sum: JTensor | None = None,
) -> tuple[JTensor, JTensor, JTensor]:
  """(top-p-filtered top-k logits [B, K], top-k log-probs [B, K], top-k ids [B, K])."""
  if topk_is_sorted:
    filtered = _top_p_of_top_k(top_k_logits, top_p, logits_sum)
  elif top_p is None:
    filtered = top_k_logits
  else:
    filtered = top_p_mask_logits(top_k_logits, top_p, False, logits_sum)
  top_k_logprobs = jax.nn.log_softmax(top_k_logits.astype(jnp.float32))
  return filtered, top_k_logprobs, top_k_indices


def _apply_top_k_and_top_p(
  logits: JTensor,
  top_k: int,
  top_p: float | JTensor | None = None,
  per_example_top_k: JTensor | None = None,
  global_normalize: bool = False,
  top_k_recall_target: float = 1.0,
) -> tuple[JTensor, JTensor, JTensor]:
  """Top-k first, then top-p inside it: see `_apply_top_p_given_top_k` for the outputs.

  global_normalize: top-p measures probability as logit / sum of all V logits (Pax's option)
  instead of the softmax over the top-k.
  """
  top_logits, top_ids = get_top_k(logits, top_k, per_example_top_k, top_k_recall_target)
  logits_sum = (
    jnp.sum(logits.astype(jnp.float32), axis=-1, keepdims=True) if global_normalize else None
  )
  return _apply_top_p_given_top_k(top_logits, top_ids, top_p, True, logits_sum)


def _get_argmax_ids(top_k_argmax_ids: JTensor, top_k_items: JTensor) -> JTensor:
  """top_k_items [..., K] at the positions top_k_argmax_ids [...] -> [...]."""
  return _gather_last(top_k_items, top_k_argmax_ids)


class BaseLogitsSampler(base_hyperparams.FiddleBaseParameterizable):
  """Picks one index per row of (filtered) logits: `(ids [B], state updates)`."""

  def __call__(self, prng_key, logits, ids, temperature, decode_loop_state):
    raise NotImplementedError(f"{type(self).__name__} must implement __call__.")


class DefaultCategoricalLogitsSampler(BaseLogitsSampler):
  """The gumbel-max trick: argmax(logits + temperature * gumbel noise), a draw from
  softmax(logits / temperature)."""

  def __call__(self, prng_key, logits, ids, temperature, decode_loop_state):
    del ids, decode_loop_state
    temperature = 0.0 if temperature is None else temperature
    noise = _batch_rngs_random_gumbel(prng_key, logits.shape).astype(logits.dtype)
    return jnp.argmax(logits + noise * temperature, axis=-1), NestedMap()


def sample_from_top_p_given_top_k(
  top_k_logits: JTensor,
  top_k_indices: JTensor,
  prng_key: JTensor,
  temperature: JTensor | float,
  top_p: float | JTensor | None = None,
  topk_is_sorted: bool = True,
  logits_sum: JTensor | None = None,
  logits_sampler: BaseLogitsSampler | None = None,
  decode_loop_state: NestedMap | None = None,
) -> tuple[JTensor, JTensor]:
  """A draw among given top-k logits [B, K] (ids [B, K]) after top-p: (ids [B], log-probs [B])."""
  sampler = logits_sampler or DefaultCategoricalLogitsSampler()
  filtered, top_logprobs, top_ids = _apply_top_p_given_top_k(
    top_k_logits, top_k_indices, top_p, topk_is_sorted, logits_sum
  )
  choice, _ = sampler(prng_key, filtered, top_ids, temperature, decode_loop_state)  # [B]
  return _get_argmax_ids(choice, top_ids), _get_argmax_ids(choice, top_logprobs)


def sample_from_top_k_and_top_p(
  logits: JTensor,
  prng_key: JTensor,
  temperature: JTensor | float,
  top_k: int,
  top_p: float | JTensor | None = None,
  per_example_top_k: JTensor | None = None,
  global_normalize: bool = False,
  top_k_recall_target: float = 1.0,
  logits_sampler: BaseLogitsSampler | None = None,
  decode_loop_state: NestedMap | None = None,
) -> tuple[JTensor, JTensor]:
  """Top-k, then top-p inside it, then a draw: (ids [B], their log-probs among the top-k [B])."""
  sampler = logits_sampler or DefaultCategoricalLogitsSampler()
  filtered, top_logprobs, top_ids = _apply_top_k_and_top_p(
    logits, top_k, top_p, per_example_top_k, global_normalize, top_k_recall_target
  )  # [B, K] each
  choice, _ = sampler(prng_key, filtered, top_ids, temperature, decode_loop_state)
  return _gather_last(top_ids, choice), _gather_last(top_logprobs, choice)


class BaseNextTokenSampler(base_hyperparams.FiddleBaseParameterizable):
  """Pax's interface of a decode step's sampler (see the module docstring)."""

  def __call__(self, model, logits, temperature, decode_loop_state, **kwargs) -> NestedMap:
    raise NotImplementedError(f"{type(self).__name__} must implement __call__.")

  def init_decode_loop_state(
    self, decode_loop_state: NestedMap, model: Any = None, batch_size=None, eos_id=None
  ) -> NestedMap:
    """Adds the sampler's own entries to the loop state (none by default)."""
    return decode_loop_state

  def post_process_decode_loop_state(self, decode_loop_state: NestedMap) -> NestedMap:
    """Removes the sampler's entries from the final loop state (none by default)."""
    return decode_loop_state

  @classmethod
  def get_extra_kwargs(cls, inputs: NestedMap, num_samples: int) -> dict[str, Any]:
    """Constructor arguments a sampler takes from the decode batch (none by default)."""
    return {}

  def _get_prng_key(self, model: Any, prng_key: JTensor | None = None) -> JTensor:
    """The model's next "random" key, or the per-row keys [B, 2] unless they are all dummies."""
    model_key = model.next_prng_key()
    if prng_key is None:
      return model_key
    per_row = jax.random.split(model_key, prng_key.shape[0])
    if _is_typed_key(per_row) and not _is_typed_key(prng_key):
      per_row = jax.random.key_data(per_row)  # both branches as raw uint32 [B, 2]
    return jax.lax.cond(jnp.all(prng_key == DUMMY_PRNG_KEY), lambda: per_row, lambda: prng_key)


class DefaultNextTokenSampler(BaseNextTokenSampler):
  """Top-k / top-p / epsilon sampling with temperature (Pax's fields; module docstring).

  Attributes:
    top_k: 0 the whole vocabulary, 1 greedy, k > 1 the k most likely tokens.
    top_p: nucleus mass (None or >= 1 disables it); a batch's per_example_top_p overrides it.
    epsilon_p: if > 0, drop tokens whose probability is below it first.
    global_normalize: top-p over probabilities normalised over the whole vocabulary
      (logits / their sum, as Pax) instead of over the top-k.
    top_k_recall_target: < 1 uses approximate top-k.
    use_top_k_for_logprobs: report the chosen token's log-prob among the top-k only.
    logits_sampler: the final draw (gumbel-max by default).
  """

  top_k: int = 40
  top_p: Any = None
  epsilon_p: float = 0.0
  global_normalize: bool = False
  top_k_recall_target: float = 1.0
  use_top_k_for_logprobs: bool = False
  logits_sampler: BaseLogitsSampler = base_hyperparams.instance_field(
    DefaultCategoricalLogitsSampler
  )

  def __call__(
    self,
    model,
    logits,
    temperature,
    decode_loop_state,
    per_example_top_p=None,
    per_example_top_k=None,
    gumbel_prng_key=None,
  ) -> NestedMap:
    if self.top_k < 0:
      raise ValueError(f"DefaultNextTokenSampler.top_k must be >= 0, got {self.top_k}.")
    original = logits
    top_p = per_example_top_p if per_example_top_p is not None else self.top_p
    logits = epsilon_mask_logits(logits, self.epsilon_p)
    if self.top_k == 1:
      return NestedMap(new_ids=jnp.argmax(logits, axis=1).astype(jnp.int32), logits=original)
    if self.top_k == 0:
      if top_p is not None:
        logits = top_p_mask_logits(logits, top_p)
      if isinstance(temperature, jax.Array) or temperature > 0.0:
        new_ids, updates = self.logits_sampler(
          self._get_prng_key(model, gumbel_prng_key),
          logits,
          None,
          temperature,
          decode_loop_state,
        )
      else:
        new_ids, updates = jnp.argmax(logits, axis=1), NestedMap()
      return NestedMap(new_ids=new_ids.astype(jnp.int32), logits=original, **updates)
    top_logits, top_ids = get_top_k(
      logits, self.top_k, per_example_top_k, self.top_k_recall_target
    )  # [B, K] each
    logits_sum = None
    if self.global_normalize:
      logits_sum = jnp.sum(logits.astype(jnp.float32), axis=-1, keepdims=True)
    filtered = _top_p_of_top_k(top_logits, top_p, logits_sum)
    choice, updates = self.logits_sampler(
      self._get_prng_key(model, gumbel_prng_key), filtered, top_ids, temperature, decode_loop_state
    )
    out = NestedMap(
      new_ids=_gather_last(top_ids, choice).astype(jnp.int32), logits=original, **updates
    )
    if self.use_top_k_for_logprobs:
      top_logprobs = jax.nn.log_softmax(top_logits.astype(jnp.float32))  # [B, K]
      out.logprobs_at_new_ids = _gather_last(top_logprobs, choice)
    return out
