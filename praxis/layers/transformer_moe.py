"""Pax's TransformerFeedForwardMoe: a mixture-of-experts feed-forward, a drop-in for
TransformerFeedForward (same norm policies, dropouts and residual).

    y = x + dropout(moe(ln(x)))

moe: tokens [B, T] are cut into G = num_groups routing groups of S = B*T/G tokens; a gate
`gate` [D, E] scores the E experts per token; praxis.gshard_utils turns the scores into dispatch
and combine tensors (top-2 with capacity C, or expert choice); each expert e runs
act(x wi_0[e]) wo_0[e] on the C tokens it took, and the outputs are summed back with the gates.
'dense_top2' runs every expert on every token and mixes the best two, with no capacity (for
decoding). The load-balancing aux loss, times moe_load_balance_loss_weight, is recorded with
add_aux_loss("aux_moe_load_balance_loss"); TransformerLm adds it to its total loss.

Variables (Pax's): `gate` [D, E], `wi_0` [E, D, H] (and `wi_gate_0` when use_gated_activation),
`wo_0` [E, H, D], the norm (`layer_norm`, or `pre_layer_norm` / `post_layer_norm`).
Einsum letters: G groups, S tokens per group, E experts, C capacity, M model dims (D), H hidden.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_hyperparams
from praxis import base_layer
from praxis import gshard_utils
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import base_ops
from praxis.layers import normalizations
from praxis.layers import stochastics
from praxis.layers import transformer_feed_forward as ffn_lib

template_field = base_hyperparams.template_field
SplitDimsMapping = pytypes.SplitDimsMapping
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
GATING_FUNCS = ("top2", "dense_top2", "expert_choice", "expert_choice_v2")


class TransformerFeedForwardMoe(base_layer.BaseLayer):
  """Pax's MoE feed-forward (module docstring for the math and the variables).

  Attributes:
    input_dims: D (also the output dims).
    hidden_dims: H, each expert's hidden size.
    apply_padding_first: zero padded inputs before the norm.
    ln_tpl, activation_tpl, relu_dropout_tpl / relu_dropout_prob, residual_dropout_tpl /
      residual_dropout_prob, add_skip_connection, residual_weight, norm_policy ('pre', 'post' or
      'primer_hybrid'), residual_droppath_prob: as TransformerFeedForward's.
    gating_func: 'top2' (GShard), 'expert_choice', 'expert_choice_v2' or 'dense_top2'.
    num_experts: E.
    num_groups: G, routing groups (typically the number of devices).
    min_group_size: when set, G shrinks so that each group has at least this many tokens.
    expert_capacity_dim: C, slots per expert per group (when the factor gives less).
    unadjusted_expert_capacity_factor: C = int(S * factor / E), rounded up to a multiple of 4,
      when larger than expert_capacity_dim.
    expert_weight_shards: must be 1 (deprecated in Pax).
    second_expert_policy: 'all', 'sampling' or 'random' (the last two need a "random" rng).
    internal_gshard_variance_scaling_fan_in_init: weights U(+-sqrt(3 / fan_in)), else Xavier.
    explicit_fan_in_fan_out_axes: expert weights' fan-in is their dim -2, fan-out dim -1.
    moe_load_balance_loss_weight: weight of the aux loss (must be > 0).
    gating_logit_cap: cap |logits| with cap * tanh(logits / cap) when > 0.
    moe_gating_embedding_level: 'token' routes each token; 'sentence' routes by the mean of
      its segment (arXiv:2110.03742, 3.1).
    use_gated_activation: hidden = act(x wi_gate_0) * (x wi_0).
    einsum_tpl, einsum_gated_tpl: the einsums of dispatch, ffn2, combine and the gated ffn1.
  """

  input_dims: int = 0
  hidden_dims: int = 0
  apply_padding_first: bool = False
  ln_tpl: base_hyperparams.Config = template_field(normalizations.LayerNorm)
  activation_tpl: base_hyperparams.Config = template_field(activations.ReLU)
  relu_dropout_tpl: base_hyperparams.Config = template_field(stochastics.Dropout)
  relu_dropout_prob: float = 0.0
  residual_dropout_tpl: base_hyperparams.Config = template_field(stochastics.Dropout)
  residual_dropout_prob: float = 0.0
  add_skip_connection: bool = True
  residual_weight: float = 1.0
  norm_policy: str = "pre"
  residual_droppath_prob: float = 0.0
  gating_func: str = "top2"
  num_experts: int = 0
  num_groups: int = 0
  min_group_size: int | None = None
  expert_capacity_dim: int = 0
  unadjusted_expert_capacity_factor: float = 2.0
  expert_weight_shards: int = 1
  second_expert_policy: str = "all"
  internal_gshard_variance_scaling_fan_in_init: bool = True
  explicit_fan_in_fan_out_axes: bool = False
  moe_load_balance_loss_weight: float = 1.0
  gating_logit_cap: float = 0.0
  moe_gating_embedding_level: str = "token"
  use_gated_activation: bool = False
  einsum_tpl: base_hyperparams.Config = template_field(base_ops.EinsumOp)
  einsum_gated_tpl: base_hyperparams.Config = template_field(base_ops.EinsumGatedOp)

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """me: split of `gate` [D, E]; emh: of `wi_0` [E, D, H]; ehm: of `wo_0` [E, H, D]."""

    me: SplitDimsMapping = None
    emh: SplitDimsMapping = None
    ehm: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Splits of the routing tensors, named by their letters (module docstring)."""

    gsm: SplitDimsMapping = None
    gs: SplitDimsMapping = None
    gsec: SplitDimsMapping = None
    gecs: SplitDimsMapping = None
    gec: SplitDimsMapping = None
    egcm: SplitDimsMapping = None
    egch: SplitDimsMapping = None
    gecm: SplitDimsMapping = None

  def setup(self) -> None:
    problems = []
    if not (self.input_dims and self.hidden_dims and self.num_experts > 0 and self.num_groups > 0):
      problems.append(
        f"input_dims, hidden_dims, num_experts and num_groups must be positive (got "
        f"{self.input_dims}, {self.hidden_dims}, {self.num_experts}, {self.num_groups})"
      )
    if not (self.unadjusted_expert_capacity_factor or self.expert_capacity_dim):
      problems.append("set expert_capacity_dim or unadjusted_expert_capacity_factor")
    if self.expert_weight_shards != 1:
      problems.append(
        f"expert_weight_shards must be 1 (deprecated), got {self.expert_weight_shards}"
      )
    if self.gating_func not in GATING_FUNCS:
      problems.append(f"gating_func {self.gating_func!r} is not one of {GATING_FUNCS}")
    if self.norm_policy not in ("pre", "post", "primer_hybrid"):
      problems.append(f"norm_policy {self.norm_policy!r} is not 'pre', 'post' or 'primer_hybrid'")
    if self.moe_load_balance_loss_weight <= 0:
      problems.append("moe_load_balance_loss_weight must be > 0")
    if self.gating_func == "dense_top2" and self.use_gated_activation:
      problems.append("dense_top2 gating does not support use_gated_activation")
    if problems:
      raise ValueError(f"TransformerFeedForwardMoe {self.name}: " + "; ".join(problems) + ".")

    ln = self.ln_tpl.clone().set(dim=self.input_dims)
    if self.norm_policy == "primer_hybrid":
      self.create_child("pre_layer_norm", ln)
      self.create_child("post_layer_norm", ln.clone())
    else:
      self.create_child("layer_norm", ln)
    self.create_child(
      "residual_dropout",
      self.residual_dropout_tpl.clone().set(keep_prob=1.0 - self.residual_dropout_prob),
    )
    self.create_child(
      "relu_dropout", self.relu_dropout_tpl.clone().set(keep_prob=1.0 - self.relu_dropout_prob)
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
    self.create_child("activation", self.activation_tpl.clone())

    wp = self.weight_split_dims_mapping
    d, h, e = self.input_dims, self.hidden_dims, self.num_experts

    def fan_in_uniform(fan_in):
      # GShard's init; None falls back to params_init (Xavier).
      if self.internal_gshard_variance_scaling_fan_in_init:
        return WeightInit.Uniform((3.0 / fan_in) ** 0.5)
      return None

    explicit = self.explicit_fan_in_fan_out_axes
    self.create_variable(
      "gate",
      WeightHParams(
        shape=[d, e],
        init=fan_in_uniform(d),
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=wp.me,
        logical_axes=("embed", None),
      ),
    )
    wi = WeightHParams(
      shape=[e, d, h],
      init=fan_in_uniform(d),
      mesh_shape=self.mesh_shape,
      tensor_split_dims_mapping=wp.emh,
      fan_in_axes=[-2] if explicit else None,
      fan_out_axes=[-1] if explicit else None,
      logical_axes=(None, "embed", "mlp"),
    )
    if self.use_gated_activation:
      self.create_variable("wi_gate_0", wi)
    self.create_variable("wi_0", wi)
    self.create_variable(
      "wo_0",
      WeightHParams(
        shape=[e, h, d],
        init=fan_in_uniform(h),
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=wp.ehm,
        fan_in_axes=[-2] if explicit else None,
        fan_out_axes=[-1] if explicit else None,
        logical_axes=(None, "mlp", "embed"),
      ),
    )
    self.create_child("dispatch_einsum", self.einsum_tpl.clone())
    if self.use_gated_activation:
      self.create_child("gated_ffn1_einsum", self.einsum_gated_tpl.clone())
    self.create_child("ffn2_einsum", self.einsum_tpl.clone())
    self.create_child("combine_einsum", self.einsum_tpl.clone())

  def _split(self, x: jax.Array, split: SplitDimsMapping) -> jax.Array:
    return base_layer.maybe_shard(x, split, self.mesh_axis_names)

  def _gating_inputs(self, inputs, paddings, segment_ids) -> jax.Array:
    """What the gate scores: the tokens [B, T, D], or (sentence level) each token's segment mean."""
    if self.moe_gating_embedding_level != "sentence":
      return inputs
    if segment_ids is None and paddings is None:
      return jnp.broadcast_to(jnp.mean(inputs, axis=1, keepdims=True), inputs.shape)
    if segment_ids is None:
      segment_ids = (1 - paddings).astype(jnp.int32)
    # Per row (vmap over B), before any regrouping: segments live within a row.
    return jax.vmap(ffn_lib._get_sentence_embeddings)(inputs, segment_ids)  # noqa: SLF001

  def _count_dead_neurons(self, hidden: jax.Array, dispatch: jax.Array) -> None:
    """Summary: hidden units [E, G, C, H] that stay below 0 on every dispatched token."""
    used = jnp.einsum("gsec->ec", dispatch)[:, None, :, None]  # [E, 1, C, 1]
    max_hidden = jnp.max(hidden - 10 * (1 - used), axis=(1, 2))  # [E, H]
    dead = jnp.count_nonzero(jnp.less(max_hidden, 0).astype(jnp.int32))
    self.add_summary(f"dead_{self.activation_tpl.cls.__name__}_count", dead)

  def _dense_top2(self, inputs, paddings, segment_ids, deterministic):
    """Every expert on every token, mixed by the renormalised best two gates (no capacity)."""
    gating_inputs = self._gating_inputs(inputs, paddings, segment_ids)
    logits = jnp.einsum("gsm,me->gse", gating_inputs, self.theta.gate)
    raw_gates = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(self.fprop_dtype)
    top = jnp.max(raw_gates, axis=-1, keepdims=True)
    second = jnp.max(raw_gates * (raw_gates < top).astype(raw_gates.dtype), -1, keepdims=True)
    gates = raw_gates * (raw_gates >= second).astype(raw_gates.dtype)
    gates = gates / (jnp.sum(gates, axis=-1, keepdims=True) + 1e-12)  # [B, T, E]
    hidden = self.activation(jnp.einsum("gsm,emh->egsh", inputs, self.theta.wi_0))
    hidden = ffn_lib.dropout(self.relu_dropout, hidden, deterministic)
    expert_out = jnp.einsum("egsh,ehm->egsm", hidden, self.theta.wo_0)
    out = jnp.einsum("egsm,gse->gsm", expert_out, gates)
    return self._split(out, self.activation_split_dims_mapping.gsm), jnp.asarray(0.0)

  def _num_groups(self, num_tokens: int) -> int:
    groups = self.num_groups
    if self.min_group_size is not None and num_tokens / groups < self.min_group_size:
      groups = (num_tokens + self.min_group_size - 1) // self.min_group_size
    if num_tokens % groups:
      raise ValueError(
        f"TransformerFeedForwardMoe: {groups} routing groups do not divide the {num_tokens} "
        "tokens; change num_groups / min_group_size or the batch shape."
      )
    return groups

  def _dispatch_and_combine(self, inputs, paddings, segment_ids, deterministic):
    """GShard routing: group, gate, dispatch to experts, run them, combine."""
    ap = self.activation_split_dims_mapping
    dtype = self.fprop_dtype
    token_shape, m = inputs.shape[:-1], inputs.shape[-1]
    num_tokens = int(np.prod(token_shape))
    g = self._num_groups(num_tokens)
    s = num_tokens // g
    grouped = self._split(inputs.reshape(g, s, m), ap.gsm)  # [G, S, M]
    grouped_paddings = None
    if paddings is not None:
      if paddings.shape != token_shape:
        raise ValueError(
          f"paddings {paddings.shape} must be the inputs' token shape {token_shape}."
        )
      grouped_paddings = self._split(paddings.reshape(g, s), ap.gs).astype(dtype)  # [G, S]
    gating_inputs = self._split(
      self._gating_inputs(inputs, paddings, segment_ids).reshape(g, s, m), ap.gsm
    )
    logits = jnp.einsum("gsm,me->gse", gating_inputs, self.theta.gate)  # [G, S, E]
    prng_key = None if self.second_expert_policy == "all" else self.next_prng_key()
    gating = gshard_utils.compute_gating(
      paddings=grouped_paddings,
      logits=logits.astype(jnp.float32),
      experts_dim=self.num_experts,
      expert_capacity_dim=self.expert_capacity_dim,
      fprop_dtype=dtype,
      gating_func=self.gating_func,
      prng_key=prng_key,
      second_expert_policy=self.second_expert_policy,
      second_expert_threshold=0.0,
      legacy_mtf_behavior=True,
      capacity_factor=self.unadjusted_expert_capacity_factor,
      mask_dtype=jnp.int32,
      gating_logit_cap=self.gating_logit_cap,
    )
    expert_choice = self.gating_func == "expert_choice"
    if self.gating_func == "top2":
      aux_loss, combine, dispatch, summary = gating
      over_1, over_2, dispatch_0, dispatch_1, dispatch_2 = summary
      total = (dispatch_0 + dispatch_1 + dispatch_2).astype(jnp.float32)
      self.add_summary("dispatch_0", dispatch_0 / total)
      self.add_summary("dispatch_1", dispatch_1 / total)
      self.add_summary("dispatch_2", dispatch_2 / total)
      self.add_summary("over_capacity_1_ratio", over_1)
      self.add_summary("over_capacity_2_ratio", over_2)
    else:
      aux_loss, combine, dispatch = gating
    combine, dispatch = combine.astype(dtype), dispatch.astype(dtype)
    if expert_choice:
      combine, dispatch = self._split(combine, ap.gec), self._split(dispatch, ap.gecs)
      expert_inputs = jnp.einsum("gecs,gsm->egcm", dispatch, grouped)
    else:
      combine, dispatch = self._split(combine, ap.gsec), self._split(dispatch, ap.gsec)
      expert_inputs = self.dispatch_einsum("gsec,gsm->egcm", dispatch, grouped)
    expert_inputs = self._split(expert_inputs, ap.egcm)  # [E, G, C, M]

    if self.use_gated_activation:
      linear, gate = self.gated_ffn1_einsum(
        "egcm,emh->egch", expert_inputs, self.theta.wi_0, self.theta.wi_gate_0
      )  # [E, G, C, H] each
      if not expert_choice:
        self._count_dead_neurons(gate, dispatch)
      hidden = self.activation(gate) * linear
    else:
      hidden = self._split(jnp.einsum("egcm,emh->egch", expert_inputs, self.theta.wi_0), ap.egch)
      if not expert_choice:
        self._count_dead_neurons(hidden, dispatch)
      hidden = self.activation(hidden)
    hidden = ffn_lib.dropout(self.relu_dropout, hidden, deterministic)
    expert_out = self._split(
      self.ffn2_einsum("egch,ehm->egcm", hidden, self.theta.wo_0), ap.egcm
    )  # [E, G, C, M]
    expert_out = self._split(jnp.einsum("egcm->gecm", expert_out), ap.gecm)
    if expert_choice:
      out = jnp.einsum("gecm,gecs,gec->gsm", expert_out, dispatch, combine)
    else:
      out = self.combine_einsum("gecm,gsec->gsm", expert_out, combine)
    out = self._split(out, ap.gsm)  # [G, S, M]
    return out.reshape(token_shape + (m,)), aux_loss

  def __call__(
    self,
    inputs: jax.Array,
    paddings: jax.Array | None = None,
    segment_ids: jax.Array | None = None,
    *,
    deterministic: bool | None = None,
  ) -> jax.Array:
    """inputs [B, T, D] (or [B, D]), paddings [B, T] (1 = padded) -> [B, T, D].

    segment_ids [B, T]: the segments for 'sentence' gating. deterministic: as
    TransformerFeedForward's (False applies dropout).
    """
    if inputs.ndim not in (2, 3):
      raise ValueError(f"TransformerFeedForwardMoe takes [B, T, D] or [B, D], got {inputs.shape}.")
    if self.apply_padding_first and paddings is not None:
      inputs = inputs * (1.0 - paddings[..., None])
    residual = inputs
    if self.norm_policy == "primer_hybrid":
      inputs = self.pre_layer_norm(inputs)
    elif self.norm_policy == "pre":
      inputs = self.layer_norm(inputs)
    if self.gating_func == "dense_top2":
      if inputs.ndim == 2:  # dense_top2's einsums are written for [B, T, D]
        out, aux_loss = self._dense_top2(inputs[:, None], None, None, deterministic)
        out = out[:, 0]
      else:
        out, aux_loss = self._dense_top2(inputs, paddings, segment_ids, deterministic)
    else:
      out, aux_loss = self._dispatch_and_combine(inputs, paddings, segment_ids, deterministic)
    if paddings is not None:
      out = out * (1.0 - paddings[..., None]).astype(out.dtype)
    if self.norm_policy == "primer_hybrid":
      out = self.post_layer_norm(out)
    elif self.norm_policy == "post":
      out = self.layer_norm(out)
    out = ffn_lib.dropout(self.residual_dropout, out, deterministic)
    if self.add_skip_connection:
      if self.residual_droppath_prob:
        out = self.residual_droppath(residual, out, deterministic=ffn_lib.is_eval(deterministic))
      else:
        out = residual + out * self.residual_weight
    aux_loss = aux_loss.astype(self.fprop_dtype) * self.moe_load_balance_loss_weight
    self.add_summary("aux_moe_load_balance_loss", aux_loss)
    self.add_aux_loss("aux_moe_load_balance_loss", aux_loss)
    return out

  def extend_step(self, inputs: jax.Array, *, time_step: jax.Array) -> jax.Array:
    """One decoding step, inputs [B, D]: routed as a group of B tokens."""
    del time_step
    return self(inputs)
