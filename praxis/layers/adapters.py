"""Residual adapters (Houlsby et al. 2019, arXiv:1902.00751): one small bottleneck MLP per task.

MultitaskResidualAdapter: norm -> down-projection -> activation -> up-projection (+ input),
with a separate set of weights per task id. AdaptedTransformerFeedForward adds one to
TransformerFeedForward, in series with the MLP or in parallel to it.
"""

from __future__ import annotations

import fiddle as fdl
import jax
import jax.numpy as jnp

from praxis import asserts
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import normalizations
from praxis.layers import transformers
from praxis import py_utils
from praxis import pytypes

template_field = base_layer.template_field
WeightHParams = base_layer.WeightHParams

# Norms whose `dim` the adapter sets to input_dims and which take (inputs, paddings).
_SUPPORTED_NORMS = (normalizations.BatchNorm, normalizations.GroupNorm, normalizations.LayerNorm)

# Einsum letters: k task, i input_dims, n bottleneck_dims.


class MultitaskResidualAdapter(base_layer.BaseLayer):
  """A bottleneck adapter with one set of weights per task.

  Weights (Pax's names): down_w [K, I, N], down_b [K, N], up_w [K, N, I] (zero-initialised,
  so a fresh adapter adds nothing), up_b [K, I]; children `norm` and `activation`.

  Attributes:
    input_dims: I, the last dim of the inputs.
    bottleneck_dims: N, the bottleneck width.
    num_tasks: K, how many tasks have their own adapter.
    norm_tpl: the input normalisation (LayerNorm, BatchNorm or GroupNorm), or None.
    activation_tpl: the activation after the down-projection.
  """

  input_dims: int = 0
  bottleneck_dims: int = 0
  num_tasks: int = 1
  norm_tpl: base_layer.LayerTpl | None = template_field(normalizations.LayerNorm)
  activation_tpl: pax_fiddle.Config = template_field(activations.ReLU)

  def _check_norm(self) -> None:
    if fdl.get_callable(self.norm_tpl) not in _SUPPORTED_NORMS:
      raise NotImplementedError(
        f"MultitaskResidualAdapter supports norm_tpl of {[c.__name__ for c in _SUPPORTED_NORMS]} "
        f"or None, got {fdl.get_callable(self.norm_tpl).__name__}."
      )

  def setup(self) -> None:
    if self.norm_tpl:
      self._check_norm()
      norm_tpl = self.norm_tpl.clone()
      norm_tpl.dim = self.input_dims
      self.create_child("norm", norm_tpl)
    k, i, n = self.num_tasks, self.input_dims, self.bottleneck_dims
    self.create_variable("down_w", WeightHParams(shape=[k, i, n]))
    self.create_variable("down_b", WeightHParams(shape=[k, n]))
    self.create_variable(
      "up_w", WeightHParams(shape=[k, n, i], init=base_layer.WeightInit.Constant(0.0))
    )
    self.create_variable("up_b", WeightHParams(shape=[k, i]))
    self.create_child("activation", self.activation_tpl)

  def __call__(
    self,
    inputs: jax.Array,
    paddings: jax.Array | None = None,
    tasks: jax.Array | None = None,
    add_residual: bool = True,
  ) -> jax.Array:
    """inputs [B, ..., I] -> [B, ..., I].

    paddings: [B, T] (1 = padded), used by BatchNorm. tasks: int task ids whose shape is a
    prefix of the inputs' one or two dims shorter ([B] for [B, T, I]: one task per sequence;
    [B, T]: one per frame); None only with num_tasks == 1. add_residual: add the input back.
    """
    if tasks is None:
      asserts.eq(1, self.num_tasks, msg="tasks is None, which needs num_tasks == 1")
      tasks = jnp.zeros(inputs.shape[:-1], jnp.int32)
    tasks = jnp.asarray(tasks)
    asserts.eq(tasks.shape, inputs.shape[: tasks.ndim])
    asserts.between(inputs.ndim - tasks.ndim, 1, 2)
    onehot = jax.nn.one_hot(tasks, self.num_tasks, dtype=inputs.dtype)  # [B, (T,) K]
    # Each position's task weights; per-sequence tasks get a dim for T so they broadcast.
    per_sequence = inputs.ndim - tasks.ndim == 2
    down_w = jnp.einsum("...k,kin->...in", onehot, self.theta.down_w)  # [B, (T,) I, N]
    down_b = jnp.einsum("...k,kn->...n", onehot, self.theta.down_b)  # [B, (T,) N]
    up_w = jnp.einsum("...k,kni->...ni", onehot, self.theta.up_w)  # [B, (T,) N, I]
    up_b = jnp.einsum("...k,ki->...i", onehot, self.theta.up_b)  # [B, (T,) I]
    if per_sequence:
      down_w, up_w = down_w[..., None, :, :], up_w[..., None, :, :]  # [B, 1, I, N], [B, 1, N, I]
      down_b, up_b = down_b[..., None, :], up_b[..., None, :]  # [B, 1, N], [B, 1, I]
    x = self.norm(inputs, paddings) if self.norm_tpl else inputs
    hidden = self.activation(jnp.einsum("...i,...in->...n", x, down_w) + down_b)  # [B, T, N]
    out = jnp.einsum("...n,...ni->...i", hidden, up_w) + up_b  # [B, T, I]
    return inputs + out if add_residual else out


class AdaptedTransformerFeedForward(transformers.TransformerFeedForward):
  """TransformerFeedForward with a MultitaskResidualAdapter (arXiv 2110.04366's placements).

  'sequential' applies the adapter to the MLP's output; 'parallel' applies it to the MLP's
  input and adds it to the MLP's output. Either way the sum then goes through the layer's
  residual connection (x + residual_weight * branch). Best used with the adapter's norm_tpl None.

  Attributes:
    adapter_tpl: the adapter (child `adapters`).
    mode: 'sequential' or 'parallel'.
  """

  adapter_tpl: base_layer.LayerTpl | None = template_field(None)
  mode: str = "sequential"

  def setup(self) -> None:
    super().setup()
    if self.mode not in ("sequential", "parallel"):
      raise ValueError(
        f"AdaptedTransformerFeedForward mode must be sequential or parallel, got {self.mode!r}."
      )
    if self.residual_droppath_prob:
      raise NotImplementedError(
        "AdaptedTransformerFeedForward can't use residual_droppath_prob: set it to 0."
      )
    self.create_child("adapters", self.adapter_tpl)

  def __call__(
    self,
    inputs: jax.Array,
    paddings: jax.Array | None = None,
    segment_ids: jax.Array | None = None,
    tasks: jax.Array | None = None,
    *,
    deterministic: bool | None = None,
  ) -> jax.Array:
    """inputs [B, T, D], paddings [B, T], tasks (see the adapter) -> [B, T, D]."""
    x = super().__call__(inputs, paddings, segment_ids, deterministic=deterministic)
    if self.add_skip_connection:
      x = (x - inputs) / self.residual_weight  # back to the MLP branch alone
    adapter_in = x if self.mode == "sequential" else inputs
    x = x + self.adapters(adapter_in, paddings, add_residual=False, tasks=tasks)
    if self.add_skip_connection:
      x = inputs + x * self.residual_weight
    return x


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
NestedMap = py_utils.NestedMap
weight_init = base_layer.WeightInit
