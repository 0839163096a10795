"""praxis.layers: the Pax-style layer library on Flax linen.

Import the modules directly (this file imports nothing so that
`import praxis.layers` stays cheap). Every layer is a `base_layer.BaseLayer`
configured with `Layer.HParams.config(...)`.

Where to find a layer:
  linears: Linear (w[in, out]), Bias (b[dims]), FeedForward (linear + bias +
    activation), MLPBlock (a stack of FeedForward layers).
  activations: ReLU, GELU (exact or tanh approximation), SiLU / Swish,
    Sigmoid, Tanh, Identity, SquaredReLU (no weights; `__call__(x)`).
  normalizations: LayerNorm, RmsNorm, BatchNorm (normalise the last axis).
  stochastics: Dropout (`__call__(x, deterministic)`; uses the "dropout" rng).
  embedding_softmax: Embedding, FullSoftmax (soft-capped logits, z-loss),
    SharedEmbeddingSoftmax (tied input/output embedding), PositionalEmbedding
    (sinusoidal), RotaryPositionalEmbedding, TrainablePositionalEmbedding.
  sample_decode: DecoderHParams and sample_decode, the greedy / temperature /
    top-k decode loop (one lax.while_loop over an extend_step function).
"""
