"""praxis.layers.injection: layers injected into others' templates (Pax's).

fp8_nvidia_gpu: Fp8EinsumOp, Fp8EinsumGatedOp (FP8 einsums with delayed scaling, for a layer's
  einsum_tpl), quantized_dot_config.
"""

from praxis.layers.injection import fp8_nvidia_gpu
