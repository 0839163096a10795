"""praxis.layers: the Pax layer library on Flax linen.

As in Pax, the layer classes are attributes of this package (`layers.Linear`,
`layers.LayerNorm`, ...); they are imported on first use, so `import
praxis.layers` stays cheap. Every layer is a `base_layer.BaseLayer`,
configured with `pax_fiddle.Config(layers.Linear, ...)` or the seed's
`Linear.HParams.config(...)`.

Where to find a layer:
  linears: Linear (w[in, out]), Bias (b[dims]), FeedForward (linear + bias +
    activation), MLPBlock (a stack of FeedForward layers), StackingOverTime.
  base_ops: EinsumOp (the einsum child of Linear), EinsumGatedOp, ArrayLookup.
  convolutions: Conv2D (kernel through a weight-normalization child; SAME /
    VALID / causal padding; HParamsDepthwise), Conv3D, ConvBNAct (conv +
    BatchNorm + activation), ConvBNActWithPadding (time paddings in and out),
    DepthwiseConv1D, LightConv1D (the conformer's lconv block; both in
    convolutions_1d).
  poolings: Pooling (MAX / AVG windows), GlobalPooling, Pooling1D (time
    pooling with paddings).
  resnets: ResNet (HParamsResNet5 ... 152), ResNetBlock, ResNetBasicBlock.
  mobilenet: MobileNet (V2), InvertedResidualBlock.
  vanillanets: VanillaNet (skip-free, norm-free ResNet; HParamsVanillaNet5 ... 152),
    VanillaBlock, tailored_lrelu.
  vits: VisionTransformer (entry_stack, transformers_stack, exit_stack), VitEntryLayers,
    VitExitLayers, image_to_patch, patch_to_image, interpolate_embedding_2d.
  sequential: Sequential (layers applied in a chain).
  activations: ReLU, ReLU6, SquaredReLU, LeakyReLU, ELU, GELU (exact or tanh
    approximation), SiLU, Swish, Sigmoid, Tanh, Softplus, Identity (no weights;
    `__call__(x)`); activation_config(name) where only a string is at hand.
  normalizations: LayerNorm (Pax's 1 + scale), RmsNorm, RmsNormNoScale,
    BatchNorm (moving statistics in "non_trainable"), GroupNorm, IdentityNorm,
    WeightNormL2, SpectralNorm, compute_moments.
  stochastics: Dropout (Pax's noise_shape, noise_shape_broadcast_dims,
    dropout_at_eval; the "random" rng, else the seed's "dropout" rng),
    StochasticResidual (drops a residual branch per example).
  adapters: MultitaskResidualAdapter (a bottleneck MLP per task),
    AdaptedTransformerFeedForward (sequential / parallel adapter).
  augmentations: MaskedLmDataAugmenter (BERT masking), TemporalShifting.
  bregman: BregmanPCA (online PCA under a Bregman loss), ActivationType.
  einsum: Einsum (one weight contracted by an equation, optional bias).
  grouped_query_attention: GroupedQueryAttention (boolean masks, rope,
    KV cache + extend_step), causal_mask, segment_mask, apply_rope.
  searchable: AutoMLSelect (branch picked by a stored decision).
  chain (subpackage): Chain (an argument stack through layers) and chain,
    copy_n_times, repeat, add_residual, apply_padding, dict_to_args, ...
  chunk: chunk / unchunk. stats: compute_stats. sharding: derive, shard,
    shard_one_dim (Pax's einsum-style sharding annotations).
  embedding_softmax: Embedding, FullSoftmax (soft-capped logits, z-loss, Pax's
    label smoothing, chunked loss), SharedEmbeddingSoftmax (tied input/output
    embedding), SigmoidCrossEntropy, GShardSharedEmbeddingSoftmax, TokenCounter,
    PositionalEmbedding (sinusoidal), PositionalEmbedding2D,
    RotaryPositionalEmbedding, TrainablePositionalEmbedding.
  sample_decode: the seed's DecoderHParams and sample_decode over a pure
    extend_step function, run by Pax's loop (praxis.sample_decode).
  transformer_models: TransformerLm (embedding or tied softmax, sinusoidal /
    trainable / no position embedding, StackedTransformer[Repeated], final
    LayerNorm; `__call__` and the KV-cache `extend_step`; model_type),
    LanguageModelType.
  models: LanguageModel (Pax's LM metrics, aux losses, per-example scores,
    `decode` with the KV cache), ClassificationModel (Pax's: a network, ResNet
    by default, and a softmax; accuracy, top-5), lm_metrics; Pax's decoder settings (GreedyDecoderHParams,
    SampleDecoderHParams, BeamSearchHParams from praxis.decoder_hparams).
  lm_decode: LanguageModel.decode with Pax's decoder settings (Pax's
    module-driven greedy / sampling via praxis.sample_decode, beam search via
    praxis.beam_search, flat beam search via praxis.flat_beam_search).
  encoder_decoder: TransformerEncoderDecoder (Pax's encoder-decoder; also
    `transformer_models.TransformerEncoderDecoder`).
  sequence_models: SequenceModel (encoder-decoder loss, encode, greedy /
    sampled / beam decoding; also in `models`; greedy / sampling via
    praxis.sample_decode). dpo_models: LanguageModelDPO, SequenceModelDPO
    (also in `models`).
  attentions: DotProductAttention (Pax's fields: per-dim scale by default,
    combined QKV, dconv, rotary, relative bias, logit cap; KV cache +
    extend_step; ours: num_kv_heads), DotProductAttentionWithLPB,
    DotProductAttentionXL, LocalSelfAttention (+ RelativeBias, XL, Alibi),
    AttentionProjection, CombinedQKVProjectionLayer, PerDimScale, RelativeBias,
    CausalDepthwiseConv1D; mask and block helpers causal_mask, segment_mask,
    causal_segment_mask, convert_paddings_to_mask, merge_masks,
    limited_context_mask, extract_block_context, ...
  ngrammer: Ngrammer, VQNgrammer (hashed bi-gram embeddings of ids or of
    VectorQuantization cluster ids), VectorQuantization, get_bigram_ids,
    BregmanCompression, BregmanNgrammer, NgrammerStub.
  multi_query_attention: MultiQueryDotProductAttention (one or a few key/value
    heads, local_window_size), OneHeadedAttentionProjection.
  transformers: TransformerFeedForward (gated option, residual dropout and
    droppath), Transformer (one layer; cross-attention; pre / post / post_skip /
    primer_hybrid norm), StackedTransformer (masks from paddings / segment
    masks, cross-attention, remat, local windows, extend_step),
    StackedTransformerRepeated (a StackedTransformer block scanned x_times).
  repeats: Repeat (nn.scan + nn.remat over any layer; weights get a leading
    "layers" dim).
  pipeline: LayerwiseShardablePipelined (GPipe over a "stage" dim),
    CircularLayerwiseShardablePipelined, PipelinedTransformer (a pipelined
    stack for TransformerLm; also `transformers.PipelinedTransformer`),
    unstack_stages.
  conformers: Conformer (fflayer_start, trans_atten, lconv, fflayer_end,
    final_ln), SelfAttentionWithNormAndResidual, DotProductAttentionWithContext
    (+ XL): attention within a left / right context window.
  rnn_cell: LstmCellSimple, CifgLstmCellSimple, LayerNormalizedLstmCellSimple
    (one step, NestedMap states m / c; project_input for whole sequences).
  frnn: FRnn (a cell scanned over time), LstmFrnn, StackFrnn, StackBiFrnn,
    reset_mask (packed inputs).
  spectrum_augmenter: SpectrumAugmenter (SpecAugment time / frequency masks).
  quantizer: VectorQuantizer (VQ-VAE), RandomVectorQuantizer (BEST-RQ),
    quantize_vector; quantizer_objectives: codebook perplexity / coverage.
  ctc_objectives: ctc_loss_with_alignments, forced_alignment, ... (on optax).
  ssm: SSM (S4D), S5; ssm_transformers: SSMTransformer, SSMGated.
  checkpoint_policy: AutodiffCheckpointType (SAVE_NOTHING, SAVE_DOT_ONLY,
    SAVE_OUT_PROJ, ...) and custom_policy -> jax.checkpoint_policies.
"""

import importlib as _importlib

# Searched in this order for a name asked of the package (Pax's `praxis.layers` exports).
_MODULES = (
  "activations",
  "linears",
  "normalizations",
  "stochastics",
  "embedding_softmax",
  "attentions",
  "multi_query_attention",
  "ngrammer",
  "transformers",
  "transformer_models",
  "models",
  "repeats",
  "pipeline",
  "checkpoint_policy",
  "convolutions",
  "poolings",
  "resnets",
  "mobilenet",
  "vanillanets",
  "vits",
  "sequential",
  "adapters",
  "augmentations",
  "bregman",
  "einsum",
  "grouped_query_attention",
  "searchable",
  "conformers",
  "rnn_cell",
  "frnn",
  "spectrum_augmenter",
  "quantizer",
  "quantizer_objectives",
  "ctc_objectives",
  "ssm",
  "ssm_transformers",
)
# Modules reached as attributes (`layers.chain.chain(...)`) but not searched for names.
_SUBMODULES = ("chain", "chunk", "stats", "sharding", "ngrammer_bregman")


def __getattr__(name):
  if name in _MODULES or name in _SUBMODULES:
    return _importlib.import_module(f"{__name__}.{name}")
  for module_name in _MODULES:
    try:
      module = _importlib.import_module(f"{__name__}.{module_name}")
    except ImportError:
      continue
    if not name.startswith("_") and hasattr(module, name):
      value = getattr(module, name)
      globals()[name] = value
      return value
  raise AttributeError(
    f"praxis.layers has no attribute {name!r}; the layer modules are {', '.join(_MODULES)}."
  )
