"""TransformerFeedForwardMoe: Pax's mixture-of-experts feed-forward, as a config only.

The class carries Pax's fields and defaults, so Pax's builders that configure it (GLaM's
`glam.GlamStackedTransformerHParams`, `StackedTransformer.moe_layer_tpl`) build the same
configs here and dense models from them run. The expert routing itself (GShard top-2,
dense top-2 and expert-choice gating with capacity, the load-balancing aux loss) is not
implemented: building the layer raises, so a StackedTransformer with `moe_layers` raises too.
"""

from __future__ import annotations

from praxis import base_hyperparams
from praxis import base_layer
from praxis.layers import activations
from praxis.layers import base_ops
from praxis.layers import normalizations
from praxis.layers import stochastics

template_field = base_hyperparams.template_field


class TransformerFeedForwardMoe(base_layer.BaseLayer):
  """Pax's MoE feed-forward fields (see Pax's docstring for each); building it raises.

  Attributes:
    input_dims, hidden_dims: D and the expert hidden size.
    gating_func: 'top2', 'dense_top2' or 'expert_choice'.
    num_experts, num_groups, min_group_size, expert_capacity_dim,
      unadjusted_expert_capacity_factor, expert_weight_shards, second_expert_policy: routing.
    moe_load_balance_loss_weight, gating_logit_cap, moe_gating_embedding_level: gating.
    the others: as TransformerFeedForward's.
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

  def setup(self) -> None:
    raise NotImplementedError(
      "TransformerFeedForwardMoe: Pax's expert routing (top2 / dense_top2 / expert_choice "
      "gating) is not implemented in this praxis; use a dense stack (moe_layers empty, e.g. "
      "glam.GlamUniTransformerLmHParams(moe=False))."
    )
