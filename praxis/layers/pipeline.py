"""Pipeline parallelism: Pax's `LayerwiseShardablePipelined`, a GPipe schedule over a stage axis.

    pipe = pax_fiddle.Config(
        LayerwiseShardablePipelined, name='pipeline', num_stages=4, num_microbatches=8,
        single_stage_body=pax_fiddle.Config(StackedTransformer, num_layers=2, ...))
    y = layer.apply(variables, x, paddings)     # = stage_3(stage_2(stage_1(stage_0(x))))

The body is one stage's layer; the pipeline holds `num_stages` copies of its weights stacked in
a leading dim (`pipeline/body/<the body's names>`, shape [num_stages, ...], logical axis
"stage"), so a sharding rule that maps "stage" to a mesh axis puts each stage's weights on its
own devices, and XLA's SPMD partitioner turns the shift between stages into a
collective-permute.

Schedule. The batch is split into M microbatches (Pax's split: microbatch m holds rows m, m + M,
m + 2M, ...). Iteration t = 0 .. M + S - 2 runs all S stages at once (vmap over the stage
dim): stage 0 takes microbatch t, stage s > 0 takes what stage s - 1 produced at t - 1, and the
last stage's result at t is microbatch t - (S - 1) of the output. Stage s is idle (a "bubble")
when t - s lies outside [0, M): the bubble fraction of the loop is (S - 1) / (M + S - 1).

Bubbles never change the result: their inputs are zeros (NaNs with
`polluting_bubbles_with_nan`, a test aid), their outputs are never read, and their weights are
behind `stop_gradient`, so even NaN bubbles leave gradients finite. Their aux losses and
summaries are zeroed.

Body contract: `body(x, *broadcast_inputs, **broadcast_kwargs) -> y` with y shaped like x.
Array arguments that have the batch dim are microbatched along with x (paddings, segment ids);
other arguments (Python values such as `deterministic`) reach every stage unchanged.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis.layers import checkpoint_policy as cp
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes


# Collections the stages write, one slice per stage (and per loop iteration, see _Iteration).
_PER_STAGE = (
  base_layer.PARAMS,
  base_layer.NON_TRAINABLE,
  base_layer.SUMMARIES,
  base_layer.AUX_LOSS,
  base_layer.INTERMEDIATES,
)
# The BaseLayer fields a child inherits (BaseLayer.copy_base_hparams), passed down the wrappers.
_INHERITED = (
  "dtype",
  "fprop_dtype",
  "params_init",
  "skip_lp_regularization",
  "ici_mesh_shape",
  "dcn_mesh_shape",
  "mesh_axis_names",
  "contiguous_submeshes",
)
_RNGS = {base_layer.PARAMS: True, "dropout": True, base_layer.RANDOM: True}
# What a bubble must not contribute.
_OUTPUT_COLLECTIONS = [base_layer.SUMMARIES, base_layer.AUX_LOSS, base_layer.INTERMEDIATES]


class _Stage(base_layer.BaseLayer):
  """One stage: the body, with its weights frozen and its outputs zeroed on bubble iterations."""

  body_tpl: Any = base_hyperparams.template_field(None)
  static_kwargs: tuple[tuple[str, Any], ...] = ()

  def setup(self):
    self.sub = self.create_child(self.body_tpl)
    # The body's variables live in this scope: `pipeline/body/<name>`, not `.../sub/<name>`.
    nn.share_scope(self, self.sub)

  def __call__(self, valid: jax.Array, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]):
    static = dict(self.static_kwargs)

    def run(module, x, args, kwargs):
      return module(x, *args, **kwargs, **static)

    if not self.is_initializing():
      # jnp.where(valid, w, stop_gradient(w)) is w forward; backward it passes no gradient on a
      # bubble, where the body saw zeros or NaNs.
      run = nn.map_variables(
        run,
        base_layer.PARAMS,
        trans_in_fn=lambda tree: jax.tree.map(
          lambda w: jnp.where(valid, w, jax.lax.stop_gradient(w)), tree
        ),
      )
      run = nn.map_variables(
        run,
        _OUTPUT_COLLECTIONS,
        mutable=True,
        trans_out_fn=lambda tree: jax.tree.map(
          lambda v: jnp.where(valid, v, jnp.zeros_like(v)), tree
        ),
      )
    return run(self.sub, x, args, kwargs)


class _Iteration(base_layer.BaseLayer):
  """One loop iteration: every stage runs once, then the results shift one stage on.

  Slot k = r * M + m is microbatch m's pass through layer group r (r < circular_repeat); stage s
  works on slot t - s at iteration t. Stage 0 reads microbatch m from the inputs in its first
  pass and from the last stage's output of its previous pass afterwards (kept in the carry's
  `returning`, one entry per microbatch, only when circular_repeat > 1; it is ready in time
  when M >= S). Each iteration emits the last stage's output; the caller keeps the final ones.
  """

  body_tpl: Any = base_hyperparams.template_field(None)
  num_stages: int = 1
  num_microbatches: int = 1
  circular_repeat: int = 1
  static_kwargs: tuple[tuple[str, Any], ...] = ()
  polluting_bubbles_with_nan: bool = False
  stage_axis: str | None = "stage"

  def setup(self):
    stages = nn.vmap(
      _Stage,
      in_axes=0,
      variable_axes={name: 0 for name in _PER_STAGE},
      split_rngs=_RNGS,
      metadata_params={nn.PARTITION_NAME: self.stage_axis},
    )
    self.stages = stages(
      body_tpl=self.body_tpl, static_kwargs=self.static_kwargs, **_inherited(self)
    )
    nn.share_scope(self, self.stages)

  def _run_stages(self, slot, valid, x, args, kwargs):
    """The stages on their inputs; with circular repeats, each with its slot's layer group."""
    repeats = self.circular_repeat
    if repeats == 1:
      return self.stages(valid, x, args, kwargs)

    def run(module, *a):
      return module(*a)

    if self.is_initializing():
      # Creates the [circular_repeat, num_stages, ...] weights: each group sees the same inputs.
      grouped = nn.vmap(
        run,
        in_axes=0,
        variable_axes={base_layer.PARAMS: 0, base_layer.NON_TRAINABLE: 0},
        split_rngs=_RNGS,
        metadata_params={nn.PARTITION_NAME: None},
      )
      copies = jax.tree.map(
        lambda a: jnp.broadcast_to(a, (repeats,) + a.shape), (valid, x, args, kwargs)
      )
      return jax.tree.map(lambda y: y[0], grouped(self.stages, *copies))
    group = jnp.clip(slot // self.num_microbatches, 0, repeats - 1)  # [S]
    stage = jnp.arange(self.num_stages)
    picked = nn.map_variables(
      run,
      [base_layer.PARAMS, base_layer.NON_TRAINABLE],
      trans_in_fn=lambda tree: jax.tree.map(lambda w: w[group, stage], tree),
    )
    return picked(self.stages, valid, x, args, kwargs)

  def __call__(self, carry: dict[str, Any], t: jax.Array, consts: dict[str, Any]):
    """carry: `state` (each stage's last output, [S, mb, ...]) and, for circular repeats,
    `returning` ([M, mb, ...]). consts: the microbatched `inputs`, `args` and `kwargs`
    ([M, mb, ...] leaves). Returns the new carry and the last stage's output.
    """
    num_stages, num_mb = self.num_stages, self.num_microbatches
    num_slots = num_mb * self.circular_repeat
    slot = t - jnp.arange(num_stages)  # The slot each stage works on.
    valid = (slot >= 0) & (slot < num_slots)
    mb = jnp.mod(slot, num_mb)
    fill = jnp.nan if self.polluting_bubbles_with_nan else 0.0
    returning = carry.get("returning")

    def stage_inputs(microbatches, returned, state):
      if returned is not None:
        microbatches = jnp.where(t < num_mb, microbatches, returned)  # First pass, or later.
      first = jax.lax.dynamic_index_in_dim(microbatches, mb[0], 0, keepdims=True)
      x = jnp.concatenate([first, state[:-1]], axis=0)  # Shift by one stage.
      mask = valid.reshape((num_stages,) + (1,) * (x.ndim - 1))
      return jnp.where(mask, x, jnp.asarray(fill, x.dtype))

    def per_stage(microbatches):
      return jnp.take(microbatches, mb, axis=0)

    if returning is None:
      x = jax.tree.map(lambda m, st: stage_inputs(m, None, st), consts["inputs"], carry["state"])
    else:
      x = jax.tree.map(stage_inputs, consts["inputs"], returning, carry["state"])
    x = checkpoint_name(x, "iteration_input")
    args = jax.tree.map(per_stage, consts["args"])
    kwargs = jax.tree.map(per_stage, consts["kwargs"])
    out = self._run_stages(slot, valid, x, args, kwargs)

    last = jax.tree.map(lambda y: y[-1], out)
    if returning is None:
      return {"state": out}, last
    # The last stage finished slot t - (S - 1), if that is one; stage 0 takes it back later.
    done = t - (num_stages - 1)
    is_done = (done >= 0) & (done < num_slots)
    index = jnp.mod(done, num_mb)

    def keep(buffer, y):
      old = jax.lax.dynamic_index_in_dim(buffer, index, 0, keepdims=False)
      return jax.lax.dynamic_update_index_in_dim(buffer, jnp.where(is_done, y, old), index, 0)

    return {"state": out, "returning": jax.tree.map(keep, returning, last)}, last


class LayerwiseShardablePipelined(base_layer.BaseLayer):
  """Runs `num_stages` copies of `single_stage_body` as a pipeline (see the module docstring).

  Attributes:
    num_stages: number of stages; every weight of the body gets a leading [num_stages] dim.
    single_stage_body: template of one stage's layer.
    num_microbatches: split the batch into this many microbatches. Set this or
      `microbatch_size`; with neither, the inputs are taken as already microbatched
      ([num_microbatches, microbatch_size, ...]) and so are the outputs.
    microbatch_size: rows per microbatch (the other way to say the split).
    polluting_bubbles_with_nan: feed NaNs instead of zeros to bubble iterations (a test that the
      result does not depend on them).
    checkpoint_policy: what each loop iteration keeps for the backward pass; the default keeps
      only the iteration's inputs (the stages' activations are recomputed).
    stream_io, pipeline_broadcast_inputs: Pax's transfer optimisations, accepted so that Pax's
      configs build; the results do not depend on them, and here the inputs and broadcast
      arguments always start replicated over the stages.
    weight_split_dims_mapping.stages: the mesh axis of the weights' leading [num_stages] dim
      (Pax's `WeightSharding.stages`, e.g. ['stage']); left at (None,), the logical axis name
      'stage', which the experiment's rules map.
  """

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Pax's: `stages`, how the weights' leading [num_stages] dim is split."""

    stages: base_layer.SplitDimsMapping = (None,)

  num_stages: int = 1
  single_stage_body: Any = base_hyperparams.template_field(None)
  num_microbatches: int | None = None
  microbatch_size: int | None = None
  stream_io: bool = False
  polluting_bubbles_with_nan: bool = False
  pipeline_broadcast_inputs: bool = False
  checkpoint_policy: cp.AutodiffCheckpointType = cp.AutodiffCheckpointType.SAVE_ITERATION_INPUT

  def _stage_axis(self) -> str | None:
    """The axis name the vmap gives the weights' [num_stages] dim."""
    stages = getattr(self.weight_split_dims_mapping, "stages", (None,))
    if stages is None or all(axis is None for axis in stages):
      return "stage"
    if len(stages) != 1 or not isinstance(stages[0], str):
      raise ValueError(
        f"{self.name}: weight_split_dims_mapping.stages names the mesh axis of the one "
        f"[num_stages] dim, e.g. ['stage']; got {stages!r}."
      )
    return stages[0]

  def _circular_repeat(self) -> int:
    return 1

  def _split(self, inputs: Any) -> tuple[int | None, int]:
    """(batch size, number of microbatches) of `inputs`; batch None: already microbatched."""
    batch = jax.tree.leaves(inputs)[0].shape[0]
    if self.num_microbatches is not None and self.microbatch_size is not None:
      raise ValueError(f"{self.name}: set num_microbatches or microbatch_size, not both.")
    if self.num_microbatches is None and self.microbatch_size is None:
      return None, batch
    num_mb = self.num_microbatches or batch // self.microbatch_size
    if num_mb < 1 or batch % num_mb:
      raise ValueError(
        f"{self.name}: a batch of {batch} rows does not split into "
        f"{self.num_microbatches or '?'} microbatches of {self.microbatch_size or '?'} rows."
      )
    return batch, num_mb

  @nn.compact
  def __call__(self, inputs: Any, *broadcast_inputs: Any, **broadcast_kwargs: Any) -> Any:
    if self.num_stages < 1:
      raise ValueError(f"{self.name}: num_stages must be >= 1, got {self.num_stages}.")
    if self.single_stage_body is None:
      raise ValueError(f"{self.name}: set single_stage_body, the template of one stage.")
    if self.is_initializing():
      # The weights do not depend on the batch: init takes any batch (the trainer's has one
      # row) as a single microbatch.
      batch, num_mb = jax.tree.leaves(inputs)[0].shape[0], 1
    else:
      batch, num_mb = self._split(inputs)

    def is_batched(x):
      return (
        isinstance(x, jax.Array | jnp.ndarray) and x.ndim >= 1 and x.shape[0] == (batch or num_mb)
      )

    def to_microbatches(x):
      if batch is None:
        return x
      # Pax's split: [batch // M, M, ...] transposed, so microbatch m holds rows m, m + M, ...
      x = x.reshape((batch // num_mb, num_mb) + x.shape[1:])
      return jnp.swapaxes(x, 0, 1)

    def from_microbatches(x):
      if batch is None:
        return x
      return jnp.swapaxes(x, 0, 1).reshape((batch,) + x.shape[2:])

    static = {k: v for k, v in broadcast_kwargs.items() if not _has_arrays(v)}
    kwargs = {k: v for k, v in broadcast_kwargs.items() if k not in static}
    for arg in jax.tree.leaves((broadcast_inputs, kwargs)):
      if not is_batched(arg):
        raise ValueError(
          f"{self.name}: every array argument of the body needs the batch dim "
          f"({batch or num_mb}) first, to be microbatched; got shape {jnp.shape(arg)}."
        )
    consts = {
      "inputs": jax.tree.map(to_microbatches, inputs),
      "args": jax.tree.map(to_microbatches, tuple(broadcast_inputs)),
      "kwargs": jax.tree.map(to_microbatches, kwargs),
    }
    repeats = self._circular_repeat()
    if repeats > 1 and num_mb < self.num_stages and not self.is_initializing():
      raise ValueError(
        f"{self.name}: a circular pipeline needs at least as many microbatches as stages "
        f"(a microbatch's next pass starts when its last one left the last stage); got "
        f"{num_mb} microbatches for {self.num_stages} stages."
      )
    num_iterations = num_mb * repeats + self.num_stages - 1
    iteration = nn.remat(
      _Iteration, policy=cp.custom_policy(self.checkpoint_policy), prevent_cse=False
    )
    loop = nn.scan(
      iteration,
      variable_broadcast=[base_layer.PARAMS, base_layer.NON_TRAINABLE],
      variable_axes={name: 0 for name in _OUTPUT_COLLECTIONS},
      split_rngs={**_RNGS, base_layer.PARAMS: False},
      in_axes=(0, nn.broadcast),
      length=num_iterations,
    )
    body = loop(
      body_tpl=self.single_stage_body,
      num_stages=self.num_stages,
      num_microbatches=num_mb,
      circular_repeat=repeats,
      static_kwargs=tuple(sorted(static.items())),
      polluting_bubbles_with_nan=self.polluting_bubbles_with_nan,
      stage_axis=self._stage_axis(),
      name="body",
      **_inherited(self),
    )
    first = jax.tree.map(lambda x: x[0], consts["inputs"])
    carry = {
      "state": jax.tree.map(lambda x: jnp.zeros((self.num_stages,) + x.shape, x.dtype), first)
    }
    if repeats > 1:
      carry["returning"] = jax.tree.map(jnp.zeros_like, consts["inputs"])
    steps = jnp.arange(num_iterations, dtype=jnp.int32)
    _, last = body(carry, steps, consts)  # [iterations, mb, ...]: the last stage's outputs.
    # The last M iterations finish the microbatches' final passes, in order.
    return jax.tree.map(lambda y: from_microbatches(y[-num_mb:]), last)


class CircularLayerwiseShardablePipelined(LayerwiseShardablePipelined):
  """A circular pipeline: stage s holds layer groups s, s + S, s + 2S, ... (Pax's class).

  There are `circular_repeat * num_stages` groups; a microbatch passes through stages 0..S-1
  `circular_repeat` times, taking group r * S + s at stage s in pass r. Weights get leading
  [circular_repeat, num_stages] dims (`circular_repeat` unsharded). With M microbatches the loop
  runs M * circular_repeat + S - 1 iterations, so the bubble fraction falls to
  (S - 1) / (M * circular_repeat + S - 1). Needs M >= S. Pax's `share_weights` is not provided.

  Attributes:
    circular_repeat: passes of each microbatch through the stages.
    enable_async_circular_transfer: accepted for Pax's configs. Here the last stage's results
      always wait in a per-microbatch buffer until stage 0 takes them (the data flow of Pax's
      delayed transfer), so the flag changes nothing.
  """

  circular_repeat: int = 1
  enable_async_circular_transfer: bool = True

  def _circular_repeat(self) -> int:
    if self.circular_repeat < 1:
      raise ValueError(f"{self.name}: circular_repeat must be >= 1, got {self.circular_repeat}.")
    return self.circular_repeat


class PipelinedTransformer(base_layer.BaseLayer):
  """Pax's pipelined transformer stack: `num_pipeline_stages` copies of `pipeline_stage`.

  Call it like the StackedTransformer it replaces in a TransformerLm; its weights read
  `<name>/pipeline/body/<the stage's names>` with leading [num_pipeline_stages] dims
  (circular: [circular_repeat, num_pipeline_stages]). A stage holding L layers of a model with
  N = L x stages x circular_repeat layers runs layer s * L + i of the unpipelined stack as its
  layer i (circular: layer (r * stages + s) * L + i), which `unstack_stages` maps back.

  Attributes:
    pipeline_stage: template of one stage (a StackedTransformer of a few layers).
    circular_repeat: 1 for a GPipe schedule, more for a circular one.
    num_pipeline_stages: number of stages.
    num_pipeline_microbatches: microbatches (or set pipeline_microbatch_size).
    pipeline_microbatch_size: rows per microbatch.
    stream_io, pipeline_broadcast_inputs, enable_async_circular_transfer: Pax's transfer
      optimisations, accepted so that Pax's configs build; the results do not depend on them,
      and here the inputs and broadcast arguments always start replicated over the stages.
    checkpoint_policy: what each loop iteration keeps for the backward pass.
  """

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Pax's: `stages`, how the weights' leading [num_stages] dim is split (to the pipeline)."""

    stages: base_layer.SplitDimsMapping = (None,)

  pipeline_stage: Any = base_hyperparams.template_field(None)
  circular_repeat: int = 1
  num_pipeline_stages: int | None = None
  num_pipeline_microbatches: int | None = None
  pipeline_microbatch_size: int | None = None
  stream_io: bool = False
  pipeline_broadcast_inputs: bool = False
  enable_async_circular_transfer: bool = True
  checkpoint_policy: cp.AutodiffCheckpointType = cp.AutodiffCheckpointType.SAVE_ITERATION_INPUT

  def setup(self):
    if not self.num_pipeline_stages or self.num_pipeline_stages < 1:
      raise ValueError(f"{self.name}: set num_pipeline_stages (>= 1).")
    if self.pipeline_stage is None:
      raise ValueError(f"{self.name}: set pipeline_stage, the template of one stage.")
    fields = dict(
      num_stages=self.num_pipeline_stages,
      single_stage_body=self.pipeline_stage,
      num_microbatches=self.num_pipeline_microbatches,
      microbatch_size=self.pipeline_microbatch_size,
      checkpoint_policy=self.checkpoint_policy,
      stream_io=self.stream_io,
      pipeline_broadcast_inputs=self.pipeline_broadcast_inputs,
    )
    if self.circular_repeat == 1:
      cfg = base_hyperparams.Config(LayerwiseShardablePipelined, **fields)
    else:
      cfg = base_hyperparams.Config(
        CircularLayerwiseShardablePipelined, circular_repeat=self.circular_repeat, **fields
      )
    cfg.weight_split_dims_mapping.stages = self.weight_split_dims_mapping.stages
    self.create_child("pipeline", cfg)

  def __call__(self, inputs: jax.Array, *args: Any, **kwargs: Any) -> jax.Array:
    """As the stage's __call__ (inputs [B, T, D], paddings, ...); returns [B, T, D]."""
    return self.pipeline(inputs, *args, **kwargs)


def unstack_stages(stage_params: Any, layers_per_stage: int, circular_repeat: int = 1) -> Any:
  """A PipelinedTransformer's `pipeline/body` weights as the unpipelined stack's `x_layers_<k>`.

  `stage_params` is `{"x_layers_<i>": tree with leading [stages] (circular: [repeat, stages])
  dims}` for i < layers_per_stage; the result is `{"x_layers_<k>": tree}` for the
  stages x repeat x layers_per_stage layers of the StackedTransformer that computes the same
  function, so a pipelined checkpoint restores into an unpipelined model (and back, by stacking).
  """
  out = {}
  for i in range(layers_per_stage):
    stacked = stage_params[f"x_layers_{i}"]
    if circular_repeat == 1:
      stacked = jax.tree.map(lambda w: w[None], stacked)
    repeats, stages = jax.tree.leaves(stacked)[0].shape[:2]
    for r in range(repeats):
      for s in range(stages):
        layer = (r * stages + s) * layers_per_stage + i
        out[f"x_layers_{layer}"] = jax.tree.map(lambda w, r=r, s=s: w[r, s], stacked)
  return out


def _inherited(layer: base_layer.BaseLayer) -> dict[str, Any]:
  return {name: getattr(layer, name) for name in _INHERITED}


def _has_arrays(value: Any) -> bool:
  return any(isinstance(x, jax.Array | jnp.ndarray) for x in jax.tree.leaves(value))


# Pax's module-level names for the types and variable collections this module's API uses.
AUX_LOSS = base_layer.AUX_LOSS
AutodiffCheckpointType = cp.AutodiffCheckpointType
HYPER_PARAMS = base_layer.HYPER_PARAMS
INTERMEDIATES = base_layer.INTERMEDIATES
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
NON_TRAINABLE = base_layer.NON_TRAINABLE
NestedJTensor = pytypes.NestedJTensor
NestedMap = py_utils.NestedMap
PARAMS = base_layer.PARAMS
RANDOM = base_layer.RANDOM
SUMMARIES = base_layer.SUMMARIES
SplitDimsMapping = pytypes.SplitDimsMapping
