"""The layer library's LM train step against an independent minimal GPT of the same shape.

    ./bazelw run //paxml/benchmarks:lm_step -- --seq_lens=512 --dtypes=float32 --modes=unrolled
    ./bazelw run //paxml/benchmarks:lm_step -- --ci     # seconds: a 2 x 64 model

"ours" is the model of `exp.task()` for a `TransformerLmSpmdAdam` with the shape below
(unpacked input, no dropout), applied through `LanguageModel.__call__`; "minimal" is
`minimal_gpt.MinimalGpt`, a conventional GPT in its own layout (one `wte[V, D]` table, `c_attn`,
a gathered label logit), with ours's initial weights mapped in, so both start from the same loss.
Each side is the same `optax.adam` step, jitted with the train state donated. `--caps` gives
rows with the attention and output logit caps of the experiment ("on") and without ("off").

What is measured, per (seq len, dtype, mode):
- step time: the sides take turns (`--repeats` rounds of `--steps` steps each); the minimum
  per-step time of each side is kept, since the machine is shared and noise only adds time.
  Both wall time and the process's CPU time (all its threads) are kept: on an oversubscribed
  machine the CPU time is the steadier of the two;
- XLA's static costs of the compiled step: flops, bytes accessed, temp (scratch) bytes. XLA
  counts a while-loop body once, so for the scanned stack the body's cost is recounted: the
  step is compiled again with `unroll=2`, body = cost(unroll 2) - cost(unroll 1), and
  total = cost(unroll 1) + (L - 1) * body;
- the two losses at the shared initial weights.

Modes: "unrolled" is StackedTransformer (no remat), the minimal GPT's structure; "scan" is the
experiments' StackedTransformerRepeated (nn.scan + remat under `--policy`). The minimal GPT is
always unrolled without remat, so the scan ratios show what scan + remat cost.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any, Callable

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from paxml.benchmarks import lm_setup
from paxml.benchmarks import minimal_gpt
from paxml.tasks.lm import model_params
from praxis.layers import checkpoint_policy

_SEQ_LENS = flags.DEFINE_list("seq_lens", ["512", "2048"], "Sequence lengths.")
_DTYPES = flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Activation dtypes.")
_MODES = flags.DEFINE_list("modes", ["unrolled", "scan"], "unrolled and/or scan (+ remat).")
_POLICY = flags.DEFINE_string("policy", "SAVE_NOTHING", "Remat policy of the scan mode.")
_TOKENS = flags.DEFINE_integer("tokens", 2048, "Tokens per step (batch = tokens / seq len).")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Alternating rounds; 0: static costs only.")
_STEPS = flags.DEFINE_integer("steps", 2, "Steps per side per round.")
_CAPS = flags.DEFINE_list("caps", ["off", "on"], "Rows without and/or with the logit caps.")
_CI = flags.DEFINE_bool("ci", False, "A 2 x 64 model at seq 32 in fp32 (the smoke test's size).")

FULL_SHAPE = minimal_gpt.GptShape(
  num_layers=4, model_dims=512, hidden_dims=2048, num_heads=8, vocab_size=32000
)
CI_SHAPE = minimal_gpt.GptShape(
  num_layers=2, model_dims=64, hidden_dims=256, num_heads=4, vocab_size=256
)


@dataclasses.dataclass
class Side:
  """One model's compiled step, its donated state and its static costs."""

  step: Callable[..., Any]
  state: Any
  batch: Any
  loss0: float
  costs: dict[str, float]
  best_s: float = math.inf
  best_cpu_s: float = math.inf


def with_caps(shape: minimal_gpt.GptShape, caps: bool) -> minimal_gpt.GptShape:
  """`shape` with the experiment's logit caps (GptShape's defaults), or with both turned off."""
  if caps:
    return shape
  return dataclasses.replace(shape, atten_logit_cap=0.0, softmax_cap_logits=0.0)


def experiment(shape: minimal_gpt.GptShape, mode: str, policy: str, unroll: int = 1) -> Any:
  """A TransformerLmSpmdAdam with `shape` (unpacked, no dropout)."""

  class Bench(model_params.TransformerLmSpmdAdam):
    NUM_LAYERS = shape.num_layers
    MODEL_DIMS = shape.model_dims
    HIDDEN_DIMS = shape.hidden_dims
    NUM_HEADS = shape.num_heads
    DIMS_PER_HEAD = shape.dims_per_head
    VOCAB_SIZE = shape.vocab_size
    ATTEN_LOGIT_CAP = shape.atten_logit_cap
    SOFTMAX_CAP_LOGITS = shape.softmax_cap_logits
    FPROP_DTYPE = shape.dtype
    PACKED_INPUT = False
    USE_REPEATED_LAYER = mode == "scan"
    CHECKPOINT_POLICY = checkpoint_policy.AutodiffCheckpointType[policy]  # Pax's enum, by name.

    def datasets(self):
      return []  # The benchmark feeds its own batches.

  return lm_setup.language_model(Bench(), unroll if mode == "scan" else None)


def unstack_layers(variables: dict, num_layers: int) -> dict:
  """A scanned stack's variables (repeat.sub.x_layers_0 with a leading [L]) -> x_layers_i."""
  lm = dict(variables["params"]["lm"])
  stacked = lm["transformer"]["repeat"]["sub"]["x_layers_0"]
  lm["transformer"] = {
    f"x_layers_{i}": jax.tree_util.tree_map(lambda x, i=i: x[i], stacked) for i in range(num_layers)
  }
  return {"params": {"lm": lm}}


def compile_costs(step: Callable[..., Any], state: Any, batch: Any):
  """(compiled step, {flops, bytes, temp}) of `jax.jit(step)` with the state donated."""
  compiled = jax.jit(step, donate_argnums=0).lower(state, batch).compile()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  costs = {
    "flops": float(cost.get("flops", 0.0)),
    "bytes": float(cost.get("bytes accessed", 0.0)),
    "temp": float(compiled.memory_analysis().temp_size_in_bytes),
  }
  return compiled, costs


def ours_side(shape, seq, batch, mode, policy) -> tuple[Side, dict]:
  """Our LanguageModel's step; also returns its initial weights in unrolled layout."""
  model = experiment(shape, mode, policy)
  variables = model.init(jax.random.PRNGKey(0), batch)
  loss_fn = lm_setup.lm_loss(model)
  step, opt = lm_setup.train_step(loss_fn)
  state = (variables, opt.init(variables))
  loss0 = float(jax.jit(loss_fn)(variables, batch))
  compiled, costs = compile_costs(step, state, batch)
  if mode == "scan":
    # XLA counts the loop body once: recount with the body's cost (module docstring).
    twice_step, _ = lm_setup.train_step(lm_setup.lm_loss(experiment(shape, mode, policy, 2)))
    _, twice = compile_costs(twice_step, state, batch)
    for key in ("flops", "bytes"):
      costs[key] += (shape.num_layers - 1) * (twice[key] - costs[key])
    unrolled = unstack_layers(variables, shape.num_layers)
  else:
    unrolled = variables
  return Side(compiled, state, batch, loss0, costs), unrolled


def minimal_side(shape, batch, ours_variables) -> Side:
  model = minimal_gpt.MinimalGpt(shape)
  # Copies: ours's state is donated, and with it any buffer the two trees would share.
  params = jax.tree_util.tree_map(
    jnp.copy, minimal_gpt.from_praxis(ours_variables, shape.num_layers)
  )
  args = (batch.ids, batch.labels, batch.weights)

  def loss_fn(p, b):
    return model.apply(p, *b)

  step, opt = lm_setup.train_step(loss_fn)
  state = (params, opt.init(params))
  loss0 = float(jax.jit(loss_fn)(params, args))
  compiled, costs = compile_costs(step, state, args)
  return Side(compiled, state, args, loss0, costs)


def time_alternating(sides: dict[str, Side], repeats: int, steps: int) -> None:
  """Sides take turns; each keeps its fastest per-step time (module docstring). repeats=0 runs
  nothing (static costs only; the times stay inf)."""
  if repeats <= 0:
    return
  for side in sides.values():  # warm up (first runs allocate)
    side.state, loss = side.step(side.state, side.batch)
    loss.block_until_ready()
  for _ in range(repeats):
    for side in sides.values():
      for _ in range(steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        side.state, loss = side.step(side.state, side.batch)
        loss.block_until_ready()
        side.best_s = min(side.best_s, time.perf_counter() - start)
        side.best_cpu_s = min(side.best_cpu_s, time.process_time() - start_cpu)


def compare(
  shape: minimal_gpt.GptShape,
  seq: int,
  mode: str,
  policy: str,
  tokens: int,
  repeats: int,
  steps: int,
) -> dict[str, float]:
  """One row: both sides' times, costs and initial losses, and ours / minimal ratios."""
  batch = lm_setup.make_batch(max(tokens // seq, 1), seq, shape.vocab_size)
  ours, ours_variables = ours_side(shape, seq, batch, mode, policy)
  minimal = minimal_side(shape, batch, ours_variables)
  time_alternating({"ours": ours, "minimal": minimal}, repeats, steps)
  row = {
    "ours_s": ours.best_s,
    "minimal_s": minimal.best_s,
    "time": ours.best_s / minimal.best_s,
    "cpu_time": ours.best_cpu_s / minimal.best_cpu_s,
    "ours_loss0": ours.loss0,
    "minimal_loss0": minimal.loss0,
  }
  for key in ("flops", "bytes", "temp"):
    row[f"ours_{key}"] = ours.costs[key]
    row[f"minimal_{key}"] = minimal.costs[key]
    row[key] = ours.costs[key] / max(minimal.costs[key], 1.0)
  return row


def main(argv: list[str]) -> None:
  del argv
  if _CI.value:
    shape, seqs, dtypes, tokens = CI_SHAPE, [32], ["float32"], 64
  else:
    shape, seqs, dtypes, tokens = (
      FULL_SHAPE,
      [int(s) for s in _SEQ_LENS.value],
      _DTYPES.value,
      _TOKENS.value,
    )
  print(f"shape {shape}; {tokens} tokens/step; load average {np.round(np.array(_loadavg()), 2)}")
  print(
    "seq  dtype     mode      caps time  cpu   ms ours/min (wall)  flops  bytes  temp  "
    "loss0 ours/min"
  )
  for seq in seqs:
    for dtype in dtypes:
      for mode in _MODES.value:
        for caps in _CAPS.value:
          s = with_caps(dataclasses.replace(shape, dtype=dtype), caps == "on")
          r = compare(s, seq, mode, _POLICY.value, tokens, _REPEATS.value, _STEPS.value)
          print(
            f"{seq:<5}{dtype:<10}{mode:<10}{caps:<5}{r['time']:5.3f} {r['cpu_time']:5.3f} "
            f"{r['ours_s'] * 1e3:9.1f}/{r['minimal_s'] * 1e3:<9.1f} {r['flops']:6.3f} "
            f"{r['bytes']:6.3f} {r['temp']:6.3f}  {r['ours_loss0']:.5f}/{r['minimal_loss0']:.5f}",
            flush=True,
          )
  print(f"load average after {np.round(np.array(_loadavg()), 2)}")


def _loadavg() -> tuple[float, float, float]:
  return os.getloadavg()


if __name__ == "__main__":
  app.run(main)
