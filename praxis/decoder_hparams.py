"""Pax's decoder settings: GreedyDecoderHParams, SampleDecoderHParams, BeamSearchHParams.

A LanguageModel's `decoder_tpl` is one of these (Pax's fields and defaults). They are plain
dataclasses, as in Pax, so a config holds them as values: `pax_fiddle.Config(LanguageModel,
decoder_tpl=BeamSearchHParams(beam_size=4, max_decode_steps=8))`.

What `LanguageModel.decode` does with each (praxis.layers.lm_decode):
  GreedyDecoderHParams: argmax at every step (`praxis.sample_decode.greedy_decode`).
  SampleDecoderHParams: `num_samples` draws per row through `next_token_sampler_tpl`
    (praxis.token_samplers.DefaultNextTokenSampler: top-k, top-p, temperature) in
    `praxis.sample_decode.sample_decode`, or its `vanilla_sample_decode`.
  BeamSearchHParams: `praxis.beam_search.beam_search` (length normalization, EOS handling).
  FlatBeamSearchHParams: `praxis.flat_beam_search.flat_beam_search`.
Fields that need Pax machinery we do not have (mesh transposes, continuous batching,
precomputed prefix caches, controlled decoding, sample constraints, classifier-free guidance,
and lazy prefix broadcast / early_exit for beam search) are kept so configs
load, and decode raises when one is set to a non-default value; docs/praxis.md lists them.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Sequence

from praxis import base_hyperparams
from praxis import token_samplers


@dataclasses.dataclass
class DecoderHParams:
  """What every decoder shares.

  Attributes:
    seqlen: length of the output: prompt plus generated tokens (greedy and sampling).
    min_prefix_len: Pax's minimum prompt length (a prompt is at least one token here).
    eos_id: the token (or tokens) that end a row.
    min_decode_steps: EOS may not be chosen before this many tokens were generated.
    max_decode_steps: the most new tokens per row; None means up to seqlen. Beam search needs it.
    fprop_for_prefix: run the right-aligned prompts through one forward pass (needs
      max_decode_steps; the output is ids length + max_decode_steps long) instead of feeding
      them one position at a time (output seqlen long). Beam search always prefills.
    lazy_prefix_broadcast: samples share their prompt's cache (needs fprop_for_prefix and
      attention layers with lazy_broadcast_prefix, DotProductAttentionWithLPB); sampling only.
    decode_loop_mesh_axes_transpose: Pax's mesh transpose for the loop; not supported.
    process_result_fn: called as fn(model, result) on the decode output.
    emb_lookup_style: Pax's softmax-embedding lookup style (both styles give equal values).
    use_extra_input_kwargs: pass the batch's `extra_input_kwargs` dict to the LM's prefill.
    num_cache_slots: Pax's continuous batching; not supported.
    precompute_kv_cache_prefix_ids: Pax's precomputed prefix cache; not supported.
  """

  seqlen: int = 0
  min_prefix_len: int = 5
  eos_id: int | Sequence[int] = 2
  min_decode_steps: int = 0
  max_decode_steps: int | Sequence[int] | None = None
  fprop_for_prefix: bool = False
  lazy_prefix_broadcast: bool = False
  decode_loop_mesh_axes_transpose: dict[str, str] | None = None
  process_result_fn: Any = None
  emb_lookup_style: str = "matmul"
  use_extra_input_kwargs: bool = False
  num_cache_slots: int = 0
  precompute_kv_cache_prefix_ids: Any = None

  def clone(self):
    return copy.deepcopy(self)

  def eos_ids(self) -> tuple[int, ...]:
    """eos_id as a tuple (Pax allows one id or a sequence of them)."""
    if self.eos_id is None:
      return ()
    return tuple(self.eos_id) if isinstance(self.eos_id, Sequence) else (self.eos_id,)


@dataclasses.dataclass
class GreedyDecoderHParams(DecoderHParams):
  """Greedy decoding: the most likely token at every step."""


@dataclasses.dataclass
class BeamSearchHParams(DecoderHParams):
  """Beam search.

  Attributes:
    beam_size: hypotheses kept per row (and returned per row).
    tokens_per_beam: candidate tokens taken from each hypothesis before the global top-k;
      None means beam_size (which makes the search exact for one step).
    length_norm_alpha: a finished hypothesis of n new tokens scores
      sum(logprobs) / ((5 + n) / 5) ** alpha.
    early_exit: EOS may extend a live hypothesis (which is then `done`); the search stops once
      all are done.
    use_matmul_beam_shuffle: reorder the beams with a one-hot matmul (the same values).
    output_id_offset: added to every generated id (search over a slice of the vocabulary).
  """

  beam_size: int = 1
  tokens_per_beam: int | None = None
  length_norm_alpha: float = 0.8
  early_exit: bool = False
  use_matmul_beam_shuffle: bool = False
  output_id_offset: int = 0


@dataclasses.dataclass
class FlatBeamSearchHParams(BeamSearchHParams):
  """Pax's flat beam search (praxis.flat_beam_search): a row's hypotheses go through the
  model's extend_step together as ids [B, K]; Pax notes it does not work with real LMs yet."""


@dataclasses.dataclass
class SampleDecoderHParams(DecoderHParams):
  """Sampling.

  Attributes:
    num_samples: samples drawn per row.
    temperature: softmax temperature; 0 is greedy.
    k: sample among the k most likely tokens; 0 means the whole vocabulary.
    top_k_recall_target: < 1 uses approximate top-k (jax.lax.approx_max_k), also for sorting.
    use_top_k_for_logprobs: report each token's log-prob among the top-k only.
    p: top-p (nucleus): sample among the most likely tokens holding at least p of the mass
      (inside the top-k when k > 0); None disables it.
    next_token_sampler_tpl: the sampler's config (DefaultNextTokenSampler); k, p,
      global_normalize, top_k_recall_target and use_top_k_for_logprobs are copied onto it
      when override_next_token_sampler_params.
    sample_constraint: Pax's sample constraints; not supported.
    global_normalize: top-p over probabilities normalised over the whole vocabulary.
    cf_guidance_scale: classifier-free guidance; LanguageModel refuses it (as Pax).
    controlled_decoding: Pax's controlled decoding; not supported.
    sort_samples: order each row's samples by score, best first.
    override_next_token_sampler_params: copy the fields above onto the sampler.
    optimize_eos: end each sample where appending an EOS scores best.
    vanilla_sample_decode: Pax's simple loop (one sample, fprop_for_prefix, no samples dim).
    early_exit: Pax's switch between its while loop and a fixed-length scan; both give the
      same results here (always the while loop).
  """

  num_samples: int = 1
  temperature: float = 1.0
  k: int = 40
  top_k_recall_target: float = 1.0
  use_top_k_for_logprobs: bool = False
  p: Any = None
  next_token_sampler_tpl: Any = base_hyperparams.template_field(
    token_samplers.DefaultNextTokenSampler
  )
  sample_constraint: Any = None
  global_normalize: bool = False
  cf_guidance_scale: list[float] | float | None = None
  controlled_decoding: Any = None
  sort_samples: bool | None = True
  override_next_token_sampler_params: bool = True
  optimize_eos: bool = False
  vanilla_sample_decode: bool = False
  early_exit: bool = True


# Fields whose non-default value asks for Pax machinery this praxis does not implement.
UNSUPPORTED_FIELDS = (
  "decode_loop_mesh_axes_transpose",
  "num_cache_slots",
  "precompute_kv_cache_prefix_ids",
  "sample_constraint",
  "controlled_decoding",
)
# Pax's beam search options not implemented here.
UNSUPPORTED_BEAM_SEARCH_FIELDS = ("use_extra_input_kwargs",)


def check_supported(hparams: DecoderHParams) -> None:
  """Raises if `hparams` sets a field this praxis does not implement (see UNSUPPORTED_FIELDS)."""
  if getattr(hparams, "cf_guidance_scale", None) is not None:
    # Pax's LanguageModel refuses guidance with this message too (only its SequenceModel has it).
    raise NotImplementedError(
      f"LanguageModel does not support guidance. (cf_guidance_scale="
      f"{hparams.cf_guidance_scale!r}: leave it None.)"
    )
  # The fields' declared defaults (a subclass may not build with all of them, e.g. seqlen 0).
  defaults = {f.name: f.default for f in dataclasses.fields(hparams)}
  names = UNSUPPORTED_FIELDS
  if isinstance(hparams, BeamSearchHParams):
    names += UNSUPPORTED_BEAM_SEARCH_FIELDS
  for name in names:
    if name in defaults and getattr(hparams, name) != defaults[name]:
      raise NotImplementedError(
        f"{type(hparams).__name__}.{name}={getattr(hparams, name)!r} is not implemented in this "
        f"praxis; leave it at its default ({defaults[name]!r})."
      )
