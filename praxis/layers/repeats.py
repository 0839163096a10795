"""Repeat: one layer applied `x_times` in sequence with `nn.scan`, each iteration rematted.

    rep = Repeat.HParams(sub_tpl=StackedTransformer.HParams(...), x_times=12,
                         checkpoint_policy=AutodiffCheckpointType.SAVE_OUT_PROJ).Instantiate()
    y = rep.apply(variables, x, paddings)            # sub(...sub(sub(x, paddings), paddings)...)

Why scan: the layer is traced and compiled once instead of x_times times, and with remat
(`nn.remat(..., policy=...)`) the backward pass keeps only what the policy names (see
checkpoint_policy), so activation memory does not grow with the depth.

Variables. Every collection the sub-layer writes gets a leading [x_times] dim: "params" (their
logical axes gain the name "layers" in front, so the sharding rules can place it),
"non_trainable" (per-iteration state such as sparsity masks and step counters),
"decoder_cache" (each iteration has its own cache), "summaries", "aux_loss", "intermediates".
Each iteration draws its own "params", "dropout" and "random" rngs.

Contract of the sub-layer: `sub(carry, *args, **kwargs) -> carry` (same shape and dtype as
carry) and, for decoding, `sub.extend_step(carry, *args, **kwargs) -> carry`; args/kwargs are
passed unchanged to every iteration (`deterministic` only when the caller gives it, as a static
flag). `quantize_weight()` / `quantized_partition_specs()` run the sub-layer's own in every
iteration and stack the results under "sub", as Pax's Repeat does.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
from jax.ad_checkpoint import checkpoint_name

from praxis import base_hyperparams
from praxis import base_layer
from praxis.layers import checkpoint_policy as cp
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes

# Collections that are stacked along the repeat dim (one slice per iteration).
_STACKED_COLLECTIONS = (
  "params",
  base_layer.NON_TRAINABLE,
  "decoder_cache",
  base_layer.SUMMARIES,
  base_layer.AUX_LOSS,
  "intermediates",
)


class _Iteration(base_layer.BaseLayer):
  """One scan iteration: builds the sub-layer and adapts it to scan's (carry, x) -> (carry, y).

  Every method takes (carry, packed (args, kwargs), flag) so that one `in_axes` fits all under
  nn.scan; the flag (deterministic, or None when the caller gave none) is a static argument of
  the remat.
  """

  sub_tpl: base_hyperparams.Config = base_hyperparams.template_field(None)
  carry_all_args: bool = False
  stack_outputs: bool = False

  def setup(self):
    self.sub = self.create_child(self.sub_tpl)
    # The sub-layer's variables live in this wrapper's scope: weights read `repeat.sub.<...>`,
    # not `repeat.sub.sub.<...>`.
    nn.share_scope(self, self.sub)

  def __call__(
    self, carry: jax.Array, packed: tuple[tuple[Any, ...], dict[str, Any]], deterministic
  ) -> tuple[jax.Array, Any]:
    carry = checkpoint_name(carry, "iteration_input")
    args, kwargs = packed
    if deterministic is not None:
      kwargs = {**kwargs, "deterministic": deterministic}
    if self.carry_all_args:
      # carry is the tuple of every positional argument; the sub-layer returns the same tuple.
      out = self.sub(*carry, **kwargs)
      out = out if isinstance(out, tuple) else (out,)
      if len(out) != len(carry):
        raise ValueError(
          f"Repeat with positional_args_as_scan_carry: the sub-layer returned {len(out)} "
          f"values for {len(carry)} positional args; it must return one per argument."
        )
      return out, (out if self.stack_outputs else None)
    out = self.sub(carry, *args, **kwargs)
    return out, (out if self.stack_outputs else None)

  def extend_step(self, carry: jax.Array, packed, unused_flag) -> tuple[jax.Array, None]:
    del unused_flag
    args, kwargs = packed
    return self.sub.extend_step(carry, *args, **kwargs), None

  def quantize_weight(self, carry, packed, unused_flag) -> tuple[Any, Any]:
    del packed, unused_flag
    return carry, self.sub.quantize_weight()

  def quantized_partition_specs(self, carry, packed, unused_flag) -> tuple[Any, Any]:
    del packed, unused_flag
    return carry, self.sub.quantized_partition_specs()


class Repeat(base_layer.BaseLayer):
  """Applies the sub-layer `x_times` with nn.scan + nn.remat (see the module docstring).

  The child is named `sub`, so weights read `repeat.sub.<the sub-layer's names>` from a parent
  that calls this layer `repeat`, each with a leading [x_times] dim.

  Attributes:
    sub_tpl: template of the repeated layer.
    x_times: number of repetitions.
    checkpoint_policy: what each iteration keeps for the backward pass (AutodiffCheckpointType).
    unroll: iterations per scan loop step (XLA's unroll); 1 keeps one compiled body.
    positional_args_as_scan_carry: every positional argument is carried from iteration to
      iteration (the sub-layer returns all of them, as a tuple), not only the first.
    collect_intermediate_outputs: sow the stacked [x_times, ...] per-iteration outputs as
      "intermediates" / "repeat_intermediates" (read with capture_intermediates).
    return_intermediate_outputs: return those stacked outputs instead of the last one.
  """

  sub_tpl: base_hyperparams.Config = base_hyperparams.template_field(None)
  x_times: int = 0
  checkpoint_policy: cp.AutodiffCheckpointType = cp.AutodiffCheckpointType.SAVE_NOTHING
  unroll: int = 1
  positional_args_as_scan_carry: bool = False
  collect_intermediate_outputs: bool = False
  return_intermediate_outputs: bool = False

  def setup(self):
    if self.x_times <= 0:
      raise ValueError(f"Repeat needs x_times >= 1, got {self.x_times}.")
    if self.sub_tpl is None:
      raise ValueError("Repeat needs sub_tpl, the template of the layer to repeat.")
    # Argument 3 of _Iteration.__call__ (self is 0) is the Python bool `deterministic`: static,
    # so dropout is traced in or out rather than switched at run time.
    rematted = nn.remat(
      _Iteration,
      policy=cp.custom_policy(self.checkpoint_policy),
      prevent_cse=False,
      static_argnums=(3,),
    )
    scanned = nn.scan(
      rematted,
      variable_axes={name: 0 for name in _STACKED_COLLECTIONS},
      # Each iteration its own draws: "random" is Pax's stream (Dropout prefers it).
      split_rngs={"params": True, "dropout": True, base_layer.RANDOM: True},
      in_axes=(nn.broadcast, nn.broadcast),
      length=self.x_times,
      unroll=self.unroll,
      metadata_params={nn.PARTITION_NAME: "layers"},
      methods=["__call__", "extend_step", "quantize_weight", "quantized_partition_specs"],
    )
    sub_tpl = self.sub_tpl.clone()
    if issubclass(sub_tpl.__fn_or_cls__, base_layer.BaseLayer):
      sub_tpl.dtype, sub_tpl.fprop_dtype = self.dtype, self.fprop_dtype
    self.sub = scanned(
      sub_tpl=sub_tpl,
      carry_all_args=self.positional_args_as_scan_carry,
      stack_outputs=self.collect_intermediate_outputs or self.return_intermediate_outputs,
      dtype=self.dtype,
      fprop_dtype=self.fprop_dtype,
    )

  def __call__(self, inputs: jax.Array, *args: Any, **kwargs: Any) -> Any:
    """inputs: the carry (e.g. [B, T, D]); args / kwargs go unchanged to every iteration.

    With positional_args_as_scan_carry, (inputs, *args) is the carry and is returned as a tuple.
    """
    deterministic = kwargs.pop("deterministic", None)
    if self.positional_args_as_scan_carry:
      outputs, stacked = self.sub((inputs, *args), ((), kwargs), deterministic)
      outputs = outputs if len(outputs) > 1 else outputs[0]
    else:
      outputs, stacked = self.sub(inputs, (tuple(args), kwargs), deterministic)
    if self.return_intermediate_outputs:
      return stacked
    if self.collect_intermediate_outputs:
      self.sow(base_layer.INTERMEDIATES, "repeat_intermediates", stacked)
    return outputs

  def extend_step(self, step_inputs: jax.Array, *args: Any, **kwargs: Any) -> jax.Array:
    """One decoding step through every iteration (apply with mutable=["decoder_cache"])."""
    outputs, _ = self.sub.extend_step(step_inputs, (tuple(args), kwargs), None)
    return outputs

  def quantize_weight(self) -> Any:
    """{collection: {'sub': the sub-layer's quantize_weight(), stacked [x_times, ...]}}."""
    _, stacked = self.sub.quantize_weight(None, ((), {}), None)
    return {col: {"sub": tree} for col, tree in stacked.items()}

  def quantized_partition_specs(self) -> Any:
    """As quantize_weight, with each PartitionSpec given a leading None for the layer dim."""
    _, specs = self.sub.quantized_partition_specs(None, ((), {}), None)

    def add_layer_dim(x):
      if isinstance(x, base_layer.BoxedPartitionSpec):
        return base_layer.BoxedPartitionSpec(meta=jax.sharding.PartitionSpec(None, *x.meta))
      return x

    specs = jax.tree.map(
      add_layer_dim, specs, is_leaf=lambda x: isinstance(x, base_layer.BoxedPartitionSpec)
    )
    return {col: {"sub": tree} for col, tree in specs.items()}


# Pax's module-level names for the types and variable collections this module's API uses.
AUX_LOSS = base_layer.AUX_LOSS
AutodiffCheckpointType = cp.AutodiffCheckpointType
DECODE_CACHE = base_layer.DECODE_CACHE
HYPER_PARAMS = base_layer.HYPER_PARAMS
INTERMEDIATES = base_layer.INTERMEDIATES
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
NON_TRAINABLE = base_layer.NON_TRAINABLE
NestedJTensor = pytypes.NestedJTensor
NestedMap = py_utils.NestedMap
PARAMS = base_layer.PARAMS
PREFIX_DECODE_CACHE = base_layer.PREFIX_DECODE_CACHE
RANDOM = base_layer.RANDOM
SUMMARIES = base_layer.SUMMARIES
SplitDimsMapping = pytypes.SplitDimsMapping
