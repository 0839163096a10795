"""Pax's quantized conformer attention: DotProductAttentionWithContext over
quantization.attentions.DotProductAttention (quantized projections and, with
act_params, quantized attention einsums), with the float layer's left / right
context window.
"""

from __future__ import annotations

from praxis import pytypes
from praxis.layers import conformers
from praxis.layers.quantization import attentions as qattentions

JTensor = pytypes.JTensor


class DotProductAttentionWithContext(qattentions.DotProductAttention):
  """Quantized DotProductAttention seeing left_context - 1 steps back and right_context ahead.

  None on both sides is global attention; one side None is unlimited on that side.

  Attributes:
    left_context: how far back a query sees (None: unlimited).
    right_context: how far ahead (None: unlimited).
  """

  left_context: int | None = None
  right_context: int | None = None

  def _dot_atten(
    self, query: JTensor, key: JTensor, value: JTensor, atten_mask: JTensor, *args, **kwargs
  ):
    """query [B, T, N, H], key / value [B, S, N, H], atten_mask [1|B, 1, 1|T, S]."""
    atten_mask = conformers._with_context_mask(self, query, atten_mask)  # pylint: disable=protected-access
    return super()._dot_atten(query, key, value, atten_mask, *args, **kwargs)
