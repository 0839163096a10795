"""The seed's decode settings (one of Pax's decoder settings) and its pure-function decode API.

`sample_decode(extend_fn, state, ids, prefix_lengths, hparams, rng)` decodes over a pure function

    extend_fn(state, ids [B], time_step) -> (state, logits [B, V])

that feeds the token at position `time_step` of every row and returns the logits of the next
position (for a Transformer LM, `state` is the "decoder_cache" collection holding the K/V of the
positions seen so far), and a buffer `ids [B, S]` whose first `prefix_lengths[b]` tokens are row
b's prompt. The caller must already have run the prompt through the model (the prefill), so that
`state` holds the K/V of every prompt position.

There is one greedy / sampling loop, Pax's `praxis.sample_decode.sample_decode` (its
extend-step-for-the-prefix mode); this module wraps `extend_fn` and `state` in a small module
whose decode cache is the state, and maps the settings and outputs. Every row feeds its own
prompt token by token from position 0 ("teacher forcing": re-feeding a prompt token rewrites
the cache entry the prefill wrote with the same value) and then picks new tokens: the argmax
(temperature 0) or Pax's gumbel-max draw from softmax(logits / temperature), among the top_k
largest when top_k > 0 (praxis.token_samplers).

A row stops after it emits `eos_id` (the EOS is kept and counted in its length), after
`max_decode_steps` new tokens, or at the end of the buffer (`seqlen`). Positions after a row's
end hold `pad_id`; `logprobs` are 0 outside the generated tokens (Pax's loop writes 1.0 after
the end and the prompt tokens' log-probs).

Shape letters: B batch, S seqlen (the buffer), V vocabulary, K top_k.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_hyperparams
from praxis import base_layer
from praxis import decoder_hparams
from praxis import pytypes
from praxis import sample_decode as pax_sample_decode
from praxis import token_samplers

NestedMap = pytypes.NestedMap
# extend_fn(state, ids [B], time_step scalar int32) -> (state, logits [B, V]).
ExtendFn = Callable[[Any, jax.Array, jax.Array], tuple[Any, jax.Array]]


@dataclasses.dataclass
class DecoderHParams(decoder_hparams.SampleDecoderHParams, base_hyperparams.HParamsMixin):
  """The seed's decode settings, as one of Pax's: a SampleDecoderHParams with one sample.

  `LanguageModel.decode` runs it as Pax's sampling decode (and returns Pax's form); the pure
  function `sample_decode` below takes it too. Temperature 0 is greedy (Pax's k = 1); otherwise
  `k = top_k` (0: the whole vocabulary).

  Attributes (besides Pax's):
    seqlen: length of the output buffer: prompt plus generated tokens (the KV cache length).
    max_decode_steps: Pax's: with fprop_for_prefix, the most new tokens per row; without it,
      LanguageModel.decode stops after this many extend steps from position 0 (prompt copies
      included), while the pure `sample_decode` below counts new tokens per row. None: until
      EOS or the end of the buffer.
    temperature: 0 picks the most likely token (greedy); > 0 samples from softmax(logits / T).
    top_k: if > 0, sample only among the k most likely tokens (ignored when greedy).
    eos_id: the token that ends a row (2, Pax's default), or a tuple of such tokens; None never
      stops early.
    pad_id: written after a row's end by `sample_decode` (LanguageModel.decode writes Pax's 0).
    min_decode_steps: no EOS is chosen before this many new tokens (Pax's min_decode_steps).
  """

  temperature: float = 0.0
  top_k: int = 0
  pad_id: int = 0

  def __post_init__(self):
    parent = getattr(super(), "__post_init__", None)
    if parent is not None:
      parent()
    if self.seqlen <= 0:
      raise ValueError(
        f"DecoderHParams.seqlen must be positive (prompt + generated length), got {self.seqlen}."
      )
    if self.max_decode_steps is not None and self.max_decode_steps < 0:
      raise ValueError(
        f"DecoderHParams.max_decode_steps must be >= 0 or None, got {self.max_decode_steps}."
      )
    if self.temperature < 0:
      raise ValueError(
        f"DecoderHParams.temperature must be >= 0 (0 = greedy), got {self.temperature}."
      )
    if self.top_k < 0:
      raise ValueError(
        f"DecoderHParams.top_k must be >= 0 (0 = whole vocabulary), got {self.top_k}."
      )
    # Pax's fields that carry the seed's meaning.
    self.num_samples = 1
    self.k = self.top_k if self.temperature > 0.0 else 1


def pick_next_token(
  logits: jax.Array, rng: jax.Array | None, *, temperature: float, top_k: int
) -> jax.Array:
  """Chooses one token per row from `logits [B, V]`; returns ids [B] (int32).

  temperature == 0 is greedy (argmax; `rng` is not used). Otherwise the token is drawn from
  softmax(logits / temperature), restricted to the `top_k` largest logits when top_k > 0, by
  Pax's gumbel-max sampler (praxis.token_samplers).
  """
  logits = logits.astype(jnp.float32)
  if temperature == 0.0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  if rng is None:
    raise ValueError("Sampling with temperature > 0 needs an rng; pass one or set temperature=0.")
  top_k = min(top_k, logits.shape[-1])
  ids, _ = token_samplers.sample_from_top_k_and_top_p(logits, rng, temperature, top_k=top_k)
  return ids.astype(jnp.int32)


class _PureStepLm(nn.Module):
  """A pure extend_fn and its state as a module for Pax's loop: the state's leaves and the
  position counter live in the "decoder_cache" collection."""

  extend_fn: Callable
  treedef: Any

  def extend_step(self, ids, segment_pos):
    del segment_pos  # the counter is the position: every row feeds position t at step t
    cache = base_layer.DECODE_CACHE
    leaves = self.get_variable(cache, "leaves")
    time_step = self.get_variable(cache, "time_step")
    state, logits = self.extend_fn(
      jax.tree_util.tree_unflatten(self.treedef, list(leaves)), ids, time_step
    )
    self.put_variable(cache, "leaves", tuple(jax.tree_util.tree_leaves(state)))
    self.put_variable(cache, "time_step", time_step + 1)
    return pytypes.NestedMap(logits=logits)

  def next_prng_key(self):
    return self.make_rng(base_layer.RANDOM)

  def add_summary(self, *args, **kwargs):
    del args, kwargs  # the loop's summaries are not kept here


def sample_decode(
  extend_fn: ExtendFn,
  state: Any,
  ids: jax.Array,
  prefix_lengths: jax.Array,
  hparams: DecoderHParams,
  rng: jax.Array | None = None,
) -> NestedMap:
  """Decodes with Pax's loop (see the module docstring).

  Args:
    extend_fn: feeds one position of every row; `state` is threaded through it.
    state: the cache after the prefill of `ids`.
    ids: [B, S] int, the prompts left-aligned; positions >= prefix_lengths are ignored.
    prefix_lengths: [B] int, each row's prompt length, at least 1 (e.g. a BOS token).
    hparams: the decoding parameters; `hparams.seqlen` must equal S.
    rng: key for sampling (temperature > 0).

  Returns:
    NestedMap with
      output_ids [B, S]: prompt, then generated tokens, then pad_id;
      prefix_lengths [B];
      decode_lengths [B]: prompt plus generated tokens (an EOS included);
      logprobs [B, S]: log-prob of each generated token under the model's distribution
        (log_softmax of the unscaled logits over the whole vocabulary), 0 elsewhere;
      scores [B]: the sum of a row's logprobs.
  """
  batch, seqlen = ids.shape
  eos_ids = None if hparams.eos_id is None else np.atleast_1d(hparams.eos_id).tolist()
  if seqlen != hparams.seqlen:
    raise ValueError(
      f"sample_decode: the ids buffer has length {seqlen} but "
      f"DecoderHParams.seqlen is {hparams.seqlen}; pad or cut the batch to seqlen."
    )
  ids = jnp.asarray(ids, jnp.int32)
  prefix_lengths = jnp.clip(jnp.asarray(prefix_lengths, jnp.int32), 1, seqlen)  # [B]
  positions = jnp.arange(seqlen, dtype=jnp.int32)[None, :]  # [1, S]
  if hparams.temperature > 0.0 and rng is None:
    raise ValueError("Sampling with temperature > 0 needs an rng; pass one or set temperature=0.")
  if hparams.max_decode_steps == 0 or seqlen == 1:
    # Nothing to generate (Pax's loop would still run its first step).
    lengths, logprobs = prefix_lengths, jnp.zeros((batch, seqlen), jnp.float32)
  else:
    leaves, treedef = jax.tree_util.tree_flatten(state)
    vocab = jax.eval_shape(extend_fn, state, ids[:, 0], jnp.zeros((), jnp.int32))[1].shape[-1]
    top_k = min(hparams.top_k, vocab) if hparams.temperature > 0.0 else 1
    sampler = token_samplers.DefaultNextTokenSampler(top_k=top_k)
    limit = None
    if hparams.max_decode_steps is not None:
      limit = jnp.full((batch,), hparams.max_decode_steps, jnp.int32)

    def run(model):
      return pax_sample_decode.sample_decode_after_fprop(
        model,
        lambda m, step_ids, segment_pos: m.extend_step(step_ids, segment_pos).logits,
        None,
        None,
        sampler,
        ids,
        jnp.zeros(ids.shape, jnp.float32),
        seqlen,
        num_samples=1,
        temperature=hparams.temperature,
        per_example_max_decode_steps=limit,
        prefix_lengths=prefix_lengths,
        eos_id=eos_ids,
        min_decode_steps=hparams.min_decode_steps,
      )

    cache = {"leaves": tuple(leaves), "time_step": jnp.zeros((), jnp.int32)}
    # parent=None: built inside a bound module (LanguageModel.decode), it is no child of it.
    out, _ = _PureStepLm(extend_fn, treedef, parent=None).apply(
      {base_layer.DECODE_CACHE: cache},
      method=run,
      rngs={} if rng is None else {base_layer.RANDOM: rng},
      mutable=[base_layer.DECODE_CACHE],
    )
    ids, lengths, logprobs = out.output_ids[:, 0], out.decode_lengths[:, 0], out.logprobs[:, 0]
  generated = (positions >= prefix_lengths[:, None]) & (positions < lengths[:, None])  # [B, S]
  output_ids = jnp.where(positions < lengths[:, None], ids, hparams.pad_id)
  logprobs = jnp.where(generated, logprobs, 0.0)
  return NestedMap(
    output_ids=output_ids,
    prefix_lengths=prefix_lengths,
    decode_lengths=lengths,
    logprobs=logprobs,
    scores=jnp.sum(logprobs, axis=-1),
  )
