"""Optimizers for the trainer: Pax's set as typed configs, built into one optax transformation.

    cfg = optimizers.Adam.HParams.config(
        learning_rate=2.5e-4, beta2=0.99, weight_decay=1e-3, clip_gradient_norm_to_value=5.0,
        lr_schedule=schedules.LinearRampupExponentialDecay.HParams.config(
            warmup_steps=4000, decay_start=4001, decay_end=300000, min_ratio=0.1, max=1.0))
    tx = optimizers.build(cfg, params)          # an optax.GradientTransformation
    opt_state = tx.init(params)
    updates, opt_state = tx.update(grads, opt_state, params)   # params are required
    params = optax.apply_updates(params, updates)
    optimizers.current_learning_rate(cfg, opt_state)           # the lr of the next update
    optimizers.ema_params(opt_state)                            # when ema_decay > 0

(that is lm_cloud's optimizer: `set_default_adam` in Pax.)

Every optimizer is the same chain, in this order (each step's reason in brackets):
  1. clip_by_global_norm(clip_gradient_norm_to_value), if > 0  [Pax's learner clips the raw
     gradients before the optimizer sees them].
  2. the optimizer's own scaling: Adam / Adafactor / Lion / SGD momentum (optax transforms).
  3. decoupled weight decay: `+ weight_decay * param`, except for parameters whose path matches
     `weight_decay_exclude` [added before the learning rate, as AdamW and Pax's Adam do, so the
     decay follows the schedule].
  4. `* -learning_rate * lr_schedule(count)` (count = updates applied so far, so the first update
     uses the schedule at step 0).
  5. EMA of the parameters after this update, if ema_decay > 0 (kept in the optimizer state; the
     updates pass through unchanged).

Parameter paths are the keys from the root of the tree given to `init`/`update`, joined by "/",
e.g. "lm/stack/x_layers_0/ff_layer/ffn_layer1/linear/w". `weight_decay_exclude` is a regex
searched in that path; `EXCLUDE_BIASES_AND_NORMS` excludes the praxis biases (`b`, `bias`) and
norm / per-dim scales (`scale`, `per_dim_scale`).

Boxed parameters (nn.LogicallyPartitioned, from `jax.eval_shape(model.init, ...)`) can be given
to `init` under `jax.eval_shape`: the state keeps the boxes, so `sharding.logical_to_shardings`
shards Adam's moments and the EMA like their parameters (Adafactor's factored row/column
statistics, of lower rank, are replicated).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any, Callable, NamedTuple

import fiddle as fdl
import jax
import jax.numpy as jnp
import optax

from praxis import base_hyperparams
from praxis import optimizer_transforms as _tx
from praxis import schedules

EXCLUDE_BIASES_AND_NORMS = r"(^|/)(b|bias|scale|per_dim_scale)$"


class BaseOptimizer(base_hyperparams.FiddleBaseParameterizable):
  """What all optimizers share (Pax's BaseOptimizer fields).

  Attributes:
    learning_rate: the base learning rate; the schedule multiplies it.
    lr_schedule: a schedule config/object from praxis.schedules (None: constant 1).
    clip_gradient_norm_to_value: clip the gradients' global norm to this value (0: no clipping).
    weight_decay: decoupled weight decay coefficient (times the learning rate at each step).
    weight_decay_exclude: regex over parameter paths that get no weight decay (None: decay all,
      as in Pax). `EXCLUDE_BIASES_AND_NORMS` is the usual choice.
    ema_decay: if > 0, keep an exponential moving average of the parameters with this decay.
    clip_gradient_single_norm_to_value: Pax's per-tensor clipping: each gradient tensor's norm
      is clipped to this value (0: off; not together with clip_gradient_norm_to_value).
    l2_regularizer_weight: Pax's L2 regulariser: `+ l2 * param` on the gradient, before the
      optimizer (skipping 1-D tensors with skip_lp_1d_vectors).
    l1_regularizer_weight: Pax's L1 regulariser: `+ l1 * sign(param)` on the gradient.
    skip_lp_1d_vectors: exempt vectors (biases, norm scales) from the L1/L2 regularisers.
    decoupled_weight_decay: Pax's name for weight_decay on optimizers without their own field.
    ewc_regularizer_weight, ewc_weight_per_var: Pax's EWC regulariser (not provided; > 0 raises).
  """

  learning_rate: float = 1e-3
  lr_schedule: Any = None
  clip_gradient_norm_to_value: float = 0.0
  clip_gradient_single_norm_to_value: float = 0.0
  l2_regularizer_weight: float | None = None
  l1_regularizer_weight: float | None = None
  skip_lp_1d_vectors: bool = False
  decoupled_weight_decay: float | None = None
  weight_decay: float = 0.0
  weight_decay_exclude: str | None = None
  ema_decay: float = 0.0
  ewc_regularizer_weight: float = 0.0
  ewc_weight_per_var: Any = None

  def __post_init__(self):
    parent = getattr(super(), "__post_init__", None)
    if parent is not None:
      parent()
    _check_regularisers(self)

  def scaling(self) -> optax.GradientTransformation:
    """The optimizer-specific part of the chain (step 2 in the module docstring)."""
    raise NotImplementedError(
      f"{type(self).__name__} defines neither scaling() nor _get_raw_grad_transformation(lr)."
    )

  # Pax's API: the learner calls get_grad_transformation; clipping is the learner's job there.

  def get_learning_rate(self, step_count: jax.typing.ArrayLike) -> jax.Array:
    """learning_rate * lr_schedule(step_count)."""
    return self.learning_rate_fn()(step_count)

  def _get_raw_grad_transformation(self, lr: Callable[[Any], Any]) -> Any:
    """The optimizer itself (its scaling, its own weight_decay, then `* -lr(count)`)."""
    parts = [self.scaling()]
    if self.weight_decay > 0:
      exclude = self.weight_decay_exclude
      parts.append(
        optax.add_decayed_weights(self.weight_decay, mask=lambda p: decay_mask(exclude, p))
      )
    parts.append(optax.scale_by_learning_rate(lr))
    return _with_partition_spec(optax.chain(*parts))

  def get_grad_transformation(
    self, var_weight_hparams: Any = None, include_ema: bool = True
  ) -> Any:
    """Pax's chain: L1, L2, the optimizer, decoupled weight decay, EWC, EMA.

    `var_weight_hparams` (the model's WeightHParams tree) exempts variables in the
    SKIP_LP_REGULARIZATION collection from the regularisers and the decoupled weight decay.
    """
    return _tx.sharded_chain(
      *_pax_chain(
        self,
        self._get_raw_grad_transformation(self.get_learning_rate),
        var_weight_hparams,
        include_ema,
        use_optax=False,
      )
    )

  def learning_rate_fn(self) -> Callable[[jax.typing.ArrayLike], jax.Array]:
    """step -> learning_rate * schedule(step), for the update and for summaries."""
    schedule = _as_schedule(self.lr_schedule)
    base = self.learning_rate
    return lambda step: base * jnp.asarray(schedule(step), jnp.float32)


class Adam(BaseOptimizer):
  """Adam with Pax's defaults; with weight_decay > 0 it is AdamW (decoupled decay).

  Attributes:
    beta1: decay of the first moment.
    beta2: decay of the second moment (lm_cloud sets 0.99).
    epsilon: added to sqrt(second moment); Pax uses 1e-6 (optax's default is 1e-8).
    epsilon_root: added to the second moment inside the sqrt.
    clip_threshold: Pax's update capping: each tensor's Adam update is scaled down so that its
      RMS is at most this (0: off). Rarely active with Adam's bounded updates.
  """

  beta1: float = 0.9
  beta2: float = 0.999
  epsilon: float = 1e-6
  epsilon_root: float = 0.0
  clip_threshold: float = 1.0

  @classmethod
  def HParamsA(cls):  # pylint: disable=invalid-name
    """Pax's preset: beta1 0.9, beta2 0.997, epsilon 1e-9."""
    return base_hyperparams.Config(cls, beta1=0.9, beta2=0.997, epsilon=1e-9)

  @classmethod
  def HParamsB(cls):  # pylint: disable=invalid-name
    """Pax's preset: beta1 0.9, beta2 0.98, epsilon 1e-9."""
    return base_hyperparams.Config(cls, beta1=0.9, beta2=0.98, epsilon=1e-9)

  def scaling(self) -> optax.GradientTransformation:
    parts = [optax.scale_by_adam(self.beta1, self.beta2, self.epsilon, self.epsilon_root)]
    if self.clip_threshold > 0:
      parts.append(optax.clip_by_block_rms(self.clip_threshold))
    return optax.chain(*parts)


class AdamW(Adam):
  """Adam with decoupled weight decay on by default (optax.adamw's 1e-4)."""

  weight_decay: float = 1e-4


class Sgd(BaseOptimizer):
  """SGD, with heavy-ball or Nesterov momentum: `t = g + momentum * t`, update `-lr * t`.

  Attributes:
    momentum: 0 for plain SGD.
    nesterov: use `g + momentum * t` (with the new t) as the update.
  """

  momentum: float | None = None
  nesterov: bool = False

  def scaling(self) -> optax.GradientTransformation:
    if not self.momentum:
      return optax.identity()
    return optax.trace(self.momentum, nesterov=self.nesterov)


class ShardedSgd(Sgd):
  """Pax's SGD with a sharded momentum: `-lr * g`, or `m = momentum * m + g` (nesterov: the
  update is `g + momentum * m`) with momentum set."""

  def _get_raw_grad_transformation(self, lr):
    return _tx.sharded_sgd(lr, self.momentum, self.nesterov)


class Lion(BaseOptimizer):
  """Lion: update `sign(beta1 * m + (1 - beta1) * g)`, then `m = beta2 * m + (1 - beta2) * g`.

  Use a learning rate 3-10x smaller than Adam's and a weight decay that much larger.

  Attributes:
    beta1: interpolation for the update's sign.
    beta2: decay of the momentum.
  """

  beta1: float = 0.9
  beta2: float = 0.99

  def scaling(self) -> optax.GradientTransformation:
    return optax.scale_by_lion(self.beta1, self.beta2)


class Adafactor(BaseOptimizer):
  """Adafactor (Shazeer & Stern 2018) on optax's factored second-moment estimate.

  Attributes:
    decay_rate: second-moment decay is `1 - (step + 1)**-decay_rate`.
    decay_offset: steps subtracted before the decay formula (for fine-tuning).
    min_dim_size_to_factor: factor only tensors whose two largest dims are at least this.
    factored: factor the second moment of matrices (False: full, like RMSProp).
    epsilon: added to the squared gradients.
    clipping_threshold: cap of each tensor's update RMS (0: off).
    multiply_by_parameter_scale: scale updates by the parameter's RMS (relative step sizes).
    beta1: momentum on the scaled updates (0: none, as in the paper's memory-saving setting).
  """

  decay_rate: float = 0.8
  decay_offset: int = 0
  min_dim_size_to_factor: int = 128
  factored: bool = True
  epsilon: float = 1e-30
  clipping_threshold: float = 1.0
  multiply_by_parameter_scale: bool = True
  beta1: float = 0.0

  def scaling(self) -> optax.GradientTransformation:
    parts = [
      optax.scale_by_factored_rms(
        self.factored, self.decay_rate, self.decay_offset, self.min_dim_size_to_factor, self.epsilon
      )
    ]
    if self.clipping_threshold > 0:
      parts.append(optax.clip_by_block_rms(self.clipping_threshold))
    if self.multiply_by_parameter_scale:
      parts.append(optax.scale_by_param_block_rms())
    if self.beta1 > 0:
      parts.append(optax.ema(self.beta1, debias=False))
    return optax.chain(*parts)


def _decay_rate_adam(step: jax.Array, beta2: float) -> jax.Array:
  """Pax's Adafactor 'adam' decay: beta2 with Adam's bias correction folded in."""
  t = jnp.asarray(step, jnp.float32) + 1.0
  return beta2 * (1.0 - beta2 ** (t - 1.0)) / (1.0 - beta2**t)


class ShardedAdafactor(BaseOptimizer):
  """Pax's ShardedAdafactor fields, on optax's factored second moment.

  Attributes:
    decay_method: 'adam' (decay_adam with Adam's bias correction, as Pax's
      set_default_adafactor) or 'pow' (1 - (step + 1)**-decay_pow).
    decay_adam: the 'adam' method's beta2.
    decay_pow: the 'pow' method's exponent.
    beta1: momentum on the scaled updates (0: none).
    clip_threshold: cap of each tensor's update RMS (None or <= 0: off).
    factored: factor the second moment of matrices.
    epsilon1_grad_sq_reg: added to the squared gradients.
    min_dim_size_to_factor: factor only tensors whose two largest dims are at least this.
    multiply_by_parameter_scale: scale updates by the parameter's RMS.
    The other fields are Pax's; this build refuses them when set (layerwise_adaptation,
    per-scope weight decay) or ignores them (quantized_dtype: the momentum stays float32;
    sort_factored_second_moment_dims, per_var_learning_summary, maybe_inf_to_nan,
    epsilon2_param_scale_reg, respect_skip_lp_regularization).
  """

  weight_decay: float = 0.0
  layerwise_adaptation: bool = False
  exclude_from_layerwise_adaptation: list[str] | None = None
  decay_method: str = ""
  decay_adam: float = 0.0
  decay_pow: float = 0.0
  beta1: float = 0.0
  clip_threshold: float | None = 1.0
  factored: bool = True
  epsilon1_grad_sq_reg: float = 1e-30
  quantized_dtype: str = "int8"
  respect_skip_lp_regularization: bool = False
  per_var_learning_summary: bool = False
  sort_factored_second_moment_dims: bool = False
  min_dim_size_to_factor: int = 128
  multiply_by_parameter_scale: bool = False
  epsilon2_param_scale_reg: float = 1e-3
  maybe_inf_to_nan: bool = True
  name: str = ""

  @classmethod
  def HParamsAdamB(cls):  # pylint: disable=invalid-name
    """Pax's preset: Adam-like decay (decay_adam 0.98) with momentum 0.9."""
    return base_hyperparams.Config(
      cls, beta1=0.9, decay_method="adam", decay_adam=0.98, quantized_dtype="int8"
    )

  def scaling(self) -> optax.GradientTransformation:
    if self.layerwise_adaptation or isinstance(self.weight_decay, dict):
      raise NotImplementedError(
        "ShardedAdafactor: layerwise_adaptation and per-scope weight_decay dicts are not "
        "provided; use a float weight_decay"
      )
    if self.decay_method == "adam":
      if not 0 < self.decay_adam < 1:
        raise ValueError(f"ShardedAdafactor: decay_adam must be in (0, 1), got {self.decay_adam}")
      decay_rate, decay_fn = self.decay_adam, _decay_rate_adam
    elif self.decay_method == "pow":
      if self.decay_pow <= 0:
        raise ValueError(f"ShardedAdafactor: decay_pow must be > 0, got {self.decay_pow}")
      decay_rate, decay_fn = self.decay_pow, None
    else:
      raise ValueError(
        f"ShardedAdafactor.decay_method must be 'adam' or 'pow', got {self.decay_method!r}"
      )
    kwargs = {} if decay_fn is None else {"decay_rate_fn": decay_fn}
    parts = [
      optax.scale_by_factored_rms(
        self.factored,
        decay_rate,
        0,
        self.min_dim_size_to_factor,
        self.epsilon1_grad_sq_reg,
        **kwargs,
      )
    ]
    if self.clip_threshold and self.clip_threshold > 0:
      parts.append(optax.clip_by_block_rms(self.clip_threshold))
    if self.multiply_by_parameter_scale:
      parts.append(optax.scale_by_param_block_rms())
    if self.beta1 > 0:
      parts.append(optax.ema(self.beta1, debias=False))
    return optax.chain(*parts)


class ShardedStaticAccumulator(BaseOptimizer):
  """Runs `optimizer_tpl` on the mean of every `num_sub_batches` gradients (zero updates in
  between). Its own learning_rate / lr_schedule fill the wrapped optimizer's when unset there
  (and the other way round); clipping belongs on this wrapper.

  Attributes:
    optimizer_tpl: the wrapped optimizer's config.
    num_sub_batches: gradients per applied update (>= 1).
    accumulation_use_cond_op: Pax's choice of lax op; both give the same numbers.
  """

  optimizer_tpl: Any = None
  num_sub_batches: int = 1
  accumulation_use_cond_op: bool = False
  base_optimizer: Any = dataclasses.field(default=None, init=False, repr=False)

  def __post_init__(self):
    if self.optimizer_tpl is None:
      raise ValueError(
        "ShardedStaticAccumulator: set optimizer_tpl, the wrapped optimizer's config."
      )
    if self.num_sub_batches < 1:
      raise ValueError(
        f"ShardedStaticAccumulator: num_sub_batches must be >= 1, got {self.num_sub_batches}."
      )
    tpl = self.optimizer_tpl.clone() if hasattr(self.optimizer_tpl, "clone") else self.optimizer_tpl
    if tpl.lr_schedule is None:
      tpl.lr_schedule = self.lr_schedule
    elif self.lr_schedule is None:
      self.lr_schedule = tpl.lr_schedule
    if not self.learning_rate:
      self.learning_rate = tpl.learning_rate
    self.base_optimizer = (
      base_hyperparams.instantiate(tpl) if isinstance(tpl, fdl.Buildable) else tpl
    )
    super().__post_init__()

  def scaling(self) -> optax.GradientTransformation:
    return optax.MultiSteps(
      self.base_optimizer.scaling(), self.num_sub_batches
    ).gradient_transformation()

  def _get_raw_grad_transformation(self, lr):
    base = self.base_optimizer._get_raw_grad_transformation(lr)  # pylint: disable=protected-access
    return _tx.sharded_static_accumulation(
      self.num_sub_batches, base, self.accumulation_use_cond_op
    )


class OptaxOptimizer(base_hyperparams.FiddleBaseParameterizable):
  """Pax's wrapper of any optax transformation (`grad_tx`, which applies its own learning rate)
  with Pax's regularisers around it: L1/L2 before, decoupled weight decay and EWC after (these
  use learning_rate * lr_schedule), then the parameter EMA.
  """

  l2_regularizer_weight: float | None = None
  l1_regularizer_weight: float | None = None
  skip_lp_1d_vectors: bool = False
  decoupled_weight_decay: float | None = None
  clip_gradient_norm_to_value: float = 0.0
  clip_gradient_single_norm_to_value: float = 0.0
  learning_rate: float = 0.0
  lr_schedule: Any = None
  ema_decay: float = 0.0
  ewc_regularizer_weight: float = 0.0
  ewc_weight_per_var: Any = None
  grad_tx: Any = None

  def __post_init__(self):
    parent = getattr(super(), "__post_init__", None)
    if parent is not None:
      parent()
    _check_regularisers(self)

  def get_learning_rate(self, step_count: jax.typing.ArrayLike) -> jax.Array:
    return self.learning_rate * jnp.asarray(_as_schedule(self.lr_schedule)(step_count), jnp.float32)

  def get_grad_transformation(
    self, var_weight_hparams: Any = None, include_ema: bool = True
  ) -> Any:
    if self.grad_tx is None:
      raise ValueError(
        "OptaxOptimizer: set grad_tx, the optax transformation to wrap (e.g. optax.sgd(1.0))."
      )
    return optax.chain(
      *_pax_chain(self, self.grad_tx, var_weight_hparams, include_ema, use_optax=True)
    )


def _check_regularisers(opt: Any) -> None:
  """Pax's rule: one of L1, L2 and decoupled weight decay."""
  if opt.l2_regularizer_weight and opt.l1_regularizer_weight:
    raise ValueError(
      f"{type(opt).__name__}: set l1_regularizer_weight or l2_regularizer_weight, not both."
    )
  if opt.decoupled_weight_decay and (opt.l2_regularizer_weight or opt.l1_regularizer_weight):
    raise ValueError(
      f"{type(opt).__name__}: decoupled_weight_decay does not mix with the L1/L2 regularisers; "
      "set one of them."
    )


def _pax_chain(
  opt: Any, raw: Any, var_weight_hparams: Any, include_ema: bool, use_optax: bool
) -> list:
  """Pax's order around the optimizer proper (`raw`)."""
  if var_weight_hparams:
    is_hp = lambda x: isinstance(x, _tx.WeightHParams)
    mask = jax.tree.map(
      lambda h: not _tx.var_skip_lp_regularization(h), var_weight_hparams, is_leaf=is_hp
    )
  else:
    mask = None
  parts = [
    _tx.apply_lp_regularizer(
      mask, opt.l1_regularizer_weight, 1.0, opt.skip_lp_1d_vectors, use_optax
    ),
    _tx.apply_lp_regularizer(
      mask, opt.l2_regularizer_weight, 2.0, opt.skip_lp_1d_vectors, use_optax
    ),
    raw,
    _tx.apply_decoupled_weight_decay(
      opt.get_learning_rate, mask, opt.decoupled_weight_decay, use_optax
    ),
  ]
  if opt.ewc_regularizer_weight > 0.0:
    parts.append(
      _tx.apply_ewc_regularization(
        opt.get_learning_rate, opt.ewc_regularizer_weight, opt.ewc_weight_per_var, use_optax
      )
    )
  if opt.ema_decay > 0.0 and include_ema:
    if not opt.ema_decay < 1.0:
      raise ValueError(f"ema_decay must be < 1, got {opt.ema_decay}.")
    parts.append(_tx.apply_ema_weights(opt.ema_decay, use_optax))
  return parts


def _with_partition_spec(tx: optax.GradientTransformation) -> _tx.ShardedGradientTransformation:
  """An optax transformation with an init_partition_spec: arrays shaped like a parameter are
  sharded like it, everything else replicated."""

  def spec(var_hparams):
    is_hp = lambda x: isinstance(x, _tx.WeightHParams)
    shapes = jax.tree.map(
      lambda h: jax.ShapeDtypeStruct(tuple(h.shape), h.dtype or jnp.float32),
      var_hparams,
      is_leaf=is_hp,
    )
    state = jax.eval_shape(tx.init, shapes)
    try:
      return _tx.partition_params(tx, var_hparams, state)
    except (AttributeError, TypeError, ValueError):
      # The state is not made leaf by leaf from the parameters (e.g. factored statistics).
      return jax.tree.map(
        lambda x: _tx.WeightHParams(
          shape=list(x.shape),
          init=None,
          dtype=x.dtype,
          collections=None,
          tensor_split_dims_mapping=[-1] * len(x.shape),
        ),
        state,
      )

  return _tx.ShardedGradientTransformation(tx.init, tx.update, spec)


# Pax's module-level names.
instantiate = base_hyperparams.instantiate
ShardedGradientTransformation = _tx.ShardedGradientTransformation
GeneralGradientTransformation = _tx.GeneralGradientTransformation
count_init_fn = _tx.count_init_fn
count_init_partition_spec_fn = _tx.count_init_partition_spec_fn
partition_params = _tx.partition_params
sharded_chain = _tx.sharded_chain
sharded_masked = _tx.sharded_masked
sharded_sgd = _tx.sharded_sgd
sharded_static_accumulation = _tx.sharded_static_accumulation
apply_lp_regularizer = _tx.apply_lp_regularizer
apply_decoupled_weight_decay = _tx.apply_decoupled_weight_decay
apply_ewc_regularization = _tx.apply_ewc_regularization
apply_ema_weights = _tx.apply_ema_weights


class EmaState(NamedTuple):
  """The EMA of the parameters (same tree as the parameters)."""

  ema: Any


def ema_of_params(decay: float) -> optax.GradientTransformation:
  """Tracks `ema = decay * ema + (1 - decay) * (params + updates)`; updates pass unchanged.

  Must be last in a chain (its `updates` are the final ones). The EMA starts at the initial
  parameters, so it has no bias towards zero and needs no debiasing.
  """

  def init_fn(params):
    # A copy, not the same buffers: a donated train state must not hold one buffer twice.
    return EmaState(ema=jax.tree.map(lambda p: jnp.array(p, copy=True), params))

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError("ema_decay > 0 needs the parameters: call update(grads, state, params).")
    new_params = optax.apply_updates(params, updates)
    ema = jax.tree.map(
      lambda e, p: decay * e + (1.0 - decay) * p.astype(e.dtype), state.ema, new_params
    )
    return updates, EmaState(ema=ema)

  return optax.GradientTransformation(init_fn, update_fn)


def param_path(path: tuple[Any, ...]) -> str:
  """ "a/b/0/w" for a jax key path; a box's `.value` attribute is not part of the name."""
  names = []
  for key in path:
    if isinstance(key, jax.tree_util.DictKey):
      names.append(str(key.key))
    elif isinstance(key, jax.tree_util.SequenceKey):
      names.append(str(key.idx))
    elif isinstance(key, jax.tree_util.GetAttrKey):
      if key.name != "value":
        names.append(key.name)
    else:
      names.append(str(key))
  return "/".join(names)


def decay_mask(exclude: str | None, params: Any) -> Any:
  """A tree of bools like `params`: True where weight decay applies."""
  pattern = None if exclude is None else re.compile(exclude)
  return jax.tree_util.tree_map_with_path(
    lambda path, _: pattern is None or pattern.search(param_path(path)) is None, params
  )


def build(cfg: Any, params: Any = None) -> optax.GradientTransformation:
  """The optax transformation for an optimizer config (or built optimizer).

  `params` (optional; arrays, ShapeDtypeStructs or boxes) is only used to check the weight-decay
  exclusion pattern now: a pattern that matches nothing is logged, and the excluded paths are
  logged at INFO. The mask itself is computed from the tree given to `init` / `update`.
  """
  opt = _as_optimizer(cfg)
  if opt.clip_gradient_norm_to_value < 0 or opt.weight_decay < 0:
    raise ValueError(
      f"{type(opt).__name__}: clip_gradient_norm_to_value and weight_decay must "
      f"be >= 0 (0 turns them off); got {opt.clip_gradient_norm_to_value}, "
      f"{opt.weight_decay}."
    )
  if not 0 <= opt.ema_decay < 1:
    raise ValueError(
      f"{type(opt).__name__}: ema_decay must be in [0, 1) (0: no EMA), got {opt.ema_decay}."
    )
  if opt.weight_decay_exclude is not None:
    re.compile(opt.weight_decay_exclude)  # Fail now on a bad regex, not inside jit.
    if params is not None:
      _log_exclusions(opt.weight_decay_exclude, params)

  if opt.clip_gradient_norm_to_value > 0 and opt.clip_gradient_single_norm_to_value > 0:
    raise ValueError(
      f"{type(opt).__name__}: set one of clip_gradient_norm_to_value and "
      "clip_gradient_single_norm_to_value, as in Pax"
    )
  parts = []
  if opt.clip_gradient_norm_to_value > 0:
    parts.append(optax.clip_by_global_norm(opt.clip_gradient_norm_to_value))
  if opt.clip_gradient_single_norm_to_value > 0:
    parts.append(_clip_each_norm(opt.clip_gradient_single_norm_to_value))
  parts.extend(_regularisers(opt))
  parts.append(opt.scaling())
  weight_decay = opt.weight_decay or opt.decoupled_weight_decay or 0.0
  if weight_decay > 0:
    exclude = opt.weight_decay_exclude
    parts.append(optax.add_decayed_weights(weight_decay, mask=lambda p: decay_mask(exclude, p)))
  parts.append(optax.scale_by_learning_rate(opt.learning_rate_fn()))
  if opt.ewc_regularizer_weight > 0:
    parts.append(
      _tx.apply_ewc_regularization(
        opt.learning_rate_fn(), opt.ewc_regularizer_weight, opt.ewc_weight_per_var, True
      )
    )
  if opt.ema_decay > 0:
    parts.append(ema_of_params(opt.ema_decay))
  return optax.chain(*parts)


def _clip_each_norm(max_norm: float) -> optax.GradientTransformation:
  """Pax's clip_gradient_single_norm_to_value: g * min(1, max_norm / ||g||) per tensor."""

  def clip(updates, state, params=None):
    del params

    def one(g):
      norm = jnp.sqrt(jnp.sum(jnp.square(g.astype(jnp.float32))))
      return (g * jnp.minimum(1.0, max_norm / jnp.maximum(norm, 1e-30))).astype(g.dtype)

    return jax.tree.map(one, updates), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(), clip)


def _regularisers(opt: BaseOptimizer) -> list[optax.GradientTransformation]:
  """Pax's L2 / L1 regularisers as gradient terms (before the optimizer's own scaling)."""

  def mask(params):
    return jax.tree.map(lambda p: not (opt.skip_lp_1d_vectors and p.ndim <= 1), params)

  parts = []
  if opt.l2_regularizer_weight:
    parts.append(optax.add_decayed_weights(opt.l2_regularizer_weight, mask=mask))
  if opt.l1_regularizer_weight:
    l1 = opt.l1_regularizer_weight

    def add_l1(updates, state, params):
      if params is None:
        raise ValueError("l1_regularizer_weight needs the params in update()")
      keep = mask(params)
      return jax.tree.map(
        lambda g, p, k: g + l1 * jnp.sign(p) if k else g, updates, params, keep
      ), state

    parts.append(optax.GradientTransformation(lambda params: optax.EmptyState(), add_l1))
  return parts


def learning_rate_fn(cfg: Any) -> Callable[[jax.typing.ArrayLike], jax.Array]:
  """step -> learning rate (base rate times schedule), e.g. for an `lr` summary."""
  return _as_optimizer(cfg).learning_rate_fn()


def current_learning_rate(cfg: Any, opt_state: Any) -> jax.Array:
  """The learning rate the next update will use, from the update count in `opt_state`."""
  counts = _find(opt_state, optax.ScaleByScheduleState)
  if not counts:
    raise ValueError("opt_state has no learning-rate schedule state; was it made by build()?")
  return learning_rate_fn(cfg)(counts[0].count)


def ema_params(opt_state: Any) -> Any:
  """The EMA of the parameters kept in `opt_state` (an optimizer built with ema_decay > 0)."""
  found = _find(opt_state, EmaState)
  if not found:
    raise ValueError("opt_state holds no parameter EMA; set ema_decay > 0 in the optimizer config.")
  return found[0].ema


def _find(tree: Any, kind: type) -> list[Any]:
  nodes = jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, kind))
  return [n for n in nodes if isinstance(n, kind)]


def _as_optimizer(cfg: Any) -> BaseOptimizer:
  opt = base_hyperparams.instantiate(cfg) if isinstance(cfg, fdl.Buildable) else cfg
  if not isinstance(opt, BaseOptimizer):
    raise TypeError(
      f"Expected an optimizer config (e.g. optimizers.Adam.HParams.config(...)), "
      f"got {type(opt).__name__}."
    )
  return opt


def _as_schedule(schedule: Any) -> Callable[[Any], Any]:
  if schedule is None:
    return lambda step: jnp.ones([], jnp.float32)
  if isinstance(schedule, fdl.Buildable):
    schedule = base_hyperparams.instantiate(schedule)
  if isinstance(schedule, schedules.BaseSchedule):
    return schedule.make()
  if callable(schedule):
    return schedule  # Any optax schedule.
  raise TypeError(
    f"lr_schedule must be a praxis.schedules config or an optax schedule, got "
    f"{type(schedule).__name__}."
  )


def _log_exclusions(exclude: str, params: Any) -> None:
  mask = decay_mask(exclude, params)
  paths = jax.tree_util.tree_leaves_with_path(mask)
  excluded = [param_path(p) for p, decays in paths if not decays]
  if not excluded:
    logging.warning(
      "weight_decay_exclude %r matches none of the %d parameters (e.g. %s); every "
      "parameter is decayed.",
      exclude,
      len(paths),
      param_path(paths[0][0]) if paths else "none",
    )
  else:
    logging.info(
      "No weight decay for %d of %d parameters: %s", len(excluded), len(paths), ", ".join(excluded)
    )
