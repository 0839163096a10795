"""Transformer layers, as Pax's `praxis.layers.transformers` (one module per concept below).

- transformer_feed_forward: TransformerFeedForward (the MLP with its norm and residual).
- transformer_layer: Transformer (self-attention, optional cross-attention, feed-forward).
- stacked_transformers: StackedTransformer, StackedTransformerRepeated (nn.scan) and the masks
  they build (compute_attention_masks_for_fprop / _for_extend_step).

- pipeline: PipelinedTransformer (a pipelined stack; with the pipeline layers it is built on).

- transformer_moe: TransformerFeedForwardMoe (Pax's mixture-of-experts feed-forward; routing in
  praxis.gshard_utils).

Each module's docstring has the call shapes, norm policies and variable names. Not here:
Pax's PipelineCompatibleStackedTransformerRepeated (docs/praxis.md).
"""

from praxis.layers.pipeline import PipelinedTransformer
from praxis.layers.stacked_transformers import compute_attention_masks_for_extend_step
from praxis.layers.stacked_transformers import compute_attention_masks_for_fprop
from praxis.layers.stacked_transformers import StackedTransformer
from praxis.layers.stacked_transformers import StackedTransformerRepeated
from praxis.layers.transformer_feed_forward import _get_sentence_embeddings
from praxis.layers.transformer_feed_forward import NORM_POLICIES
from praxis.layers.transformer_feed_forward import TransformerFeedForward
from praxis.layers.transformer_layer import Transformer
from praxis.layers.transformer_moe import TransformerFeedForwardMoe
from praxis import base_layer
from praxis.layers import checkpoint_policy
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes

# Pax's module-level names for the types and variable collections this module's API uses.
AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
NestedJTensor = pytypes.NestedJTensor
NestedMap = py_utils.NestedMap
SplitDimsMapping = pytypes.SplitDimsMapping
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
template_field = base_layer.template_field
