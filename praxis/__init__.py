"""praxis: layers and models on Flax linen.

Public modules (import them directly; this file imports nothing so that
`import praxis` stays cheap):
  transformer_lm: decoder-only Transformer LM and its loss.
"""

__all__ = ["transformer_lm"]
