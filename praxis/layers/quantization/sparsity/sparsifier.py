"""Pax's SparsityBaseLayer: the mixin that gives a layer pruning masks.

A layer that mixes it in calls `create_sparsity_variables(name, weight_hp)` in
setup and `w = self.sparsifiy(self.theta.w, inputs=x, name='w')` before using
the weight. Non-trainable variables (unless sparsity.mode is InferenceMode):
  <name>_sparsity_mask       bool, the weight's shape, all True at init
  num_shots                  int32 [], mode.get_num_shots()
  mask_update_count          int32 [], masks computed so far
  step                       int32 [], forward passes so far
  sparse_architecture_divergence  float32 [] (with track_sad_metric)
  <name>_sparsity_mask_float float mask (with topk_estimator_type), plus a
                             trainable `w_mask` that learns the N:M choice
  <name>_sparsity_mask_pruned_value  (with a non-zero or trainable pruned_value)
Mask updates and the step counter are written only when "non_trainable" is
mutable (training); otherwise the stored mask is applied as is.
"""

from __future__ import annotations

import copy
import functools
from typing import Optional, Sequence

import jax
from jax import numpy as jnp
from praxis import base_layer
from praxis import pytypes
from praxis.layers.quantization.sparsity import sparsity
from praxis.layers.quantization.sparsity import sparsity_hparams
from praxis.layers.quantization.sparsity import sparsity_modes

SPARSITY_METADATA_SUFFIX = "_sparsity_metadata"
SPARSITY_NZ_SUFFIX = "_sparsity_nz"
SPARSITY_CONFIG_SUFFIX = "_sparsity_config"
SPARSITY_PRUNED_VALUE_SUFFIX = "_sparsity_mask_pruned_value"

SparsityType = sparsity_hparams.SparsityType
SparsityHParams = sparsity_hparams.SparsityHParams
WeightSparsityParams = sparsity_hparams.WeightSparsityParams
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
SPARSITY_NAME_POSTFIX = base_layer.SPARSITY_NAME_POSTFIX
JTensor = pytypes.JTensor
InferenceMode = sparsity_modes.InferenceMode
FewShotMode = sparsity_modes.FewShotMode
OneShotMode = sparsity_modes.OneShotMode
MaterializeMode = sparsity_modes.MaterializeMode

instance_field = base_layer.instance_field

_MEAN_SYNC = [base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC]


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def sr_ste(inputs: jnp.ndarray, mask: jnp.ndarray, sparse_ste_weight: float):
  """SR-STE (arXiv:2102.04010): forward `mask * inputs`; backward passes the gradient
  to every weight and adds sparse_ste_weight * w on the pruned ones.

  Returns (masked inputs, mask, sparse_ste_weight as an array), as Pax's does.
  """
  return sr_ste_fwd(inputs, mask, sparse_ste_weight)[0]


def sr_ste_fwd(inputs, mask, sparse_ste_weight):
  weight = jnp.array(sparse_ste_weight)
  out = (jnp.multiply(mask, inputs), mask, weight)
  return out, (inputs, mask, weight)


def sr_ste_bwd(sparse_ste_weight, residuals, cotangents):
  del sparse_ste_weight  # Also in the residuals, as an array.
  inputs, mask, weight = residuals
  g_out = cotangents[0]
  # Dense straight-through gradient, plus decay of the pruned weights towards 0.
  return (g_out + weight * jnp.where(mask, jnp.zeros_like(inputs), inputs), None)


sr_ste.defvjp(sr_ste_fwd, sr_ste_bwd)


class SparsityBaseLayer(base_layer.BaseLayer):
  """Mixin adding Pax's `sparsity` field and pruning masks (see the module docstring).

  Attributes:
    sparsity: SparsityHParams; None keeps the layer dense.
  """

  sparsity: Optional[SparsityHParams] = None

  def create_sparsity_variables(
    self,
    name: str,
    weight_hparams: WeightHParams,
    scale_shape: Optional[Sequence[int]] = None,
  ) -> None:
    """Creates the mask and counters of weight `name` (nothing when dense or serving)."""
    if self.sparsity is None or isinstance(self.sparsity.mode, InferenceMode):
      return
    self._create_masks_variables(name, weight_hparams, scale_shape=scale_shape)
    self._create_counter_variables()

  def _create_masks_variables(
    self,
    name: str,
    weight_hp: WeightHParams,
    scale_shape: Optional[Sequence[int]] = None,
  ) -> None:
    sp = self.sparsity
    mask_hp = copy.deepcopy(weight_hp)
    mask_hp.init = WeightInit.Constant(True)
    mask_hp.dtype = jnp.bool_
    self.create_variable(name + SPARSITY_NAME_POSTFIX, mask_hp, trainable=False)
    if sp.topk_estimator_type:
      if scale_shape is None:
        raise AssertionError(
          f"{type(self).__name__}: scale_shape is required for top-k methods "
          f"(topk_estimator_type={sp.topk_estimator_type!r}); pass it to "
          "create_sparsity_variables."
        )
      logits_hp = copy.deepcopy(weight_hp)
      if hasattr(self, "set_up_weights"):
        self.set_up_weights(weight_name="w_mask", weight_params=logits_hp, scale_shape=scale_shape)
      else:
        self.create_variable("w_mask", logits_hp)
      float_hp = copy.deepcopy(weight_hp)
      float_hp.init = WeightInit.Constant(1.0)
      float_hp.dtype = jnp.float32
      float_hp.collections = list(_MEAN_SYNC)
      self.create_variable(name + SPARSITY_NAME_POSTFIX + "_float", float_hp, trainable=False)
    wp = sp.weight_params
    if wp is not None and (wp.pruned_value != 0.0 or wp.pruned_value_trainable):
      value_hp = WeightHParams(
        shape=(), init=WeightInit.Constant(wp.pruned_value), dtype=jnp.float32
      )
      self.create_variable(
        name + SPARSITY_PRUNED_VALUE_SUFFIX, value_hp, trainable=wp.pruned_value_trainable
      )

  def _create_counter_variables(self) -> None:
    def scalar(value, dtype):
      return WeightHParams(
        shape=[], init=WeightInit.Constant(value), dtype=dtype, collections=list(_MEAN_SYNC)
      )

    self.create_variable(
      "num_shots", scalar(self.sparsity.mode.get_num_shots(), jnp.int32), trainable=False
    )
    self.create_variable("mask_update_count", scalar(0, jnp.int32), trainable=False)
    self.create_variable("step", scalar(0, jnp.int32), trainable=False)
    if self.sparsity.track_sad_metric:
      self.create_variable(
        "sparse_architecture_divergence", scalar(0.0, jnp.float32), trainable=False
      )

  # ---- Mask computation ----

  def _get_sparsity_mask(self, score, mask, step, input_dtype):
    """New mask from `score` under the configured sparsity type (the old one if no prune rate)."""
    sp = self.sparsity
    rate = None if sp.weight_params is None else sp.weight_params.prune_rate
    if sp.sparsity_type == SparsityType.STRUCTURED_NM:
      if rate is None:
        return mask
      n, m = rate
      offset = sp.weight_params.offset
      if sparsity.is_optimized_offset(sp.order, offset, input_dtype) and not sp.block_size:
        return sparsity.get_sparsity_mask_optimized_for_offset(
          score, n_sparsity=n, m_sparsity=m, order=sp.order, offset=offset
        )
      return sparsity.get_sparsity_mask(
        score, n_sparsity=n, m_sparsity=m, order=sp.order, offset=offset, block_size=sp.block_size
      )
    if sp.sparsity_type == SparsityType.CHANNELWISE_PRUNING:
      if rate is None:
        return mask
      return sparsity.get_sparsity_mask_channelwise(score, rate, sp.channelwise_pruning_dim)
    if sp.sparsity_type != SparsityType.UNSTRUCTURED:
      raise AssertionError(f"invalid sparsity type {sp.sparsity_type}")
    rate = self._get_prune_rate_unstructured(step)
    if rate is None:
      return mask
    return sparsity.get_sparsity_mask_unstructured(score, mask, rate)

  def _get_prune_rate_unstructured(self, step):
    """The prune rate (percent) at `step`: fixed, or PolynomialDecayParams' ramp."""
    sp = self.sparsity
    rate = sp.weight_params.prune_rate if sp is not None and sp.weight_params else None
    if sp is None or sp.polynomial_decay_schedule is None:
      return rate
    sched = sp.polynomial_decay_schedule
    started = jnp.where(jnp.greater_equal(step, sched.begin_step), 1.0, 0.0)
    progress = (jnp.minimum(step, sched.end_step) - sched.begin_step) / (
      sched.end_step - sched.begin_step
    )
    span = sched.initial_sparsity - sched.final_sparsity
    return started * (sched.final_sparsity + span * (1 - progress) ** sched.exponent)

  def _mask_as(self, var_name: str, shape) -> JTensor:
    """A mask variable reshaped to the weight's shape (they differ e.g. with combined dims)."""
    value = self.get_var(var_name)
    return value if value.shape == tuple(shape) else jnp.reshape(value, shape)

  def _log_update_count(self, update_cnt) -> None:
    if isinstance(self.sparsity.mode, (OneShotMode, FewShotMode)):
      self.add_summary("mask_update_count", update_cnt, verbosity=4)

  def _maybe_update_mask(self, weight: JTensor, inputs: JTensor, name: str, step) -> None:
    """Recomputes `<name>_sparsity_mask` when the mode's update_cond holds at `step`."""
    sp = self.sparsity
    if isinstance(sp.mode, MaterializeMode):
      return
    mask_name = name + SPARSITY_NAME_POSTFIX
    mask = self._mask_as(mask_name, weight.shape)
    update_cnt = self.get_var("mask_update_count")
    if isinstance(sp.mode, FewShotMode):
      sp.mode.increment_target_step(update_cnt)

    def divergence(old, new):
      if not sp.track_sad_metric:
        return None
      # Fraction of the mask that flipped (SAD, arXiv:2102.04010).
      return jnp.sum(jnp.logical_xor(old, new)) / old.size

    def recompute(w, x, old_mask, count, cur_step):
      score = sparsity.compute_score(w, score_func=sp.score, inputs=x)
      new_mask = self._get_sparsity_mask(score, old_mask, cur_step, w.dtype)
      return new_mask, count + 1, divergence(old_mask, new_mask)

    def keep(w, x, old_mask, count, cur_step):
      del w, x, cur_step
      sad = jnp.zeros((), jnp.float32) if sp.track_sad_metric else None
      return old_mask, count, sad

    new_mask, update_cnt, sad = jax.lax.cond(
      sp.mode.update_cond(step, update_cnt), recompute, keep, weight, inputs, mask, update_cnt, step
    )
    self.update_var("mask_update_count", update_cnt)
    self.update_var(mask_name, new_mask)
    if sp.track_sad_metric:
      self.update_var("sparse_architecture_divergence", sad)
    self._log_update_count(update_cnt)

  def sparsify_via_top_k_estimator(self, weight: JTensor, name: str, step) -> JTensor:
    """Applies the N:M mask learned from the trainable `w_mask` (topk_estimator_type).

    On an update step each group of M entries of w_mask keeps its N largest;
    'BINARY_MASK' applies that 0/1 mask with a straight-through gradient to
    w_mask, 'PROB_MASK' applies N * softmax of the kept w_mask entries. Between
    updates the stored float mask is applied.
    """
    sp = self.sparsity
    bin_name = name + SPARSITY_NAME_POSTFIX
    float_name = bin_name + "_float"
    binary_mask = self._mask_as(bin_name, weight.shape)
    float_mask = self._mask_as(float_name, weight.shape)
    logits = self.theta.w_mask
    update_cnt = self.get_var("mask_update_count")
    if isinstance(sp.mode, FewShotMode):
      sp.mode.increment_target_step(update_cnt)
    n, m = sp.weight_params.prune_rate

    def keep(old_binary, w, count, logits, old_float):
      del logits
      sad = jnp.zeros((), jnp.float32) if sp.track_sad_metric else None
      return w * old_float, count, old_float, old_binary, sad

    def learn(old_binary, w, count, logits, old_float):
      del old_float
      groups = logits.reshape(logits.size // m, m)  # [G, M]
      top = sparsity._keep_top_n(groups, n, axis=-1)  # pylint: disable=protected-access
      if sp.topk_estimator_type == "BINARY_MASK":
        hard = top.reshape(logits.shape)
        # Straight-through: the value is the 0/1 mask, the gradient flows to logits.
        new_float = (logits - jax.lax.stop_gradient(logits)) + jax.lax.stop_gradient(hard)
        new_binary = new_float == 1.0
      elif sp.topk_estimator_type == "PROB_MASK":
        new_binary = top.reshape(w.shape)
        masked_logits = jnp.where(top, groups, -jnp.inf)
        new_float = (jax.nn.softmax(masked_logits, axis=-1) * n).reshape(w.shape)
      else:
        raise ValueError(
          f"Unknown topk_estimator_type {sp.topk_estimator_type!r}; use 'BINARY_MASK' or "
          "'PROB_MASK'."
        )
      sad = None
      if sp.track_sad_metric:
        sad = jnp.sum(jnp.logical_xor(old_binary, new_binary)) / new_binary.size
      return w * new_float, count, new_float.astype(jnp.float32), new_binary, sad

    weight, update_cnt, new_float, new_binary, sad = jax.lax.cond(
      sp.mode.update_cond(step, update_cnt),
      learn,
      keep,
      binary_mask,
      weight,
      update_cnt,
      logits,
      float_mask,
    )
    self.update_var("mask_update_count", update_cnt)
    self.update_var(bin_name, new_binary)
    self.update_var(float_name, new_float)
    if sp.track_sad_metric:
      self.update_var("sparse_architecture_divergence", sad)
    self._log_update_count(update_cnt)
    return weight

  def sparsifiy(
    self,
    weight: JTensor,
    name: str,
    inputs: JTensor | None = None,
    layer_idx: int | None = None,
  ) -> JTensor:
    """`weight` with its mask applied (updating the mask first when the schedule says so).

    Pax's spelling (sic). inputs feed the ACTIVATION_WEIGHTED score; layer_idx
    is checked against sparsity.sparsified_layers.
    """
    sp = self.sparsity
    if sp is None or isinstance(sp.mode, InferenceMode) or sp.weight_params is None:
      return weight
    if sp.sparsity_type == SparsityType.CHANNELWISE_PRUNING:
      raise AssertionError(
        "Channel-wise pruning is temporarily disabled in layers (as in Pax); use "
        "sparsity.get_sparsity_mask_channelwise directly."
      )
    step = self.get_var("step")
    if (
      sp.sparsified_layers is not None
      and layer_idx is not None
      and layer_idx not in sp.sparsified_layers
    ):
      self.update_var("step", step + 1)
      return weight
    if sp.topk_estimator_type:
      weight = self.sparsify_via_top_k_estimator(weight=weight, name=name, step=step)
      self.update_var("step", step + 1)
      return weight
    self._maybe_update_mask(weight=weight, inputs=inputs, name=name, step=step)
    # The mask is all True until the first update, so applying it is always safe.
    mask = self._mask_as(name + SPARSITY_NAME_POSTFIX, weight.shape)
    wp = sp.weight_params
    pruned_value = None
    if wp.pruned_value != 0.0 or wp.pruned_value_trainable:
      value_name = name + SPARSITY_PRUNED_VALUE_SUFFIX
      if wp.pruned_value_trainable:
        pruned_value = getattr(self.theta, value_name)
      else:
        pruned_value = self.get_var(value_name)
    if wp.sparse_ste:
      weight, _, _ = sr_ste(weight, mask, wp.sparse_ste_weight)
    else:
      weight = sparsity.apply_sparsity(weight, mask, pruned_value=pruned_value)
    self.update_var("step", step + 1)
    return weight
