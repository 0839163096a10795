"""Pax's TransformerFeedForward: the Transformer's position-wise MLP with norm and residual.

    ffn = pax_fiddle.Config(TransformerFeedForward, name='ffn', input_dims=64, hidden_dims=256)
    layer = base_layer.instantiate(ffn)
    variables = layer.init(key, x, paddings)           # x [B, T, D] (or [B, D]), paddings [B, T]
    y = layer.apply(variables, x, paddings)            # [B, T, D]

Norm policies (Pax's `norm_policy`), with f the MLP:
  "pre"            y = x + f(ln(x))
  "post"           y = x + ln(f(x))            (the norm is on the branch, before the add)
  "post_skip"      y = ln(x + f(x))            (the norm is after the skip connection)
  "primer_hybrid"  y = x + ln2(f(ln1(x)))      (children pre_layer_norm, post_layer_norm)

Variables (Pax's): `layer_norm` (or `pre_layer_norm` / `post_layer_norm`), `ffn_layer1`
(`linear.w` [D, F], `bias.b` [F]), `ffn_layer1_gate` when gated, `ffn_layer2` (`linear.w`
[F, D], `bias.b` [D]).

Dropout (relu, residual) runs only when called with `deterministic=False` (ours: Pax reads
do_eval from the context), which needs a "dropout" rng; the stochastic residual
(`residual_droppath_prob`) likewise needs a "random" rng.

Remat names (Pax's): the first projection's output is "ffn1" (the gate's "ffn1_gate", both named
by linears.FeedForward's checkpoint_str), the output "ffn2".
Einsum letters: B batch, T positions, D model dims, F hidden dims.
"""

from __future__ import annotations

import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers import stochastics

template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config
SplitDimsMapping = pytypes.SplitDimsMapping
WeightInit = base_layer.WeightInit

NORM_POLICIES = ("pre", "post", "post_skip", "primer_hybrid")


def check_norm_policy(layer: str, policy: str) -> None:
  if policy not in NORM_POLICIES:
    raise ValueError(f"{layer}: norm_policy {policy!r} is not one of {NORM_POLICIES}.")


def is_eval(deterministic: bool | None) -> bool:
  """The transformer layers' `deterministic`: None (the default) or True is eval, no dropout."""
  return deterministic is None or deterministic


def dropout(layer: stochastics.Dropout, x: jax.Array, deterministic: bool | None) -> jax.Array:
  return layer(x, deterministic=is_eval(deterministic))


class TransformerFeedForward(base_layer.BaseLayer):
  """Position-wise MLP with its norm, dropouts and residual (module docstring for the math).

  Hidden activations, and outputs, at padded positions are zero before the residual add.

  Attributes:
    input_dims: D.
    output_dims: output dims; 0 means input_dims (needed with add_skip_connection).
    hidden_dims: F.
    has_bias: the projections have biases.
    apply_padding_first: zero padded inputs before anything else (e.g. before a batch norm).
    activation_tpl: activation of the hidden layer (ReLU, as Pax).
    use_gated_activation: hidden = act(W1g · x) * (W1 · x) (GLU variants: SwiGLU, GeGLU).
    fflayer_tpl: template of the two projections (linears.FeedForward).
    ln_tpl: template of the norm(s) (LayerNorm; RmsNorm also fits).
    residual_dropout_prob: dropout on the branch output before the residual add.
    relu_dropout_tpl: dropout on the hidden activations (keep_prob = 1 - relu_dropout_prob).
    relu_dropout_prob: its probability.
    residual_dropout_tpl: dropout on the output (keep_prob = 1 - residual_dropout_prob).
    add_skip_connection: add the input to the output.
    residual_weight: output = x + residual_weight * f(x).
    residual_droppath_prob: probability of dropping the whole branch per example
      (StochasticResidual, child `residual_droppath`).
    norm_policy: "pre", "post", "post_skip" or "primer_hybrid".
    internal_gshard_variance_scaling_fan_in_init: projections init U(±sqrt(3 / fan_in)).
  """

  input_dims: int = 0
  output_dims: int = 0
  hidden_dims: int = 0
  has_bias: bool = True
  apply_padding_first: bool = False
  activation_tpl: LayerTpl = template_field(activations.ReLU)
  use_gated_activation: bool = False
  fflayer_tpl: LayerTpl = template_field(linears.FeedForward)
  ln_tpl: LayerTpl = template_field(normalizations.LayerNorm)
  residual_dropout_prob: float = 0.0
  relu_dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  relu_dropout_prob: float = 0.0
  residual_dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  add_skip_connection: bool = True
  residual_weight: float = 1.0
  residual_droppath_prob: float = 0.0
  norm_policy: str = "pre"
  internal_gshard_variance_scaling_fan_in_init: bool = False

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """ffn0: mesh split of the first projection(s) [D, F]; ffn1: of the second [F, D]."""

    ffn0: SplitDimsMapping = None
    ffn1: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """ffn0: split of the hidden [B, T, F]; ffn1: of the output [B, T, D] (and one-step)."""

    ffn0: SplitDimsMapping = None
    ffn0_extend_step: SplitDimsMapping = None
    ffn1: SplitDimsMapping = None
    ffn1_extend_step: SplitDimsMapping = None

  @property
  def out_dims(self) -> int:
    return self.output_dims or self.input_dims

  def setup(self) -> None:
    check_norm_policy("TransformerFeedForward", self.norm_policy)
    if self.add_skip_connection and self.out_dims != self.input_dims:
      raise ValueError(
        "TransformerFeedForward: a skip connection needs output_dims == input_dims, got "
        f"{self.out_dims} and {self.input_dims}; set add_skip_connection=False or fix them."
      )
    wp, ap = self.weight_split_dims_mapping, self.activation_split_dims_mapping
    ln = self.ln_tpl.clone().set(dim=self.input_dims)
    if self.norm_policy == "primer_hybrid":
      self.create_child("pre_layer_norm", ln)
      self.create_child("post_layer_norm", ln.clone())
    else:
      self.create_child("layer_norm", ln)

    def projection(name, input_dims, output_dims, act, wt, out, out_step, axes, checkpoint):
      tpl = self.fflayer_tpl.clone().set(
        input_dims=input_dims, output_dims=output_dims, has_bias=self.has_bias, activation_tpl=act
      )
      tpl.weight_split_dims_mapping.wt = wt
      tpl.activation_split_dims_mapping.out = out
      if hasattr(tpl.activation_split_dims_mapping, "extend_step_out"):
        tpl.activation_split_dims_mapping.extend_step_out = out_step
      if hasattr(tpl, "weight_axes"):  # ours: logical axes for the trainer's rules table
        tpl.weight_axes = axes
      if checkpoint:
        tpl.checkpoint_str = checkpoint
      if self.internal_gshard_variance_scaling_fan_in_init:
        tpl.linear_tpl.params_init = WeightInit.Uniform((3.0 / input_dims) ** 0.5)
      self.create_child(name, tpl)

    identity = pax_fiddle.Config(activations.Identity)
    # Gated: ffn_layer1 is linear and ffn_layer1_gate carries the activation (gshard's wi1/wi0).
    first_act = identity if self.use_gated_activation else self.activation_tpl.clone()
    d, f = self.input_dims, self.hidden_dims
    projection(
      "ffn_layer1", d, f, first_act, wp.ffn0, ap.ffn0, ap.ffn0_extend_step, ("embed", "mlp"), "ffn1"
    )
    if self.use_gated_activation:
      projection(
        "ffn_layer1_gate",
        d,
        f,
        self.activation_tpl.clone(),
        wp.ffn0,
        ap.ffn0,
        ap.ffn0_extend_step,
        ("embed", "mlp"),
        "ffn1_gate",
      )
    self.create_child(
      "relu_dropout", self.relu_dropout_tpl.clone().set(keep_prob=1.0 - self.relu_dropout_prob)
    )
    projection(
      "ffn_layer2",
      f,
      self.out_dims,
      identity.clone(),
      wp.ffn1,
      ap.ffn1,
      ap.ffn1_extend_step,
      ("mlp", "embed"),
      None,
    )
    self.create_child(
      "residual_dropout",
      self.residual_dropout_tpl.clone().set(keep_prob=1.0 - self.residual_dropout_prob),
    )
    if self.residual_droppath_prob > 0:
      if not self.add_skip_connection:
        raise ValueError("residual_droppath_prob > 0 needs add_skip_connection=True.")
      self.create_child(
        "residual_droppath",
        pax_fiddle.Config(
          stochastics.StochasticResidual, survival_prob=1.0 - self.residual_droppath_prob
        ),
      )

  def _split(self, x: jax.Array, split: SplitDimsMapping, step_split: SplitDimsMapping, logical):
    """Pax's mesh split ([B, T, X], or its one-step [B, X] form) else our logical names."""
    if x.ndim == 2:
      if step_split is not None and len(step_split) == 2:
        split = step_split
      elif split is not None and len(split) == 3:
        split = [split[0], split[2]]
    if split is not None and self.mesh_axis_names is not None:
      return base_layer.maybe_shard(x, split, self.mesh_axis_names)
    return self.maybe_shard(x, logical[-x.ndim :])

  def __call__(
    self,
    inputs: jax.Array,
    paddings: jax.Array | None = None,
    segment_ids: jax.Array | None = None,
    *,
    deterministic: bool | None = None,
  ) -> jax.Array:
    """inputs [B, T, D] (or [B, D]), paddings [B, T] (1 = padded) -> [B, T, D].

    segment_ids is accepted for Pax's call shape (its MoE layer uses it); the MLP ignores it.
    deterministic (ours): False applies dropout; None or True is eval.
    """
    del segment_ids
    ap = self.activation_split_dims_mapping
    if paddings is not None:
      paddings = jnp.expand_dims(paddings, -1).astype(inputs.dtype)  # [B, T, 1]
      if self.apply_padding_first:
        inputs = inputs * (1.0 - paddings)
    residual = inputs
    if self.norm_policy == "primer_hybrid":
      x = self.pre_layer_norm(inputs)
    elif self.norm_policy == "pre":
      x = self.layer_norm(inputs)
    else:
      x = inputs
    x = self._split(x, ap.ffn1, ap.ffn1_extend_step, ("batch", "length", "embed"))
    if self.use_gated_activation:
      hidden = self.ffn_layer1_gate(x) * self.ffn_layer1(x)  # [B, T, F]
    else:
      hidden = self.ffn_layer1(x)  # [B, T, F]
    hidden = self._split(hidden, ap.ffn0, ap.ffn0_extend_step, ("batch", "length", "mlp"))
    if not self.apply_padding_first and paddings is not None:
      hidden = hidden * (1.0 - paddings)
    hidden = dropout(self.relu_dropout, hidden, deterministic)
    out = self.ffn_layer2(hidden)  # [B, T, D]
    out = self._split(out, ap.ffn1, ap.ffn1_extend_step, ("batch", "length", "embed"))
    out = checkpoint_name(out, "ffn2")
    if not self.apply_padding_first and paddings is not None:
      out = out * (1.0 - paddings)
    if self.norm_policy == "primer_hybrid":
      out = self.post_layer_norm(out)
    elif self.norm_policy == "post":
      out = self.layer_norm(out)
    out = dropout(self.residual_dropout, out, deterministic)
    if self.add_skip_connection:
      if self.residual_droppath_prob:
        out = self.residual_droppath(residual, out, deterministic=is_eval(deterministic))
      else:
        out = residual.astype(out.dtype) + out * self.residual_weight
    if self.norm_policy == "post_skip":
      out = self.layer_norm(out)
    return self._split(out, ap.ffn1, ap.ffn1_extend_step, ("batch", "length", "embed"))

  def extend_step(self, inputs: jax.Array, *, time_step: jax.Array) -> jax.Array:
    """One decoding step: inputs [B, D] (or [B, L, D]); the MLP is position-wise."""
    del time_step
    return self(inputs)


def _get_sentence_embeddings(inputs: jax.Array, segment_ids: jax.Array) -> jax.Array:
  """Each token's mean over its segment: inputs [S, D], segment_ids [S] -> [S, D].

  Segment 0 is padding: its mean is zero. (Pax's MoE gates by these sentence embeddings.)
  """
  num = inputs.shape[0]  # at most S segments: a static size for segment_sum
  sums = jax.ops.segment_sum(inputs, segment_ids, num_segments=num)  # [S, D]
  sums = sums.at[0].set(0.0)
  counts = jax.ops.segment_sum(jnp.ones_like(segment_ids), segment_ids, num_segments=num)  # [S]
  means = sums / jnp.maximum(counts[:, None], 1)
  return means[segment_ids]
