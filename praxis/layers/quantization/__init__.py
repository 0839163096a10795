"""praxis.layers.quantization: Pax's quantization (PTQ, AQT, fake quant) building blocks.

quantization_hparams holds the settings, utils the einsum / int4 / dtype helpers, optimization the
clipping search; operations and quantizer (the int einsums and TensorQuantizer) follow.
"""

from praxis.layers.quantization.linears import Linear
from praxis.layers.quantization.linears import LinearLoRA
from praxis.layers.quantization.operations import einsum
from praxis.layers.quantization.einsum import Einsum
from praxis.layers.quantization.convolutions import Conv2D
from praxis.layers.quantization.attentions import AttentionProjection
from praxis.layers.quantization.attentions import AttentionProjectionLoRA
from praxis.layers.quantization.attentions import CombinedQKVProjectionLayer
from praxis.layers.quantization.attentions import DotProductAttention
from praxis.layers.quantization.multi_query_attention import OneHeadedAttentionProjection
from praxis.layers.quantization.overflow_check import AttentionProjectionOverflowCheck
from praxis.layers.quantization.overflow_check import CombinedQKVProjectionLayerOverflowCheck
from praxis.layers.quantization.overflow_check import FeedForwardOverflowCheck
from praxis.layers.quantization.overflow_check import OneHeadedAttentionProjectionOverflowCheck
from praxis.layers.quantization.searchable import SearchableAttentionProjection
from praxis.layers.quantization.searchable import SearchableCombinedQKVProjectionLayer
from praxis.layers.quantization.searchable import SearchableLinear
from praxis.layers.quantization.embedding_softmax import Embedding
from praxis.layers.quantization.embedding_softmax import NClassMajorSharedEmbeddingSoftmax
from praxis.layers.quantization.embedding_softmax import SharedEmbeddingSoftmax
from praxis.layers.quantization.ngrammer import Ngrammer
from praxis.layers.quantization.ngrammer import VQNgrammer
from praxis.layers.quantization.conformers import DotProductAttentionWithContext
