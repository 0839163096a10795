"""Pax's overflow-checking layers: log when an output leaves a numeric range.

Each *OverflowCheck layer is the float layer it names plus a check of its
outputs against `overflow_limits` (default: float16's range), e.g. to see
whether a model can run in half precision. The check runs inside jit: a
jax.debug.callback logs `Overflow in: <layer kind>, <layer name>, max_val: ..,
min_val: ..` at WARNING level when max > max_val or min < min_val.
`add_overflow_checks(task_p)` swaps them into an LM task's transformer layer.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from absl import logging
import jax
from jax import numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import attentions
from praxis.layers import linears
from praxis.layers import multi_query_attention

instance_field = base_layer.instance_field
JTensor = pytypes.JTensor

_F16 = jnp.finfo(jnp.float16)


@dataclasses.dataclass
class OverflowLimits:
  """Range outside which values count as overflow."""

  max_val: float = float(_F16.max)
  min_val: float = float(_F16.min)


class OverflowChecker(base_layer.BaseLayer):
  """Mixin: check_overflow(x, kind, name) logs when x leaves overflow_limits."""

  overflow_limits: OverflowLimits = instance_field(OverflowLimits)

  def check_overflow(self, inputs: JTensor, class_name: str, name: str) -> None:
    hi = jnp.max(inputs)
    lo = jnp.min(inputs)
    limits = self.overflow_limits
    overflow = jnp.logical_or(hi > limits.max_val, lo < limits.min_val)

    def log(max_val, min_val):
      # Formatted here: Pax's readers match the message text, not its arguments.
      logging.warning(f"Overflow in: {class_name}, {name}, max_val: {max_val}, min_val: {min_val}")  # noqa: G004

    def report(hi, lo):
      jax.debug.callback(log, hi, lo)

    def quiet(hi, lo):
      del hi, lo

    # cond, so the host callback only fires (and only costs) when something overflowed.
    jax.lax.cond(overflow, report, quiet, hi, lo)


class FeedForwardOverflowCheck(linears.FeedForward, OverflowChecker):
  """linears.FeedForward that checks its output."""

  def __call__(self, inputs: JTensor) -> JTensor:
    out = super().__call__(inputs)
    self.check_overflow(out, "FeedForward", self.name)
    return out


class AttentionProjectionOverflowCheck(attentions.AttentionProjection, OverflowChecker):
  """attentions.AttentionProjection that checks its output."""

  def __call__(self, inputs: JTensor) -> JTensor:
    out = super().__call__(inputs)
    self.check_overflow(out, "AttentionProjection", self.name)
    return out

  def extend_step(self, inputs: JTensor, *, time_step: JTensor) -> JTensor:
    del time_step  # A projection is position-independent.
    return self.__call__(inputs)


class CombinedQKVProjectionLayerOverflowCheck(
  attentions.CombinedQKVProjectionLayer, OverflowChecker
):
  """attentions.CombinedQKVProjectionLayer that checks q, k and v."""

  def __call__(self, inputs: JTensor) -> tuple[JTensor, JTensor, JTensor]:
    q, k, v = super().__call__(inputs)
    for label, x in (("q", q), ("k", k), ("v", v)):
      self.check_overflow(x, f"CombinedQKVProjection {label}", self.name)
    return q, k, v

  def extend_step(self, inputs: JTensor, *, time_step: JTensor) -> Any:
    del time_step  # A projection is position-independent.
    return self.__call__(inputs)


class OneHeadedAttentionProjectionOverflowCheck(
  multi_query_attention.OneHeadedAttentionProjection, OverflowChecker
):
  """multi_query_attention.OneHeadedAttentionProjection that checks its output."""

  def __call__(self, inputs: JTensor) -> JTensor:
    out = super().__call__(inputs)
    self.check_overflow(out, "OneHeadedAttentionProjection", self.name)
    return out


def add_overflow_checks(
  task_p: Any,
  max_val: float = float(_F16.max),
  min_val: float = float(_F16.min),
) -> Any:
  """A copy of an LM task config whose transformer layer checks every projection's output.

  task_p.model.lm_tpl.stacked_transformer_tpl.block.transformer_layer_params_tpl gets the
  overflow-checking feed-forward and attention projections (one-headed key/value projections for
  multi-query attention, the combined QKV projection for DotProductAttention).
  """
  task_p = task_p.clone()
  layer_p = task_p.model.lm_tpl.stacked_transformer_tpl.block.transformer_layer_params_tpl
  limits = OverflowLimits(max_val=max_val, min_val=min_val)

  def checked(cls):
    return pax_fiddle.Config(cls, overflow_limits=limits)

  layer_p.tr_fflayer_tpl.fflayer_tpl = checked(FeedForwardOverflowCheck)
  atten_p = layer_p.tr_atten_tpl
  atten_p.proj_tpl = checked(AttentionProjectionOverflowCheck)
  atten_cls = atten_p.cls
  if issubclass(atten_cls, multi_query_attention.MultiQueryDotProductAttention):
    atten_p.headless_proj_tpl = checked(OneHeadedAttentionProjectionOverflowCheck)
  if issubclass(atten_cls, attentions.DotProductAttention):
    atten_p.combined_qkv_proj_tpl = checked(CombinedQKVProjectionLayerOverflowCheck)
  return task_p
