"""Model FLOPs utilization of a ~1B GPT train step on whatever accelerator is present.

    ./bazelw run //paxml/benchmarks:mfu                      # the 1B shape on a GPU / TPU
    ./bazelw run //paxml/benchmarks:mfu -- --steps=20 --batch=8
    ./bazelw run //paxml/benchmarks:mfu -- --tiny            # the smoke test's size

The model is that of `exp.task()` for Pax's `C4Spmd1BAdam4Replicas` shape
(13 layers x 2560, 20 heads of 128, hidden 10240, vocabulary 32000, scanned layers under its
remat policy, logits capped as in Pax) at sequence length 2048 in bfloat16, unpacked synthetic
ids; the step is one `optax.adam` update, jitted with the state donated, on one device. `--atten_logit_cap=0` drops
Pax's cap so that a GPU runs cuDNN's fused attention. MFU uses
the trainer's formula (paxml/progress.py: 6 N + 12 L H Q T FLOPs per token over the device
kind's dense bf16 peak). On a CPU (no peak in the table) the shape is scaled down to 2 x 256 at
seq 256 so that a run takes minutes, and the output says so; MFU is then not reported.

Printed: step times (median, min, max, spread = (max - min) / median over the timed steps),
tokens/s, model TFLOP/s, MFU, the attention implementation the layers chose, and peak memory
(the device's `peak_bytes_in_use` where it reports one, else XLA's compiled sizes).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

from paxml import progress
from paxml import tasks_lib
from paxml.benchmarks import lm_setup
from paxml.tasks.lm.params import c4
from praxis.layers import dot_product_attention
from praxis.layers import checkpoint_policy

_STEPS = flags.DEFINE_integer("steps", 10, "Timed steps (after --warmup).")
_WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed steps first (compilation, allocation).")
_BATCH = flags.DEFINE_integer("batch", 4, "Sequences per step.")
_SEQ = flags.DEFINE_integer("seq_len", 2048, "Sequence length.")
_TINY = flags.DEFINE_bool("tiny", False, "A 2 x 64 model at seq 64: the smoke test.")
_POLICY = flags.DEFINE_string("policy", None, "Remat policy name; default the experiment's.")
_CAP = flags.DEFINE_float(
  "atten_logit_cap",
  None,
  "Attention logit cap; default the experiment's (50, as Pax). 0 lets a GPU use cuDNN's fused "
  "attention, which has no cap.",
)


def experiment(
  tiny: bool, on_cpu: bool, seq_len: int, policy: str | None, cap: float | None = None
) -> Any:
  """C4Spmd1BAdam4Replicas's model fields, scaled down for --tiny or a CPU."""

  class Bench(c4.C4Spmd1BAdam4Replicas):
    MAX_SEQ_LEN = seq_len
    PACKED_INPUT = False
    FPROP_DTYPE = "bfloat16"
    if policy:
      CHECKPOINT_POLICY = checkpoint_policy.AutodiffCheckpointType[policy]  # Pax's enum.
    if cap is not None:
      ATTEN_LOGIT_CAP = cap
    if tiny:
      NUM_LAYERS, MODEL_DIMS, NUM_HEADS, DIMS_PER_HEAD, VOCAB_SIZE = 2, 64, 4, 16, 256
      HIDDEN_DIMS = 4 * MODEL_DIMS
    elif on_cpu:
      NUM_LAYERS, MODEL_DIMS, NUM_HEADS, DIMS_PER_HEAD = 2, 256, 2, 128
      HIDDEN_DIMS = 4 * MODEL_DIMS

  return Bench()


def run(
  tiny: bool,
  steps: int,
  warmup: int,
  batch: int,
  seq_len: int,
  policy: str | None = None,
  cap: float | None = None,
) -> dict[str, Any]:
  """Trains `steps` timed steps; returns the report as a dict (also printed by main)."""
  device = jax.devices()[0]
  peak = progress.peak_flops_per_device(device)
  on_cpu = device.platform == "cpu"
  if (tiny or on_cpu) and seq_len > 256:
    seq_len = 64 if tiny else 256
  exp = experiment(tiny, on_cpu, seq_len, policy, cap)
  model = lm_setup.language_model(exp)
  data = lm_setup.make_batch(batch, seq_len, exp.VOCAB_SIZE)
  variables = model.init(jax.random.PRNGKey(0), data)
  step, opt = lm_setup.train_step(lm_setup.lm_loss(model))
  state = (variables, opt.init(variables))
  compiled = jax.jit(step, donate_argnums=0).lower(state, data).compile()
  memory = compiled.memory_analysis()
  losses, times = [], []
  for i in range(warmup + steps):
    start = time.perf_counter()
    state, loss = compiled(state, data)
    losses.append(float(loss))  # waits for the step
    if i >= warmup:
      times.append(time.perf_counter() - start)
  median = statistics.median(times)
  tokens_per_s = batch * seq_len / median
  flops_per_token = progress.flops_per_token(
    progress.num_matmul_params(variables),
    tasks_lib.transformer_dims(model),
    seq_len,
  )
  stats = device.memory_stats() or {}
  head_dims = exp.DIMS_PER_HEAD
  report = {
    "device": f"{device.platform} {device.device_kind}",
    "shape": (
      f"{exp.NUM_LAYERS} x {exp.MODEL_DIMS}, {exp.MODEL_DIMS // head_dims} heads of {head_dims}, "
      f"hidden {exp.HIDDEN_DIMS}, vocab {exp.VOCAB_SIZE}, seq {seq_len}, batch {batch}, bf16, "
      f"remat {exp.CHECKPOINT_POLICY}"
    ),
    "scaled_down": tiny or on_cpu,
    "params": progress.num_matmul_params(variables),
    "attention_impl": dot_product_attention.select_attention_impl(
      "auto",
      jax.default_backend(),
      jnp.bfloat16,
      head_dims,
      "atten_logit_cap" if exp.ATTEN_LOGIT_CAP > 0 else None,
    ),
    "step_s_median": median,
    "step_s_min": min(times),
    "step_s_max": max(times),
    "spread": (max(times) - min(times)) / median,
    "tokens_per_s": tokens_per_s,
    "model_tflops_per_s": tokens_per_s * flops_per_token / 1e12,
    "mfu": tokens_per_s * flops_per_token / peak if peak else None,
    "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
    "xla_temp_bytes": memory.temp_size_in_bytes,
    "xla_argument_bytes": memory.argument_size_in_bytes,
    "loss_first": losses[0],
    "loss_last": losses[-1],
  }
  return report


def main(argv: list[str]) -> None:
  del argv
  r = run(
    _TINY.value, _STEPS.value, _WARMUP.value, _BATCH.value, _SEQ.value, _POLICY.value, _CAP.value
  )
  if r["scaled_down"]:
    print("NOTE: scaled-down shape (no accelerator, or --tiny): not the 1B model; no MFU.")
  for key, value in r.items():
    print(f"{key:22s} {value}")


if __name__ == "__main__":
  app.run(main)
