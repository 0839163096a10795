"""bobbin's example library: speech-recognition data tools and networks.

`asrio` (word pieces, framing, mel matrix, edit distances, normalizer) and
`asrnn` (log-mel frontend, SpecAug, CNN and Conformer encoders, padded
BatchNorm, clipped AdamW), as `bobbin.example_lib` for bobbin's LibriSpeech
example. Port with `from paxml.toolkit.example_lib import asrio, asrnn`.
"""
