"""An Embedding layer that follows the ghost-norm protocol (see base.py)."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from paxml.ghostnorm import base
from paxml.ghostnorm import linears as ghostnorm_linears
from praxis import base_layer
from praxis import pytypes
from praxis.layers import base_ops
from praxis.layers import embedding_softmax

JTensor = pytypes.JTensor


def _sq_norm_of_row_sums(rows: JTensor, ids: JTensor) -> JTensor:
  """|sum of rows sharing an id, per id|^2 summed over ids, for one example.

  rows [N, D], ids [N] -> scalar. Rows that look up the same id add up in the gradient before
  the norm is taken; sorting groups them so a segment sum over N segments does it without a
  [V, D] buffer."""
  order = jnp.argsort(ids)
  sorted_ids, sorted_rows = ids[order], rows[order]  # [N], [N, D]
  starts = jnp.concatenate([jnp.ones((1,), bool), sorted_ids[1:] != sorted_ids[:-1]])
  segment = jnp.cumsum(starts) - 1  # [N]: the group of each row
  sums = jax.ops.segment_sum(sorted_rows, segment, num_segments=ids.shape[0])  # [N, D]
  return jnp.sum(jnp.square(sums))


def make_index_lookup(
  array_lookup: base_ops.ArrayLookup | None = None, einsum: base_ops.EinsumOp | None = None
) -> Callable[[JTensor | base.ParamWithAux, JTensor], JTensor]:
  """table [V, D], ids [B, ...] -> rows [B, ..., D], following the ghost-norm protocol.

  The ops are accepted for Pax's signature; the gather is `table[ids]` (what ArrayLookup does),
  written inline because a bound Flax child cannot run inside jax.custom_vjp."""
  del array_lookup, einsum

  def gather(table, ids):
    return table[ids]

  @jax.custom_vjp
  def index_lookup(weights, ids):
    return gather(base.get_param(weights), ids)

  def fwd(weights, ids):
    table = base.get_param(weights)
    out, vjp_fn = jax.vjp(lambda t: gather(t, ids), table)
    return out, (vjp_fn, ids, table.shape, base.get_aux(weights))

  def bwd(res, g):
    vjp_fn, ids, table_shape, scales = res
    ids_cotangent = None  # ids are integers: no gradient
    if scales is None:
      return vjp_fn(g)[0], ids_cotangent
    g_scaled = ghostnorm_linears._scale_rows(scales, g)  # pylint: disable=protected-access
    (d_table,) = vjp_fn(g_scaled)  # [V, D]; out-of-range ids add nothing
    batch, depth = g.shape[0], table_shape[1]
    rows = (g_scaled * batch).reshape(batch, -1, depth)  # [B, N, D]
    flat_ids = ids.reshape(batch, -1)  # [B, N]
    in_range = (flat_ids >= 0) & (flat_ids < table_shape[0])
    rows = jnp.where(in_range[..., None], rows, 0.0)
    sq_norms = jax.vmap(_sq_norm_of_row_sums)(rows, flat_ids)  # [B]
    return base.ParamWithAux(d_table, sq_norms), ids_cotangent

  index_lookup.defvjp(fwd, bwd)
  return index_lookup


class EmbeddingGhostNorm(embedding_softmax.Embedding):
  """Pax's Embedding whose backward reports per-example norms.

  Attributes:
    use_softmax_shared_embedding_shape_weights: store `emb_var` as [input_dims, num_classes],
      the shape of a SharedEmbeddingSoftmax's logits weight, so such a checkpoint's weight can
      be loaded into a separate embedding (the lookup uses its transpose).
  """

  use_softmax_shared_embedding_shape_weights: bool = False

  def setup(self) -> None:
    if self.num_classes <= 0 or self.input_dims <= 0:
      raise ValueError(
        f"EmbeddingGhostNorm needs positive num_classes and input_dims, got "
        f"{self.num_classes} and {self.input_dims}."
      )
    if self.use_softmax_shared_embedding_shape_weights:
      shape, axes = [self.input_dims, self.num_classes], ("embed", "vocab")
    else:
      shape, axes = [self.num_classes, self.input_dims], ("vocab", "embed")
    self.create_variable(
      "emb_var",
      base_layer.WeightHParams(
        shape=shape,
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        logical_axes=axes,
      ),
    )
    if self.lookup_style == "index":
      self._lookup_fn = make_index_lookup()
    elif self.lookup_style == "matmul":
      self._lookup_fn = ghostnorm_linears.make_last_dim_projector()
    else:
      raise ValueError(f"lookup_style must be 'index' or 'matmul', got {self.lookup_style!r}.")

  def _table(self) -> JTensor | base.ParamWithAux:
    """The [num_classes, input_dims] table, transposed from the softmax shape if stored so."""
    emb_var = self.theta.emb_var
    return emb_var.transpose() if self.use_softmax_shared_embedding_shape_weights else emb_var

  def emb_lookup(self, ids: JTensor) -> JTensor:
    table = self._table()
    if self.lookup_style == "index":
      embs = self._lookup_fn(table, ids)  # [..., D]
    else:
      one_hot = jax.nn.one_hot(ids, self.num_classes, dtype=self.fprop_dtype)  # [..., V]
      embs = self._lookup_fn(one_hot, table)  # [..., D]
    if self.scale_sqrt_depth:
      embs = embs * self.input_dims**0.5
    if self.set_nan_for_oob_id:
      embs = jnp.where(ids[..., None] < self.num_classes, embs, jnp.nan)
    return base_layer.maybe_shard(
      embs, self.activation_split_dims_mapping.emb_out_split_dims_mapping, self.mesh_axis_names
    )
