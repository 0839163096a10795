"""Pax's sparsity hyper-parameters: SparsityHParams and what it is built from.

A layer with `sparsity=SparsityHParams(...)` keeps a boolean mask per pruned
weight and multiplies it in on every forward pass; these dataclasses say which
pattern (N:M structured, unstructured percentage, channel-wise), how weights are
scored, and when the mask is recomputed (`mode`, see sparsity_modes).
"""

from __future__ import annotations

import dataclasses
import enum

from praxis.layers.quantization.sparsity import sparsity_modes

BaseSparsityScheduleMode = sparsity_modes.BaseSparsityScheduleMode
InferenceMode = sparsity_modes.InferenceMode
FewShotMode = sparsity_modes.FewShotMode


@enum.unique
class SparsityScore(str, enum.Enum):
  """How a weight's importance is scored: |w| or |w| times mean |activation|."""

  MAGNITUDE = "magnitude"
  ACTIVATION_WEIGHTED = "activation_weighted"


@enum.unique
class SparsityType(str, enum.Enum):
  """Pruning pattern: N of every M kept, a percentage of all, or whole channels."""

  STRUCTURED_NM = "structured_nm"
  UNSTRUCTURED = "unstructured"
  CHANNELWISE_PRUNING = "channelwise_pruning"


@dataclasses.dataclass
class PolynomialDecayParams:
  """Schedule of the unstructured prune rate (percent), arXiv:1710.01878.

  rate(step) = final + (initial - final) * (1 - (min(step, end) - begin) / (end - begin)) ** exponent
  from begin_step on, 0 before it.
  """

  initial_sparsity: float = 10.0
  final_sparsity: float = 70.0
  begin_step: int = 0
  end_step: int = 50_000
  exponent: float = 3.0


@dataclasses.dataclass
class WeightSparsityParams:
  """How weights are pruned.

  Attributes:
    prune_rate: None (no pruning), (n, m) for N:M structured sparsity, or a
      percentage in [0, 100] (float) for unstructured / channel-wise pruning.
    structure_decay: Decay the N:M structure during training (arXiv:2209.07617).
    mask_decay_weight: >= 0; 0 disables mask decay (arXiv:2209.07617).
    sparse_ste: Use the sparse-refined straight-through estimator (SR-STE,
      arXiv:2102.04010): pruned weights still receive the gradient plus
      sparse_ste_weight * w.
    sparse_ste_weight: SR-STE's lambda_w (>= 0).
    offset: Distance between the M elements of one N:M group; 0 means adjacent.
      With offset > 0 the pruned size must be a multiple of offset * m.
    pruned_value: What pruned entries become (default 0).
    pruned_value_trainable: Learn pruned_value as a parameter.
  """

  prune_rate: None | float | tuple[int, int]
  structure_decay: bool = False
  mask_decay_weight: float = 0.0
  sparse_ste: bool = False
  sparse_ste_weight: float = 0.0002
  offset: int = 0
  pruned_value: float = 0.0
  pruned_value_trainable: bool = False

  def __post_init__(self):
    if self.mask_decay_weight < 0.0:
      raise AssertionError(
        f"Invalid value for {self.mask_decay_weight}. `mask_decay_weight` must be positive."
      )
    if self.sparse_ste_weight < 0.0:
      raise AssertionError(
        f"Invalid value for {self.sparse_ste_weight}. `sparse_ste_weight` must be positive "
        "(uses SR-STE) or 0 (uses STE)."
      )
    if self.sparse_ste and self.mask_decay_weight != 0.0:
      raise ValueError("SR-STE only works with non-decaying mask. Set mask_decay_weight=0.")
    if self.sparse_ste and self.structure_decay:
      raise ValueError(
        "SR-STE only works with non-decaying sparse structure. Set structure_decay=False."
      )
    if self.offset < 0:
      raise AssertionError(f"Offset must be positive (got {self.offset}).")


@enum.unique
class SparsityOrder(str, enum.Enum):
  """Axis the N:M groups run along: `C` columns (a weight's reduction dim), `R` rows."""

  C = "C"
  R = "R"


def _check_prune_rate(kind: str, prune_rate, want_tuple: bool) -> None:
  if prune_rate is None:
    return
  if want_tuple and not isinstance(prune_rate, tuple):
    raise AssertionError(
      f"Prune rate must be either None for no pruning or a Tuple[int, int] for N:M "
      f"structured sparsity; got {prune_rate!r} with sparsity_type={kind}."
    )
  if not want_tuple and not isinstance(prune_rate, float):
    raise AssertionError(
      f"Prune rate must be either None or float for unstructured sparsity; got "
      f"{prune_rate!r} with sparsity_type={kind}."
    )


@dataclasses.dataclass
class SparsityHParams:
  """A layer's sparsity configuration (Pax's `sparsity` field).

  Attributes:
    sparsity_type: SparsityType.
    weight_params: WeightSparsityParams; None leaves weights dense.
    mode: Schedule (sparsity_modes); InferenceMode creates no mask variables.
    score: SparsityScore used to rank weights.
    sparsified_layers: Layer indices to prune (None: all) for layers that pass
      layer_idx to sparsifiy.
    polynomial_decay_schedule: Ramp of the unstructured prune rate.
    order: SparsityOrder of the N:M groups.
    track_sad_metric: Keep `sparse_architecture_divergence`, the fraction of
      mask entries that changed at the last update (arXiv:2102.04010).
    topk_estimator_type: None, 'BINARY_MASK' or 'PROB_MASK': learn the N:M mask
      from a trainable `w_mask` instead of weight magnitudes.
    channelwise_pruning_dim: Axis of the channels channel-wise pruning drops.
    block_size: > 0 scores N:M groups of blocks of this many weights (sum |w|).
  """

  sparsity_type: SparsityType = SparsityType.STRUCTURED_NM
  weight_params: WeightSparsityParams | None = None
  mode: BaseSparsityScheduleMode = dataclasses.field(default_factory=InferenceMode)
  score: SparsityScore = SparsityScore.MAGNITUDE
  sparsified_layers: list[int] | None = None
  polynomial_decay_schedule: PolynomialDecayParams | None = None
  order: SparsityOrder = SparsityOrder.C
  track_sad_metric: bool = False
  topk_estimator_type: str | None = None
  channelwise_pruning_dim: int = -1
  block_size: int = 0

  def __post_init__(self):
    wp = self.weight_params
    if wp is None:
      return
    kind = self.sparsity_type
    if kind == SparsityType.STRUCTURED_NM:
      _check_prune_rate(kind, wp.prune_rate, want_tuple=True)
    elif kind in (SparsityType.UNSTRUCTURED, SparsityType.CHANNELWISE_PRUNING):
      _check_prune_rate(kind, wp.prune_rate, want_tuple=False)
      if wp.sparse_ste:
        raise ValueError(
          "SR-STE only works with structured sparsity; use sparsity_type=STRUCTURED_NM "
          "or sparse_ste=False."
        )
    else:
      raise AssertionError(
        f"Unrecognized sparsity type {kind}; use one of {[t.value for t in SparsityType]}."
      )
    if self.order not in ("C", "R"):
      raise ValueError(f"Index order {self.order} not supported; use 'C' or 'R'.")
    if self.block_size != 0:
      if self.block_size < 0:
        raise AssertionError(f"Block size must be positive (got {self.block_size}).")
      if kind != SparsityType.STRUCTURED_NM:
        raise ValueError(
          f"Block size {self.block_size} not supported for unstructured sparsity; "
          "block scoring applies to N:M sparsity only."
        )
