"""Pax's quantized Ngrammer and VQNgrammer: their bi-gram tables are quantization.Embedding.

Only the per-head tables (`ngram_table_i/emb_var`, the bulk of the weights) are
quantized, per bucket as in quantization.Embedding; the layer norms and the VQ
layer stay float. The variable tree is the float layers', with the tables'
emb_var_quantized_scale (and _zp) added in INFERENCE mode.
"""

from __future__ import annotations

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import ngrammer
from praxis.layers.quantization import embedding_softmax as quantized_embedding_softmax
from praxis.layers.quantization import quantization_hparams

QuantizationParams = quantization_hparams.QuantizationParams
instance_field = base_layer.instance_field


class Ngrammer(ngrammer.Ngrammer):
  """Ngrammer whose bi-gram tables are quantized with `quantization`."""

  quantization: QuantizationParams = instance_field(QuantizationParams)

  def _ngram_table_tpl(self) -> pax_fiddle.Config:
    return pax_fiddle.Config(
      quantized_embedding_softmax.Embedding,
      quantization=self.quantization,
      num_classes=self.ngram_vocab_size,
      input_dims=self.ngram_emb_dim,
      params_init=self.params_init,
    )


class VQNgrammer(ngrammer.VQNgrammer):
  """VQNgrammer whose inner Ngrammer (child `ngram_layer`) is the quantized one."""

  quantization: QuantizationParams = instance_field(QuantizationParams)

  def _ngram_layer_tpl(self) -> pax_fiddle.Config:
    return pax_fiddle.Config(Ngrammer, quantization=self.quantization)


# Pax's module-level names for the types and variable collections this module's API uses.
WeightHParams = base_layer.WeightHParams
