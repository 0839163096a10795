"""Pax's vector quantizers: VectorQuantizer (VQ-VAE) and RandomVectorQuantizer (BEST-RQ).

Not AQT weight quantization (that is `praxis.layers.quantization`). Shapes: B batch, T time,
G codebook groups, C / V code words per group, D latent dim (D / G per group).

quantize_vector(latent [..., G, H], codebook [V, G, H]) picks, per group, the code word nearest
in squared L2 distance: (quantized [..., G, H], codes [..., G], one-hot [..., G, V]).

VectorQuantizer (arXiv:1711.00937): codebook `w` [C, G, D / G] (L2-normalised by default, as
the latents); loss = |z_q - sg(z)|^2 + beta |z - sg(z_q)|^2 averaged per frame over unpadded
frames; z_q passes gradients straight through to z.

RandomVectorQuantizer (arXiv:2202.01855): a frozen random projection `random_proj` [D_z * s, D]
+ `random_bias` [D] and a frozen random codebook `random_codebook` [V, G, D / G]; the outputs are
targets (no gradient). `stack_ratio` s stacks s frames first (child `stack`).
"""

from __future__ import annotations

import string

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import linears
from praxis.layers import quantizer_objectives as objectives

NestedMap = py_utils.NestedMap
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
JTensor = jax.Array
SplitDimsMapping = object

_SKIP_LP = [base_layer.WeightHParamsCollection.SKIP_LP_REGULARIZATION]


def _l2_normalize(x: JTensor, axis: int, epsilon: float = 1e-12) -> JTensor:
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=axis, keepdims=True) + epsilon)


def quantize_vector(latent: JTensor, codebook: JTensor):
  """latent [..., G, H], codebook [V, G, H] -> (quantized [..., G, H], codes [..., G],
  one-hot [..., G, V] float32): the nearest code word of each group."""
  if codebook.ndim != 3:
    raise ValueError(f"codebook must be [V, G, H], got {codebook.shape}.")
  num_codes = codebook.shape[0]
  lead = string.ascii_uppercase[: latent.ndim - 2]
  # |x - c|^2 = |x|^2 - 2 x.c + |c|^2, per group.
  distance = (
    jnp.sum(latent**2, -1, keepdims=True)
    - 2 * jnp.einsum(f"{lead}gh,vgh->{lead}gv", latent, codebook)
    + jnp.transpose(jnp.sum(codebook**2, axis=-1))
  )  # [..., G, V]
  codes = jnp.argmin(distance, axis=-1)
  one_hot = jax.nn.one_hot(codes, num_codes, axis=-1, dtype=jnp.float32)
  quantized = jnp.einsum(f"{lead}gv,vgh->{lead}gh", one_hot, codebook)
  return quantized, codes, one_hot


def _codebook_stats(codes: JTensor, num_classes: int, paddings: JTensor):
  """(pplx, entropy, coverage), summed over the pmap axis when running under one."""
  axis = base_layer.PMAP_PARALLEL_AXIS_NAME if base_layer.is_running_under_pmap() else None
  pplx, entropy, _ = objectives.batch_pplx_entropy_from_codes(
    codes, num_classes, paddings=paddings, data_parallel_axis=axis
  )
  coverage = objectives.batch_codebook_coverage(
    codes, num_classes, paddings=paddings, data_parallel_axis=axis
  )
  return pplx, entropy, coverage


class RandomVectorQuantizer(base_layer.BaseLayer):
  """BEST-RQ's random-projection quantizer (all its weights are fixed random draws).

  Attributes:
    latent_dim: input dim D_z.
    projection_dim: projected dim D.
    num_latent_classes: code words per group V.
    num_groups: codebook groups G.
    stack_ratio: frames stacked before projecting (1: none).
    codebook_init: initialiser of the codebook.
    low_rank_codebook: with one group, store the codebook as [V, D] (old checkpoints).
    plot_codebook: add the codebook as an image summary.
    normalize_latent_vector: L2-normalise the projected latents.
    normalize_codebook: L2-normalise the code words.
    normalize_latent_per_group: normalise each group's slice (else the whole vector).
  """

  latent_dim: int | None = None
  projection_dim: int = 16
  num_latent_classes: int | None = None
  num_groups: int = 1
  stack_ratio: int = 1
  codebook_init: WeightInit = base_layer.instance_field(WeightInit.Gaussian)
  low_rank_codebook: bool = False
  plot_codebook: bool = False
  normalize_latent_vector: bool = False
  normalize_codebook: bool = False
  normalize_latent_per_group: bool = True

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """`vgh`: mesh split of the codebook [V, G, H]."""

    vgh: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """`blgh`: mesh split of the projected latents [B, L, G, H]."""

    blgh: SplitDimsMapping = None

  @property
  def _low_rank(self) -> bool:
    return self.low_rank_codebook and self.num_groups == 1

  def setup(self):
    if self.stack_ratio < 1:
      raise ValueError(f"stack_ratio must be >= 1, got {self.stack_ratio}.")
    if self.stack_ratio != 1:
      self.create_child(
        "stack",
        pax_fiddle.Config(
          linears.StackingOverTime,
          left_context=0,
          right_context=self.stack_ratio - 1,
          stride=self.stack_ratio,
          padding_reduce_option="reduce_max",
        ),
      )
    self.create_variable(
      "random_proj",
      WeightHParams(
        shape=[self.latent_dim * self.stack_ratio, self.projection_dim],
        init=self.params_init,
        dtype=jnp.float32,
        collections=_SKIP_LP,
      ),
    )
    self.create_variable(
      "random_bias",
      WeightHParams(
        shape=[self.projection_dim],
        init=WeightInit.Constant(0.0),
        dtype=jnp.float32,
        collections=_SKIP_LP,
      ),
    )
    vgh = self.weight_split_dims_mapping.vgh
    vgh = list(vgh) if vgh else vgh
    if self._low_rank:
      shape = [self.num_latent_classes, self.projection_dim]
      if vgh:
        del vgh[1]
    else:
      shape = [self.num_latent_classes, self.num_groups, self.projection_dim // self.num_groups]
    self.create_variable(
      "random_codebook",
      WeightHParams(
        shape=shape,
        init=self.codebook_init,
        dtype=jnp.float32,
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=vgh,
        collections=_SKIP_LP,
      ),
    )

  def _get_codebook(self) -> JTensor:
    """The codebook as [V, G, H]."""
    codebook = self.theta.random_codebook
    if self._low_rank:
      codebook = codebook[:, None, :]
      vgh = self.weight_split_dims_mapping.vgh
      if vgh:
        vgh = list(vgh)
        vgh[1] = None
      codebook = base_layer.maybe_shard(codebook, vgh, self.mesh_axis_names)
    if self.normalize_codebook:
      codebook = _l2_normalize(codebook, -1)
    return codebook

  def __call__(self, z: JTensor, paddings: JTensor) -> NestedMap:
    """z [B, L, D_z], paddings [B, L] -> z_q [B, L', D], z_codes [B, L', G], z_onehot
    [B, L', G, V], paddings [B, L'], codebook_coverage, codebook_num_covered_codes, pplx,
    entropy (L' = L / stack_ratio)."""
    if self.stack_ratio > 1:
      z, paddings = self.stack(z, paddings[:, :, None])
      paddings = jnp.squeeze(paddings, -1)
    proj = jnp.einsum("dh,bld->blh", self.theta.random_proj, z) + self.theta.random_bias
    if self.normalize_latent_vector and not self.normalize_latent_per_group:
      proj = _l2_normalize(proj, -1)
    b, l, d = proj.shape
    g = self.num_groups
    proj = jnp.reshape(proj, [b, l, g, d // g])  # [B, L, G, H]
    proj = base_layer.maybe_shard(
      proj, self.activation_split_dims_mapping.blgh, self.mesh_axis_names
    )
    if self.normalize_latent_vector and self.normalize_latent_per_group:
      proj = _l2_normalize(proj, -1)
    codebook = self._get_codebook()
    if self.plot_codebook:
      image = jnp.tile(jnp.einsum("cgd->gcd", codebook)[..., None], [1, 1, 1, 3])
      self.add_summary("codebook", image, summary_type=base_layer.SummaryType.IMAGE)
    q, codes, onehot = quantize_vector(proj, codebook)
    q = jnp.reshape(q, [b, l, d])
    pplx, entropy, coverage = _codebook_stats(codes, self.num_latent_classes, paddings)
    sg = jax.lax.stop_gradient
    return NestedMap(
      z_q=sg(q),
      z_codes=sg(codes),
      z_onehot=sg(onehot),
      paddings=sg(paddings),
      codebook_coverage=coverage,
      codebook_num_covered_codes=coverage * self.num_latent_classes,
      pplx=pplx,
      entropy=entropy,
    )

  def look_up(self, z_codes: JTensor) -> JTensor:
    """z_codes [B, T, G] -> the code words [B, T, G * H]."""
    b, t = z_codes.shape[:2]
    onehot = jax.nn.one_hot(z_codes, self.num_latent_classes)
    latent = jnp.einsum("btgc,cgd->btgd", onehot, self._get_codebook())
    return jax.lax.stop_gradient(jnp.reshape(latent, [b, t, -1]))


class VectorQuantizer(base_layer.BaseLayer):
  """The VQ-VAE quantizer of a sequence (codebook `w` [C, G, D / G]).

  Attributes:
    num_latent_classes: code words per group C.
    latent_dim: latent dim D.
    beta: weight of the commitment loss.
    num_groups: codebook groups G.
    normalize_latent_vector: L2-normalise the latents.
    normalize_codebook: L2-normalise the code words.
    normalize_latent_per_group: normalise each group's slice (else the whole vector).
  """

  num_latent_classes: int | None = None
  latent_dim: int | None = None
  beta: float | None = None
  num_groups: int = 1
  normalize_latent_vector: bool = True
  normalize_codebook: bool = True
  normalize_latent_per_group: bool = True
  params_init: WeightInit = base_layer.instance_field(WeightInit.UniformSqrtDim)

  def setup(self):
    if not self.num_latent_classes or not self.latent_dim:
      raise ValueError("VectorQuantizer needs num_latent_classes and latent_dim.")
    if self.beta is None or self.beta < 0:
      raise ValueError(f"VectorQuantizer needs beta >= 0, got {self.beta}.")
    if self.latent_dim % self.num_groups:
      raise ValueError(f"latent_dim {self.latent_dim} must divide by num_groups {self.num_groups}.")
    shape = [self.num_latent_classes, self.num_groups, self.latent_dim // self.num_groups]
    self.create_variable("w", WeightHParams(shape=shape, dtype=jnp.float32))

  def _get_latent_embedding(self) -> JTensor:
    w = self.theta.w
    return _l2_normalize(w, -1) if self.normalize_codebook else w

  @staticmethod
  def _apply_mask(x: JTensor, mask: JTensor) -> JTensor:
    mask = jnp.reshape(mask, mask.shape + (1,) * (x.ndim - mask.ndim))
    return x * mask.astype(x.dtype)

  def __call__(self, z: JTensor, paddings: JTensor) -> NestedMap:
    """z [B, T, D], paddings [B, T] -> z_q [B, T, D], z_codes [B, T, G] (0 where padded),
    z_onehot [B, T, G, C], loss, codebook_coverage, codebook_num_covered_words, pplx, entropy."""
    b, t, d = z.shape
    g, c = self.num_groups, self.num_latent_classes
    mask = 1.0 - paddings
    num_frames = jnp.sum(mask)
    z = self._apply_mask(z, mask)
    if self.normalize_latent_vector and not self.normalize_latent_per_group:
      z = _l2_normalize(z, axis=-1)
    grouped = jnp.reshape(z, [b, t, g, d // g])
    if self.normalize_latent_vector and self.normalize_latent_per_group:
      grouped = _l2_normalize(grouped, axis=-1)
    z_q, z_codes, z_onehot = quantize_vector(grouped, self._get_latent_embedding())
    z_q = self._apply_mask(jnp.reshape(z_q, [b, t, d]), mask)
    z_codes = self._apply_mask(z_codes, mask)
    z_onehot = self._apply_mask(z_onehot, mask)

    sg = jax.lax.stop_gradient
    normalizer = 1e-7 + num_frames
    commitment = jnp.sum(jnp.mean((z - sg(z_q)) ** 2, -1)) / normalizer
    codebook_loss = jnp.sum(jnp.mean((z_q - sg(z)) ** 2, -1)) / normalizer
    loss = codebook_loss + self.beta * commitment
    z_q = z + sg(z_q - z)  # straight-through

    pplx, entropy, coverage = _codebook_stats(z_codes, c, paddings)
    return NestedMap(
      z_q=z_q,
      z_codes=z_codes,
      z_onehot=z_onehot,
      loss=loss,
      codebook_coverage=coverage,
      codebook_num_covered_words=coverage * c**g,
      pplx=pplx,
      entropy=entropy,
    )

  def look_up(self, z_codes: JTensor) -> JTensor:
    """z_codes [B, T, G] -> the code words [B, T, G * D / G]."""
    b, t = z_codes.shape[:2]
    onehot = jax.nn.one_hot(z_codes, self.num_latent_classes)
    latent = jnp.einsum("btgc,cgd->btgd", onehot, self._get_latent_embedding())
    return jnp.reshape(latent, [b, t, -1])
