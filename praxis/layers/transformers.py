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
