"""praxis.layers.video: Pax's video tokenizer layers (a causal 3-D CNN VQ-VAE / VQ-GAN).

enc_dec_3dcnn: GroupNormSpatial, CondNormLayer, CausalConv, ResBlock, BlurPool3D,
  DiscriminatorResBlock, scan_function, depth_to_space.
quantizer: LookupFreeQuantizer (sign bits, entropy loss), ScalarQuantizer (FSQ).
vqvae: Encoder, Decoder, Discriminator, VQVaeModel.
losses: VQGANLoss (GAN, LeCam, reconstruction, quantizer losses), r1_gradient_penalty.
"""

from praxis.layers.video import enc_dec_3dcnn
from praxis.layers.video import losses
from praxis.layers.video import quantizer
from praxis.layers.video import vqvae
