"""Pax's searchable quantized layers: the bit width is a per-layer AutoML decision.

SearchableLinear / SearchableAttentionProjection /
SearchableCombinedQKVProjectionLayer are the quantized layers whose
`weight_quantizer` (and, when activations are quantized, `act_quantizer`) is an
automl_select.AutoMLSelect over one TensorQuantizer per entry of `precisions`
(each from `quantization`'s params with only the precision changed). The
non-trainable `decision` of each selector picks the branch: decision i runs
precisions[i].
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers.quantization import attentions
from praxis.layers.quantization import automl_select
from praxis.layers.quantization import linears
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantizer

QuantizationParams = quantization_hparams.QuantizationParams
template_field = pax_fiddle.template_field

_SUPPORTED_PRECISIONS = (2, 4, 8)


def _build_quantization_templates(precisions: Sequence[int], base_qhparams: QuantizationParams):
  """(activation, weight) TensorQuantizer configs, one per precision.

  The activation list is empty when `base_qhparams` does not quantize activations
  (no act_params, or act_params.precision None).
  """
  if not precisions:
    raise AttributeError("Must specify at least 1 precisions: set `precisions`, e.g. [4, 8].")
  act_params = base_qhparams.act_params
  quantize_acts = act_params is not None and bool(act_params.precision)
  act_tpls, weight_tpls = [], []
  for bits in precisions:
    if bits not in _SUPPORTED_PRECISIONS:
      raise AttributeError(
        f"Precision {bits} is not supported; searchable layers take {list(_SUPPORTED_PRECISIONS)}."
      )
    if quantize_acts:
      act = quantizer.create_tensor_quantizer(f"act_quantizer_int{bits}", act_params)
      act.precision = bits
      act_tpls.append(act)
    weight = quantizer.create_tensor_quantizer(
      f"weight_quantizer_int{bits}", base_qhparams.weight_params
    )
    weight.precision = bits
    weight_tpls.append(weight)
  return act_tpls, weight_tpls


class SearchableQuantizedLayer(base_layer.BaseLayer):
  """Mixin: quantizers become AutoMLSelect branches, one per precision.

  Attributes:
    precisions: Candidate bit widths (each of 2, 4, 8).
  """

  precisions: Sequence[int] = dataclasses.field(default_factory=list)

  def create_tensor_quantizers(self):
    act_tpls, weight_tpls = _build_quantization_templates(self.precisions, self.quantization)
    if act_tpls:
      act = pax_fiddle.Config(automl_select.AutoMLSelect, search_options_tpl=act_tpls)
    else:
      # Activations are not searched: the plain (possibly pass-through) quantizer.
      act = quantizer.create_tensor_quantizer("aqt_quantizer", self.quantization.act_params)
    self.create_child("act_quantizer", act)
    self.create_child(
      "weight_quantizer",
      pax_fiddle.Config(automl_select.AutoMLSelect, search_options_tpl=weight_tpls),
    )


class SearchableLinear(SearchableQuantizedLayer, linears.Linear):
  """Quantized Linear whose precision is searched."""


class SearchableAttentionProjection(SearchableQuantizedLayer, attentions.AttentionProjection):
  """Quantized AttentionProjection whose precision is searched."""


class SearchableCombinedQKVProjectionLayer(
  SearchableQuantizedLayer, attentions.CombinedQKVProjectionLayer
):
  """Quantized CombinedQKVProjectionLayer whose precision is searched."""
