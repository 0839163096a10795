"""Bregman-PCA n-grams (Pax's BregmanCompression, BregmanNgrammer) and NgrammerStub.

Importable from praxis.layers.ngrammer, as in Pax.

BregmanCompression maps each head's slice of a token embedding to its BregmanPCA coefficients
(one BregmanPCA per head). BregmanNgrammer forms a continuous bi-gram: per head, the bilinear
form prev_coeffs^T correlation[:, :, v] curr_coeffs for each of V n-gram "ids", whose weights
mix an embedding table; the result (layer-normed) is concatenated to or added to the
layer-normed input, as Ngrammer does with hashed bi-gram ids. NgrammerStub keeps only the
per-head layer norm (Ngrammer's API, no n-grams).

Shape letters: B batch, L length, N heads, H dim per head, D = N * H, C coefficients,
V n-gram vocab, E n-gram embedding dims.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import asserts
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import bregman
from praxis.layers import normalizations

WeightHParams = base_layer.WeightHParams

# The BregmanPCA settings both layers pass through (BregmanPCA's docstring says what each does).
_PCA_FIELDS = (
  "num_components",
  "activation_type",
  "negative_slope",
  "mean_beta",
  "coefficients_lr",
  "coefficients_beta",
  "coefficients_steps",
  "components_lr",
  "components_beta",
  "start_step",
  "end_step",
  "constant_lr_schedule",
)


class BregmanCompression(base_layer.BaseLayer):
  """Per-head BregmanPCA coefficients of a sequence: [B, L, N, H] -> [B, L, N, C].

  Children bregman_layers_0 ... bregman_layers_{N-1} (BregmanPCA with input_dims H).

  Attributes:
    num_heads: N.
    dim_per_head: H.
    num_components ... constant_lr_schedule: BregmanPCA's fields, for every head.
  """

  num_heads: int = 0
  dim_per_head: int = 0
  num_components: int = 0
  activation_type: bregman.ActivationType = bregman.ActivationType.IDENTITY
  negative_slope: float = 0.0
  mean_beta: float = 0.99
  coefficients_lr: float = 0.01
  coefficients_beta: float = 0.9
  coefficients_steps: int = 20
  components_lr: float = 0.01
  components_beta: float = 0.9
  start_step: int = 0
  end_step: int = 0
  constant_lr_schedule: bool = True

  def setup(self) -> None:
    if not self.dim_per_head:
      raise ValueError("BregmanCompression needs dim_per_head.")
    pca = {name: getattr(self, name) for name in _PCA_FIELDS}
    self.create_children(
      "bregman_layers",
      [
        pax_fiddle.Config(bregman.BregmanPCA, input_dims=self.dim_per_head, **pca)
        for _ in range(self.num_heads)
      ],
    )

  def __call__(self, inputs: jax.Array, paddings: jax.Array | None = None) -> jax.Array:
    """inputs [B, L, N, H] or [B, L, D]; paddings [B, L] (masks the components' update)."""
    inputs = self._cast_to_fprop_dtype(inputs)
    b, length = inputs.shape[:2]
    flat = jnp.reshape(inputs, [b * length, self.num_heads, self.dim_per_head])  # [BL, N, H]
    mask = None if paddings is None else jnp.reshape(paddings, [-1, 1])  # [BL, 1]
    coefficients = []
    for i in range(self.num_heads):
      _, coeffs = self.bregman_layers[i](flat[:, i, :], mask)  # [BL, C]
      coefficients.append(jnp.reshape(coeffs, [b, length, 1, self.num_components]))
    return jnp.concatenate(coefficients, axis=2)  # [B, L, N, C]


class BregmanNgrammer(base_layer.BaseLayer):
  """Adds continuous Bregman bi-gram embeddings to the input embeddings (module docstring).

  Variables (Pax's): correlation [C, C, V, N], embedding_table [V, E, N]; children
  emb_layer_norm_i, ngram_layer_norm_i, bregman_compression_layer.

  Attributes:
    ngram_vocab_size: V.
    ngram_emb_dim: E.
    concat_ngrams: concatenate the n-gram embedding to the first H - E dims of each head (else
      add it; then E must equal H).
    num_heads: N.
    dim_per_head: H.
    num_components ... constant_lr_schedule: the BregmanPCA settings (C = num_components <= H).
  """

  ngram_vocab_size: int = 768 * 256
  ngram_emb_dim: int = 8
  concat_ngrams: bool = True
  num_heads: int = 0
  dim_per_head: int = 0
  num_components: int = 0
  activation_type: bregman.ActivationType = bregman.ActivationType.IDENTITY
  negative_slope: float = 0.0
  mean_beta: float = 0.99
  coefficients_lr: float = 0.01
  coefficients_beta: float = 0.9
  coefficients_steps: int = 20
  components_lr: float = 0.01
  components_beta: float = 0.9
  start_step: int = 0
  end_step: int = 0
  constant_lr_schedule: bool = True

  def setup(self) -> None:
    asserts.gt(self.dim_per_head, 0)
    asserts.gt(self.num_heads, 0)
    asserts.gt(self.num_components, 0)
    asserts.le(self.num_components, self.dim_per_head)
    if self.concat_ngrams:
      asserts.le(self.ngram_emb_dim, self.dim_per_head)
    else:
      asserts.eq(self.ngram_emb_dim, self.dim_per_head)
    norm = lambda dim, name: pax_fiddle.Config(normalizations.LayerNorm, dim=dim, name=name)
    self.create_children(
      "emb_layer_norm",
      [norm(self.dim_per_head, f"emb_layer_norm_{i}") for i in range(self.num_heads)],
    )
    self.create_children(
      "ngram_layer_norm",
      [norm(self.ngram_emb_dim, f"ngram_layer_norm_{i}") for i in range(self.num_heads)],
    )
    c, v, n = self.num_components, self.ngram_vocab_size, self.num_heads
    synced = [base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC]
    wt = self.weight_split_dims_mapping.wt
    self.create_variable(
      "correlation",
      WeightHParams(
        shape=[c, c, v, n], init=self.params_init, tensor_split_dims_mapping=wt, collections=synced
      ),
    )
    self.create_variable(
      "embedding_table",
      WeightHParams(
        shape=[v, self.ngram_emb_dim, n],
        init=self.params_init,
        tensor_split_dims_mapping=wt,
        collections=synced,
      ),
    )
    pca = {name: getattr(self, name) for name in _PCA_FIELDS}
    self.create_child(
      "bregman_compression_layer",
      pax_fiddle.Config(
        BregmanCompression,
        params_init=self.params_init,
        num_heads=self.num_heads,
        dim_per_head=self.dim_per_head,
        **pca,
      ),
    )

  def __call__(
    self,
    input_ids: jax.Array,
    input_embs: jax.Array,
    paddings: jax.Array | None = None,
    merge_heads: bool = True,
    **kwargs,
  ) -> jax.Array:
    """input_embs [B, L, D] (input_ids unused) -> [B, L, D], or [B, L, N, H] without merge_heads."""
    del input_ids, kwargs
    input_embs = self._cast_to_fprop_dtype(input_embs)
    b, length = input_embs.shape[:2]
    input_embs = jnp.reshape(input_embs, [b, length, self.num_heads, -1])  # [B, L, N, H]
    coeffs = self.bregman_compression_layer(input_embs, paddings)  # [B, L, N, C]
    # The previous position's coefficients; position 0 pairs with itself (as Pax's ids do).
    prev_index = jnp.concatenate([jnp.zeros([1], jnp.int32), jnp.arange(length - 1)])
    prev_coeffs = coeffs[:, prev_index]  # [B, L, N, C]
    correlation = self.theta.correlation  # [C, C, V, N]
    table = self.theta.embedding_table  # [V, E, N]
    ngram_embs = []
    for i in range(self.num_heads):
      inner = jnp.einsum("BLC,CKV->BLKV", prev_coeffs[:, :, i], correlation[..., i])
      weights = jnp.einsum("BLC,BLCV->BLV", coeffs[:, :, i], inner)  # [B, L, V]
      emb = jnp.einsum("BLV,VE->BLE", weights, table[..., i])  # [B, L, E]
      ngram_embs.append(self.ngram_layer_norm[i](emb))
    ngram = jnp.stack(ngram_embs, axis=2)  # [B, L, N, E]
    heads = [self.emb_layer_norm[i](input_embs[:, :, i]) for i in range(self.num_heads)]
    normed = jnp.stack(heads, axis=2)  # [B, L, N, H]
    if self.concat_ngrams:
      out = jnp.concatenate([normed[..., : self.dim_per_head - self.ngram_emb_dim], ngram], -1)
    else:
      out = normed + ngram
    if paddings is not None:
      out = out * (1 - paddings[:, :, None, None])
    return jnp.reshape(out, [b, length, -1]) if merge_heads else out


class NgrammerStub(base_layer.BaseLayer):
  """Ngrammer's per-head LayerNorm alone (children emb_layer_norm_i), with Ngrammer's API.

  Attributes:
    dim_per_head: H.
    num_heads: N.
  """

  dim_per_head: int = 0
  num_heads: int = 0

  def setup(self) -> None:
    self.create_children(
      "emb_layer_norm",
      [
        pax_fiddle.Config(normalizations.LayerNorm, dim=self.dim_per_head, name=f"layer_norm_{i}")
        for i in range(self.num_heads)
      ],
    )

  def __call__(
    self,
    input_ids: jax.Array,
    input_embs: jax.Array,
    paddings: jax.Array | None = None,
    segment_pos: jax.Array | None = None,
    merge_heads: bool = True,
    attention_scores: jax.Array | None = None,
    emb_var: jax.Array | None = None,
    check_time_step_zero: bool = False,
  ) -> jax.Array:
    """input_embs [B, L, D] or [B, L, N, H] -> per-head LayerNorm, [B, L, D] or [B, L, N, H]."""
    del input_ids, segment_pos, attention_scores, emb_var, check_time_step_zero
    input_embs = self._cast_to_fprop_dtype(input_embs)
    if input_embs.ndim == 3:
      b, length, d = input_embs.shape
      if d % self.dim_per_head:
        raise ValueError(
          f"NgrammerStub: D={d} is not a multiple of dim_per_head={self.dim_per_head}."
        )
      input_embs = jnp.reshape(input_embs, [b, length, d // self.dim_per_head, self.dim_per_head])
    heads = jnp.split(input_embs, self.num_heads, axis=2)
    out = jnp.concatenate([self.emb_layer_norm[i](h) for i, h in enumerate(heads)], axis=2)
    if paddings is not None:
      out = out * (1 - paddings[:, :, None, None])
    if merge_heads:
      b, length, n, h = out.shape
      return out.reshape(b, length, n * h)
    return out

  def extend_step(
    self,
    input_embs: jax.Array,
    step: int | jax.Array,
    merge_heads: bool | None = True,
    attention_score: jax.Array | None = None,
  ) -> jax.Array:
    """The layer norm of position `step` of input_embs [B, L, ...] -> [B, D] or [B, N, H]."""
    del attention_score
    at_step = jax.lax.dynamic_slice_in_dim(input_embs, step, 1, axis=1)
    return jnp.squeeze(self(None, at_step, merge_heads=merge_heads), axis=1)
