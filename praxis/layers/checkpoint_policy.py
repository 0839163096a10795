"""Remat (gradient checkpointing) policies by name, as Pax's `AutodiffCheckpointType`.

A repeated layer (repeats.Repeat) recomputes its forward pass during the backward pass; the
policy says which intermediate values it may keep instead. Saving more uses more memory and
recomputes less. The named policies keep values that the layers tag with
`jax.ad_checkpoint.checkpoint_name`:

    query_proj, key_proj, value_proj, combined_qkv_proj   attention input projections [B, T, N, H]
    context                                              attention output per head [B, T, N, H]
    out_proj                                             attention output projection [B, T, D]
    ffn1, ffn2                                           FFN hidden activation / FFN output
    transformer_layer_out                                a Transformer layer's output [B, T, D]
    iteration_input                                      the input of each repeat iteration
"""

from __future__ import annotations

import enum
from typing import Any, Callable

import jax

Policy = Callable[..., Any]


class AutodiffCheckpointType(str, enum.Enum):
  """What a rematted layer saves for the backward pass."""

  SAVE_NOTHING = "save_nothing"  # recompute everything (least memory)
  SAVE_EVERYTHING = "save_everything"  # recompute nothing (as without remat)
  SAVE_DOT_ONLY = "save_dot_only"  # every matmul output
  SAVE_DOT_WITH_NO_BATCH_DIM = "save_dot_with_no_batch_dim"  # matmuls without a batch dim
  SAVE_QKV_OUT_PROJ = "save_qkv_out_proj"  # attention input and output projections
  SAVE_OUT_PROJ = "save_out_proj"  # attention output projection
  SAVE_CONTEXT = "save_context"  # attention output before the output projection
  SAVE_CONTEXT_AND_OUT_PROJ = "save_context_and_out_proj"
  SAVE_FFN1 = "save_ffn1"  # FFN hidden activations
  SAVE_ITERATION_INPUT = "save_iteration_input"  # each repeat iteration's input
  SAVE_TRANSFORMER_LAYER_OUTPUT = "save_transformer_layer_output"
  # Pax's default for StackedTransformer(remat=True): the attention projections, the context
  # and the FFN output, not the logits nor the FFN hidden activations.
  SAVE_DOT_EXCEPT_LOGITS_FFN1 = "save_dot_except_logits_ffn1"
  # Pax's C4 GPT-3 (MLPerf) setting: the attention projections and context, not the FFN.
  SAVE_DOT_FOR_MLPERF_200B = "save_dot_for_mlperf_200b"


_NAMES = {
  AutodiffCheckpointType.SAVE_DOT_FOR_MLPERF_200B: (
    "combined_qkv_proj",
    "query_proj",
    "value_proj",
    "key_proj",
    "context",
    "out_proj",
  ),
  AutodiffCheckpointType.SAVE_QKV_OUT_PROJ: (
    "query_proj",
    "key_proj",
    "value_proj",
    "combined_qkv_proj",
    "out_proj",
  ),
  AutodiffCheckpointType.SAVE_OUT_PROJ: ("out_proj",),
  AutodiffCheckpointType.SAVE_CONTEXT: ("context",),
  AutodiffCheckpointType.SAVE_CONTEXT_AND_OUT_PROJ: ("context", "out_proj"),
  AutodiffCheckpointType.SAVE_FFN1: ("ffn1",),
  AutodiffCheckpointType.SAVE_ITERATION_INPUT: ("iteration_input",),
  AutodiffCheckpointType.SAVE_TRANSFORMER_LAYER_OUTPUT: ("transformer_layer_out",),
  AutodiffCheckpointType.SAVE_DOT_EXCEPT_LOGITS_FFN1: (
    "combined_qkv_proj",
    "query_proj",
    "value_proj",
    "key_proj",
    "context",
    "out_proj",
    "ffn2",
  ),
}


def custom_policy(checkpoint_type: AutodiffCheckpointType | str) -> Policy:
  """Returns the jax.checkpoint_policies policy for `checkpoint_type` (enum or its value)."""
  try:
    kind = AutodiffCheckpointType(checkpoint_type)
  except ValueError:
    valid = ", ".join(t.name for t in AutodiffCheckpointType)
    raise ValueError(
      f"Unknown checkpoint policy {checkpoint_type!r}; use an AutodiffCheckpointType: {valid}."
    ) from None
  policies = jax.checkpoint_policies
  if kind == AutodiffCheckpointType.SAVE_NOTHING:
    return policies.nothing_saveable
  if kind == AutodiffCheckpointType.SAVE_EVERYTHING:
    return policies.everything_saveable
  if kind == AutodiffCheckpointType.SAVE_DOT_ONLY:
    return policies.dots_saveable
  if kind == AutodiffCheckpointType.SAVE_DOT_WITH_NO_BATCH_DIM:
    return policies.dots_with_no_batch_dims_saveable
  return policies.save_only_these_names(*_NAMES[kind])
