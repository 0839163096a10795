"""Progress a person can follow: steps/s, tokens/s, MFU and ETA per summary interval.

Rates are measured on finished steps, not dispatched ones: the train loop tells the meter when it
has seen a step finish (`step_done`, from its bounded run-ahead), and a summary's `update` is
called once the step's metrics have been fetched. The first finished step includes compilation,
so windows start at it: steps/s is the rate over the steps finished since the previous summary
(or since the first step), and the ETA divides the steps left by the mean rate of every step
finished since the first one (periodic evals and saves included: it is the wall-clock estimate).

FLOPs per token of a decoder-only Transformer (PaLM, appendix B):

    flops_per_token = 6 * N + 12 * L * H * Q * T

  N  parameters that take part in a matmul: every trainable weight except the position table
     (a lookup); a tied embedding counts once, for its softmax matmul. 6 = 2 (multiply-add)
     x 3 (forward, and twice that backward).
  L, H, Q  layers, attention heads, dims per head; T the sequence length: the attention
     scores and their weighted sum, which N does not see.

MFU = achieved model FLOP/s / (number of devices x peak FLOP/s per device), where the model
FLOPs are those of the formula, not the hardware's (rematerialisation is not counted). The peak
is the dense bfloat16 matmul rate of the device kind (table below, from the vendors' data
sheets); for a device kind not in the table (CPUs included) MFU is not reported rather than
guessed.
"""

import dataclasses
import math
import time
from typing import Any

import flax.linen as nn
import jax

# Dense bf16 peak FLOP/s per device, matched as a substring of `jax.Device.device_kind`. First
# match wins, so more specific names come first.
PEAK_FLOPS_PER_DEVICE: tuple[tuple[str, float], ...] = (
  ("TPU v6 lite", 918e12),  # Trillium (v6e).
  ("TPU v5 lite", 197e12),  # v5e.
  ("TPU v5p", 459e12),
  ("TPU v5", 459e12),
  ("TPU v4", 275e12),
  ("H200", 989e12),  # SXM, dense (the 1979 TFLOP/s figure is with 2:4 sparsity).
  ("H100", 989e12),  # SXM, dense; the PCIe card is lower (756e12).
  ("A100", 312e12),
)


def peak_flops_per_device(device: jax.Device) -> float | None:
  """The table's peak for `device`'s kind, or None when it is not known (e.g. CPU)."""
  for name, flops in PEAK_FLOPS_PER_DEVICE:
    if name in device.device_kind:
      return flops
  return None


def flops_per_token(
  num_matmul_params: int, transformer_dims: tuple[int, int, int] | None, seq_len: int
) -> float:
  """6 N + 12 L H Q T (module docstring); without `transformer_dims`, only 6 N."""
  flops = 6.0 * num_matmul_params
  if transformer_dims is not None:
    layers, heads, dims_per_head = transformer_dims
    flops += 12.0 * layers * heads * dims_per_head * seq_len
  return flops


def num_matmul_params(params: Any) -> int:
  """N of the formula: the size of every weight but a learned position table (a lookup).
  `params` may be boxed (`jax.eval_shape` of an init) or not, arrays or ShapeDtypeStructs."""
  total = 0
  # Boxes are read, not unboxed: nn.unbox would add sharding constraints under an active mesh.
  is_box = lambda x: isinstance(x, nn.meta.AxisMetadata)
  for path, leaf in jax.tree_util.tree_flatten_with_path(params, is_leaf=is_box)[0]:
    if "position_emb" not in jax.tree_util.keystr(path):
      total += math.prod(getattr(leaf, "value", leaf).shape)
  return total


def model_flops_per_token(
  params: Any, transformer_dims: tuple[int, int, int] | None, seq_len: int
) -> float:
  """The model FLOPs of one token of training, for a model with these `params` (the one
  function the trainer's MFU and the tools' FLOPs use)."""
  return flops_per_token(num_matmul_params(params), transformer_dims, seq_len)


def format_duration(seconds: float) -> str:
  seconds = int(round(seconds))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


@dataclasses.dataclass
class ProgressMeter:
  """Rates over finished steps since the previous `update` (module docstring)."""

  num_train_steps: int
  tokens_per_step: int
  """Global batch rows x sequence length."""
  flops_per_token: float
  num_devices: int
  peak_flops_per_device: float | None
  start_step: int = 0
  _last_time: float = dataclasses.field(default_factory=lambda: time.perf_counter())

  def __post_init__(self):
    self._last_step = self.start_step
    self._first: tuple[int, float] | None = None  # (step, time) of the first finished step.

  def step_done(self, step: int, now: float | None = None) -> None:
    """Records that `step` has finished (seen by the loop); the first one starts the windows,
    so the compilation it includes is in no rate."""
    if self._first is None and step > self.start_step:
      now = time.perf_counter() if now is None else now
      self._first = (step, now)
      if self._last_step == self.start_step:
        self._last_step, self._last_time = step, now

  def update(self, step: int) -> dict[str, float]:
    """Returns Steps/sec, tokens/sec, (MFU when the peak is known) and eta_secs; `step` has
    finished (its metrics were fetched)."""
    now = time.perf_counter()
    if self._first is None:  # No step_done reports: the window started at construction.
      self._first = (step, now)
    elapsed = max(now - self._last_time, 1e-9)
    steps_per_sec = (step - self._last_step) / elapsed
    self._last_time, self._last_step = now, step
    rates = {
      "Steps/sec": steps_per_sec,
      "tokens/sec": steps_per_sec * self.tokens_per_step,
    }
    if self.peak_flops_per_device:
      achieved = rates["tokens/sec"] * self.flops_per_token
      rates["MFU"] = achieved / (self.num_devices * self.peak_flops_per_device)
    mean_rate = steps_per_sec
    first_step, first_time = self._first or (step, now)
    if step > first_step and now > first_time:
      mean_rate = (step - first_step) / (now - first_time)
    rates["eta_secs"] = (self.num_train_steps - step) / mean_rate if mean_rate > 0 else float("inf")
    return rates

  def line(self, step: int, loss: float, rates: dict[str, float]) -> str:
    """One log line: step, loss, steps/s, tokens/s, MFU (or 'n/a'), ETA."""
    mfu = f"{100 * rates['MFU']:.1f}%" if "MFU" in rates else "n/a (unknown peak)"
    eta = rates["eta_secs"]
    return (
      f"step {step}/{self.num_train_steps} loss {loss:.4f} "
      f"steps/s {rates['Steps/sec']:.2f} tokens/s {rates['tokens/sec']:.0f} "
      f"MFU {mfu} ETA {format_duration(eta) if eta != float('inf') else '?'}"
    )
