"""Pax's `paxml.learners.Learner`: which loss to minimise and with which optimizer.

Pax experiments set it through the task config:

    lp = task_p.train.learner
    lp.loss_name = 'total_loss'
    lp.optimizer = pax_fiddle.Config(optimizers.Adam, beta1=0.9, beta2=0.99,
                                     clip_gradient_norm_to_value=5.0, learning_rate=2.5e-4,
                                     lr_schedule=pax_fiddle.Config(schedules.Constant))

The fields are Pax's, with Pax's defaults. This trainer applies `optimizer` (clipping, weight
decay and schedule are the optimizer's fields, praxis/optimizers.py) and `loss_name` (which must
name the model's training loss, `total_loss` for praxis models); it skips steps whose loss or
gradients are NaN/Inf as Pax's `check_valid_step` / `enable_skip_step_on_gradient_anomalies` do.
`HONOURED` lists these; a task that sets any other field away from its default trains as if it
had not, and `tasks_lib.to_task_config` logs each such field by name.
"""

from collections.abc import Sequence
from typing import Any

from praxis import base_hyperparams


class Learner(base_hyperparams.FiddleBaseParameterizable):
  """Pax's Learner fields (see the module docstring for what this trainer applies).

  Attributes:
    loss_name: the metric minimised; praxis models call it 'total_loss'.
    optimizer: a praxis optimizer config (praxis.optimizers.Adam, ShardedAdafactor, ...).
    stochastic_gradient: Pax's DP-SGD / MC gradient transform (not provided here).
    skip_zero_gradients: Pax's None or 'variable' (skip all-zero gradients).
    grad_norm_summary: export the gradient norm.
    grad_norm_individual_vars: export each variable's gradient norm.
    var_norm_summary: export the parameter norm.
    var_norm_individual_vars: export each variable's norm.
    check_valid_step: skip steps with NaN/Inf loss or gradients.
    vectorize_on_repeat_prefix: vectorize optimizer state over scanned layers' leading dims.
    force_repeat_prefix_structure: Pax's legacy-checkpoint switch.
    skip_step_gradient_norm_value: skip a step whose gradient norm exceeds this (0: never).
    enable_skip_step_on_gradient_anomalies: skip steps whose gradients are NaN/Inf.
    bprop_variable_exclusion: regexes of variables kept fixed.
    bprop_variable_inclusion: regexes of the only variables trained.
    repeat_prefix_sep: separator of repeated-layer names in Pax's checkpoints.
    keep_optimizer_state_for_excluded_vars: keep optimizer state of excluded variables.
    scale_update_by_var_norm: scale updates by the initial variable norm.
  """

  loss_name: str | None = None
  optimizer: Any = None
  stochastic_gradient: Any = None
  skip_zero_gradients: bool | None = None
  grad_norm_summary: bool = True
  grad_norm_individual_vars: bool = False
  var_norm_summary: bool = True
  var_norm_individual_vars: bool = False
  check_valid_step: bool = True
  vectorize_on_repeat_prefix: bool = True
  force_repeat_prefix_structure: bool = False
  skip_step_gradient_norm_value: float = 0.0
  enable_skip_step_on_gradient_anomalies: bool = True
  bprop_variable_exclusion: str | Sequence[str] = ()
  bprop_variable_inclusion: str | Sequence[str] = ()
  repeat_prefix_sep: str = "#"
  keep_optimizer_state_for_excluded_vars: bool = False
  scale_update_by_var_norm: bool = False


# The fields this trainer applies (see the module docstring); `name` only labels the learner,
# and the summaries and repeat-prefix layout are this trainer's own.
HONOURED = frozenset(
  {
    "name",
    "loss_name",
    "optimizer",
    "check_valid_step",
    "enable_skip_step_on_gradient_anomalies",
    "grad_norm_summary",
    "var_norm_summary",
    "vectorize_on_repeat_prefix",
    "repeat_prefix_sep",
  }
)
