"""Pax's `praxis.layers.attentions`: attention layers and mask helpers under Pax's names.

The code lives in smaller modules; this one gathers their public names so that Pax users'
`from praxis.layers import attentions; attentions.DotProductAttention(...)` works unchanged:

  attention_masks: causal_mask, segment_mask, causal_segment_mask, convert_paddings_to_mask,
    merge_masks (hides padded query rows, as Pax), limited_context_mask, shift_1d,
    convert_to_block, extract_block_context, _make_local_mask; ours: extend_step_causal_mask,
    large_negative_number, apply_mask_to_logits.
  attention_parts: PerDimScale, RelativeBias, AttentionProjection, CombinedQKVProjectionLayer,
    CausalDepthwiseConv1D.
  dot_product_attention: DotProductAttention (per-dim query scale by default, dconv, rotary,
    relative bias, logit cap, extra logit, KV-cache extend_step; ours: num_kv_heads).
  local_attention: LocalSelfAttention, LocalSelfAttentionRelativeBias.
  lpb_attention: DotProductAttentionWithLPB (lazy prefix broadcast for multi-sample decoding).
  relative_attention: DotProductAttentionXL, LocalSelfAttentionXL, LocalSelfAttentionAlibi,
    create_relative_positional_embedding.

Remat names (for checkpoint_policy): query_proj, key_proj, value_proj, combined_qkv_proj,
logits, context, out_proj.
"""

from praxis import base_layer
from praxis.layers.attention_masks import _make_local_mask
from praxis.layers.attention_masks import apply_mask_to_logits
from praxis.layers.attention_masks import causal_mask
from praxis.layers.attention_masks import causal_segment_mask
from praxis.layers.attention_masks import convert_paddings_to_mask
from praxis.layers.attention_masks import convert_to_block
from praxis.layers.attention_masks import extend_step_causal_mask
from praxis.layers.attention_masks import extract_block_context
from praxis.layers.attention_masks import large_negative_number
from praxis.layers.attention_masks import limited_context_mask
from praxis.layers.attention_masks import merge_masks
from praxis.layers.attention_masks import segment_mask
from praxis.layers.attention_masks import shift_1d
from praxis.layers.attention_parts import AttentionProjection
from praxis.layers.attention_parts import CausalDepthwiseConv1D
from praxis.layers.attention_parts import CombinedQKVProjectionLayer
from praxis.layers.attention_parts import PerDimScale
from praxis.layers.attention_parts import RelativeBias
from praxis.layers.dot_product_attention import DotProductAttention
from praxis.layers.local_attention import _padded_slice
from praxis.layers.local_attention import LocalSelfAttention
from praxis.layers.local_attention import LocalSelfAttentionRelativeBias
from praxis.layers.lpb_attention import DotProductAttentionWithLPB
from praxis.layers.relative_attention import create_relative_positional_embedding
from praxis.layers.relative_attention import DotProductAttentionXL
from praxis.layers.relative_attention import LocalSelfAttentionAlibi
from praxis.layers.relative_attention import LocalSelfAttentionXL
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes

# The decode-cache collection (Pax's base_layer.DECODE_CACHE), under the name our models use.
DECODER_CACHE = base_layer.DECODE_CACHE
DECODE_CACHE = base_layer.DECODE_CACHE
# The name this praxis used before it followed Pax.
CombinedQKVProjection = CombinedQKVProjectionLayer

# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
NestedInt = pytypes.NestedInt
NestedJTensor = pytypes.NestedJTensor
NestedMap = py_utils.NestedMap
PREFIX_DECODE_CACHE = base_layer.PREFIX_DECODE_CACHE
SplitDimsMapping = pytypes.SplitDimsMapping
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
template_field = base_layer.template_field
