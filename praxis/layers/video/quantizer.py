"""Pax's `praxis.layers.video.quantizer`: codebook-free quantizers of the video tokenizer.

  ScalarQuantizer (FSQ)       each channel bounded (sine or tanh) to a range of `dim_widths[i]`
                              integers and rounded; the token id is the mixed-radix number of the
                              per-channel integers.
  LookupFreeQuantizer (LFQ)   each channel quantized to its sign (+1 / -1); the id of a group of
                              channels is the binary number of its signs (MAGVIT-v2,
                              arXiv:2310.05737); trained with a commitment loss and an entropy
                              loss that makes single codes confident and the batch use many codes.
Both use the straight-through estimator: forward the quantized value, backward the identity.
Neither has weights.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap


def _get_indices(dim_indices: jax.Array, grouped_base: jax.Array, group_size: int) -> jax.Array:
  """Per-channel bits [..., D] times their place values -> one id per group of `group_size`
  channels [..., ceil(D / group_size)] (squeezed to [...] for one group)."""
  indices = dim_indices * grouped_base  # [..., D]
  pad = (group_size - indices.shape[-1] % group_size) % group_size
  indices = jnp.concatenate([indices, jnp.zeros((*indices.shape[:-1], pad), jnp.uint32)], axis=-1)
  indices = indices.reshape(*indices.shape[:-1], -1, group_size).sum(axis=-1)  # [..., G]
  if indices.shape[-1] == 1:
    indices = indices[..., 0]
  return indices


def _cartesian_prod(x: jax.Array) -> jax.Array:
  """[N, 2] per-bit probabilities -> [2^N] probabilities of every N-bit code."""
  grid = jnp.meshgrid(*x, indexing="ij")
  return jnp.prod(jnp.stack(grid), axis=0).reshape(-1)


def _cal_entropy(prob_fracs: jax.Array) -> jax.Array:
  """Entropy of the batch-averaged code distribution of one group; prob_fracs [B, N, 2]."""
  probs = jax.vmap(_cartesian_prod)(prob_fracs)  # [B, 2^N]
  avg_probs = jnp.mean(probs, axis=0)
  return -(avg_probs * jnp.log(avg_probs + 1e-5)).sum()


def _factorized_entropy_loss(
  affinity: jax.Array,
  group_size: int,
  temperature: float,
  average_entropy_weight: float = 1.0,
) -> jax.Array:
  """Per-sample entropy (exact, summed over independent bits) minus the weighted entropy of the
  batch-average code distribution (approximated within groups of `group_size` bits, taken both
  as consecutive bits and, when that gives several groups, as strided ones).

  affinity: [..., D, 2] logits of each bit being +1 / -1.
  """
  affinity = affinity.reshape(-1, *affinity.shape[-2:]) / temperature  # [B, D, 2]
  pfrac = jax.nn.softmax(affinity, axis=-1)
  log_pfrac = jax.nn.log_softmax(affinity + 1e-5, axis=-1)
  sample_entropy = -(pfrac * log_pfrac).sum(axis=(-1, -2)).mean()

  batch = pfrac.shape[0]
  groups = pfrac.reshape(batch, -1, group_size, 2)  # [B, D / n, n, 2]: consecutive bits
  if groups.shape[1] > 1 and groups.shape[2] > 1:
    strided = pfrac.reshape(batch, group_size, -1, 2).transpose((0, 2, 1, 3))
    groups = jnp.concatenate([groups, strided], axis=1)
  group_entropy = jax.vmap(_cal_entropy, in_axes=1)(groups)  # [num_groups]
  return sample_entropy - group_entropy.mean() * average_entropy_weight


def _entropy_loss(
  affinity: jax.Array,
  loss_type: str = "softmax",
  temperature: float = 1.0,
  sample_minimization_weight: float = 1.0,
  batch_maximization_weight: float = 1.0,
) -> jax.Array:
  """w_s * mean per-sample entropy - w_b * entropy of the mean distribution, over codes.

  affinity: [..., K] logits of each code. loss_type 'softmax' uses the soft distribution,
  'argmax' a one-hot of the best code with the softmax's gradient (straight-through).
  """
  flat = affinity.reshape(-1, affinity.shape[-1]) / temperature  # [N, K]
  probs = jax.nn.softmax(flat, axis=-1)
  log_probs = jax.nn.log_softmax(flat + 1e-5, axis=-1)
  if loss_type == "softmax":
    target_probs = probs
  elif loss_type == "argmax":
    onehots = jax.nn.one_hot(jnp.argmax(flat, axis=-1), flat.shape[-1], dtype=flat.dtype)
    target_probs = probs - jax.lax.stop_gradient(probs - onehots)
  else:
    raise ValueError(f"Entropy loss {loss_type} not supported; use 'softmax' or 'argmax'.")
  avg_probs = jnp.mean(target_probs, axis=0)
  avg_entropy = -jnp.sum(avg_probs * jnp.log(avg_probs + 1e-5))
  sample_entropy = -jnp.mean(jnp.sum(target_probs * log_probs, axis=-1))
  return sample_minimization_weight * sample_entropy - batch_maximization_weight * avg_entropy


def _straight_through(x: jax.Array, quantized: jax.Array) -> jax.Array:
  """Forward `quantized`, backward the identity in x."""
  return x + jax.lax.stop_gradient(quantized - x)


class ScalarQuantizer(base_layer.BaseLayer):
  """Finite scalar quantization: channel i takes one of dim_widths[i] values.

  Attributes:
    embedding_dim: channels of the input (one per entry of dim_widths).
    dim_widths: number of levels of each channel.
    bound_method: 'sine' or 'tanh', the squashing into each channel's range.
    eps: margin that keeps the bound inside the range (large for float16).
  """

  embedding_dim: int = 8
  dim_widths: Sequence[int] = (8, 8, 4, 4, 4, 4, 4, 4)
  bound_method: str = "sine"
  eps: float = 1e-3

  def _widths(self) -> jax.Array:
    return jnp.asarray(self.dim_widths, np.int32)

  def _middle(self) -> jax.Array:
    # Even widths have levels {-w/2, ..., w/2 - 1}: the centre is -1/2, odd widths 0.
    widths = self._widths()
    return (widths - widths // 2 * 2 - 1) / 2

  def _bound_embedding(self, z: jax.Array) -> jax.Array:
    """Squashes channel i into about [-w_i / 2, w_i / 2 - 1] (shifted by 1/2 when w_i is even)."""
    widths = self._widths()
    half_range = widths * (1 - self.eps) / 2
    offset = jnp.where(widths % 2 == 1, 0.0, 0.5)
    if self.bound_method == "sine":
      return jnp.sin(z) * half_range - offset
    if self.bound_method == "tanh":
      return jnp.tanh(z) * half_range - offset
    raise ValueError(f"Bound method {self.bound_method} not supported; use 'sine' or 'tanh'.")

  def _quantize_embedding(self, z: jax.Array) -> jax.Array:
    return _straight_through(z, jnp.round(z))

  def _get_indices(self, z: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Quantized values [..., D] -> (mixed-radix ids [...], values clipped to the levels)."""
    widths = self._widths()
    left = -(widths // 2)
    right = widths + left - 1
    clipped = jnp.clip(z, left, right)  # in {left, ..., right}
    zeroed = clipped - left  # in {0, ..., width - 1}
    if len(self.dim_widths) != zeroed.shape[-1]:
      raise ValueError(
        f"ScalarQuantizer: {len(self.dim_widths)} dim_widths for {zeroed.shape[-1]} channels."
      )
    if zeroed.dtype != jnp.int32:
      zeroed = jnp.clip(jnp.round(zeroed).astype(jnp.int32), 0, widths - 1)
    indices = jnp.zeros(zeroed.shape[:-1], jnp.int32)
    for i, width in enumerate(self.dim_widths):  # the first channel is the most significant
      indices = indices * width + zeroed[..., i]
    return indices, clipped

  def __call__(self, inputs: jax.Array) -> tuple[jax.Array, NestedMap]:
    """inputs [..., D] -> (quantized [..., D], NestedMap(raw, quantized, encoding_indices [...],
    quantizer_loss=0.0)). Values are centred on 0."""
    if len(self.dim_widths) != inputs.shape[-1]:
      raise ValueError(
        f"Number of dim widths must match channels: {len(self.dim_widths)} vs {inputs.shape}."
      )
    unquantized = self._bound_embedding(inputs)
    quantized = self._quantize_embedding(unquantized)
    indices, clipped = self._get_indices(quantized)
    if self.do_eval:
      quantized = clipped
    middle = self._middle()
    quantized_centered = quantized - middle
    result = NestedMap(
      raw=unquantized - middle,
      quantized=quantized_centered,
      encoding_indices=indices,
      quantizer_loss=0.0,
    )
    return quantized_centered, result

  def decode_ids(self, ids: jax.Array) -> jax.Array:
    """ids [...] -> the centred quantized values [..., D]."""
    if ids.dtype != jnp.int32:
      ids = jnp.round(ids).astype(jnp.int32)
    widths = self._widths()
    digits = []
    for width in self.dim_widths[::-1]:  # least significant channel first
      digits.append(jnp.mod(ids, width))
      ids = ids // width
    vals = jnp.stack(digits[::-1], axis=-1)  # [..., D] in {0, ..., width - 1}
    return vals - widths // 2 - self._middle()


class LookupFreeQuantizer(base_layer.BaseLayer):
  """Lookup-free quantization: each channel becomes +1 or -1 by its sign.

  Attributes:
    embedding_dim: channels D of the input.
    num_token_groups: ids per position (the D bits split into this many groups).
    entropy_loss_ratio: weight of the entropy loss (0: off).
    commitment_cost: weight of mean (sg(q) - x)^2.
    entropy_loss_groups: > 1: the factorized entropy loss over groups of D / groups bits
      (softmax only); 1: the exact loss over all 2^D codes.
    entropy_loss_type: 'softmax' or 'argmax'.
    entropy_temperature: softmax temperature of the entropy loss.
    entropy_loss_balance: weight of the batch entropy against the per-sample one.
  """

  embedding_dim: int = 8
  num_token_groups: int = 1
  entropy_loss_ratio: float = 0.1
  commitment_cost: float = 0.25
  entropy_loss_groups: int = 1
  entropy_loss_type: str = "softmax"
  entropy_temperature: float = 0.01
  entropy_loss_balance: float = 1.0

  def _group_size(self) -> int:
    return int(math.ceil(self.embedding_dim / self.num_token_groups))

  def _place_values(self) -> jax.Array:
    # Bit j of a group has place value 2^(j mod group_size): channel 0 is the least significant.
    return jnp.power(2, jnp.arange(self.embedding_dim, dtype=jnp.uint32) % self._group_size())

  def _entropy_loss(self, inputs: jax.Array) -> jax.Array:
    if self.entropy_loss_groups > 1:
      if self.entropy_loss_type != "softmax":
        raise ValueError(
          f"Entropy loss type {self.entropy_loss_type} not supported in grouped mode; use "
          "'softmax' or entropy_loss_groups=1."
        )
      # Logit of a bit being +1 / -1 is -|x - q|^2 up to a constant: +2x / -2x.
      affinity = jnp.stack([2 * inputs, -2 * inputs], axis=-1)  # [..., D, 2]
      return _factorized_entropy_loss(
        affinity,
        self.embedding_dim // self.entropy_loss_groups,
        self.entropy_temperature,
        self.entropy_loss_balance,
      )
    # Every code of D bits, channel 0 varying fastest (the id order of _get_indices).
    levels = [np.array([-1.0, 1.0])] * self.embedding_dim
    codebook = np.stack(list(reversed(np.meshgrid(*levels, indexing="ij"))), axis=-1)
    codebook = codebook.reshape(-1, self.embedding_dim)  # [2^D, D]
    affinity = 2 * inputs @ jnp.asarray(codebook.T)  # [..., 2^D]: -|x - c|^2 + const
    return _entropy_loss(
      affinity,
      loss_type=self.entropy_loss_type,
      temperature=self.entropy_temperature,
      batch_maximization_weight=self.entropy_loss_balance,
    )

  def __call__(self, inputs: jax.Array) -> tuple[jax.Array, NestedMap]:
    """inputs [..., D] -> (quantized [..., D] of +-1, NestedMap(encodings, encoding_indices,
    raw; in training also quantizer_loss, e_latent_loss, entropy_loss))."""
    result = NestedMap()
    samples = inputs >= 0
    quantized = jnp.where(samples, 1.0, -1.0)
    indices = _get_indices(samples, self._place_values(), self._group_size())
    if not self.do_eval:
      e_latent_loss = (
        jnp.mean((jax.lax.stop_gradient(quantized) - inputs) ** 2) * self.commitment_cost
      )
      entropy_loss = jnp.asarray(0.0, jnp.float32)
      if self.entropy_loss_ratio != 0:
        entropy_loss = self._entropy_loss(inputs) * self.entropy_loss_ratio
      result.quantizer_loss = e_latent_loss + entropy_loss
      result.e_latent_loss = e_latent_loss
      result.entropy_loss = entropy_loss
      quantized = _straight_through(inputs, quantized)
    result.encodings = quantized
    result.encoding_indices = indices
    result.raw = inputs
    return quantized, result

  def decode_ids(self, inputs: jax.Array) -> jax.Array:
    """ids [...] (one group) or [..., G] -> the +-1 values [..., D]."""
    base = self._place_values()
    if self.num_token_groups == 1:
      inputs = inputs[..., None]
    bits = jnp.repeat(inputs, self._group_size(), axis=-1)[..., : base.shape[0]]  # [..., D]
    return jnp.where(bits & base, 1.0, -1.0)


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
