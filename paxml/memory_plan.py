"""Memory preflight: a compiled program's memory per device against what the device has.

Before a program first runs (the train step; eval and decode steps), `Preflighted` compiles it
and reads XLA's `compiled.memory_analysis()`: argument, output, temp and generated-code sizes
per device, with outputs that reuse donated inputs (aliases) counted once. The need is

  arguments + outputs - aliased + temp + generated code

and is split for people into parameters + optimizer state (the arguments the caller names as
state, each leaf's shard on one device), activations/temp (XLA's temp: activations saved for the
backward pass, gradients, workspace) and the rest (batch, outputs, code). A program that cannot
fit raises `OutOfMemoryError` (main prints it as one `error:` line) naming the need, what the
device has and the experiment settings that move it; one that fits logs its plan, one line.

What a device has (`available_bytes`):
  GPU / TPU   `device.memory_stats()['bytes_limit']`.
  CPU         the host's available memory (/proc/meminfo MemAvailable) divided among this
              process's CPU devices, plus the program's arguments already resident (the train
              state exists when the step is first called, so MemAvailable no longer counts it).
  override    the environment variable PAX_DEVICE_MEMORY_BYTES (a number of bytes, e.g. 2e9):
              every device has that many bytes. Tests use it to make a tiny experiment not fit;
              it also lets a user keep room free for other work. 0 turns the preflight off.

An out-of-memory error XLA still raises while the program runs (fragmentation, other host
memory) becomes the same kind of `OutOfMemoryError` (`runtime_error`), with the plan and the
settings. XLA's estimate is the compiler's; the runtime may need somewhat more.
"""

import dataclasses
import math
import os
import re
from typing import Any

from absl import logging
import flax.linen as nn
import jax
import numpy as np

ENV_VAR = "PAX_DEVICE_MEMORY_BYTES"
_GIB = 2.0**30


class OutOfMemoryError(RuntimeError):
  """A program that does not fit the device's memory, explained in one line."""


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
  """One compiled program's memory per device, in bytes (module docstring)."""

  program: str
  parameters: float
  optimizer_state: float
  temp: float
  """XLA's temp buffers: activations kept for the backward pass, gradients, workspace."""
  other: float
  """The other arguments (batch, rng), the outputs that reuse no donated input, the code."""

  @property
  def total(self) -> float:
    return self.parameters + self.optimizer_state + self.temp + self.other

  def need(self) -> str:
    """'<program> needs <total> per device (<breakdown>)'."""
    return f"{self.program} needs {gib(self.total)} per device ({self.breakdown()})"

  def breakdown(self) -> str:
    state = f"parameters {gib(self.parameters)}"
    if self.optimizer_state:
      state += f" + optimizer state {gib(self.optimizer_state)}"
    return f"{state}, activations/temp {gib(self.temp)}, batch/outputs/code {gib(self.other)}"


def gib(num_bytes: float) -> str:
  """`num_bytes` in GiB (MiB, KiB for small programs, so they do not read as 0)."""
  if num_bytes >= 0.1 * _GIB:
    return f"{num_bytes / _GIB:.2f} GiB"
  if num_bytes >= 0.1 * 2**20:
    return f"{num_bytes / 2**20:.1f} MiB"
  return f"{num_bytes / 2**10:.1f} KiB"


def _bytes_per_device(tree: Any) -> float:
  """Bytes one device holds of `tree`'s arrays (a sharded leaf: its shard's size)."""
  total = 0.0
  for leaf in jax.tree.leaves(nn.unbox(tree)):
    if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
      continue
    sharding = getattr(leaf, "sharding", None)
    shape = sharding.shard_shape(leaf.shape) if sharding is not None else leaf.shape
    total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
  return total


def _state_parts(state: Any) -> tuple[float, float]:
  """(parameters, optimizer state) bytes per device of a train state (Pax's names or ours);
  any other state argument (eval's params) is all parameters."""
  params = next((getattr(state, n) for n in ("params", "mdl_vars") if hasattr(state, n)), None)
  if params is None:
    return _bytes_per_device(state), 0.0
  params_bytes = _bytes_per_device(params)
  return params_bytes, _bytes_per_device(state) - params_bytes


def plan(compiled: Any, program: str, state: Any) -> MemoryPlan | None:
  """The memory plan of `compiled` (a jax `Compiled`); `state` is the arguments that hold the
  parameters and optimizer state (arrays or ShapeDtypeStructs with shardings). None when the
  backend reports no memory analysis."""
  stats = compiled.memory_analysis()
  if stats is None:
    return None
  params, opt_state = _state_parts(state)
  total = (
    stats.argument_size_in_bytes
    + stats.output_size_in_bytes
    - stats.alias_size_in_bytes
    + stats.temp_size_in_bytes
    + stats.generated_code_size_in_bytes
  )
  temp = float(stats.temp_size_in_bytes)
  return MemoryPlan(
    program=program,
    parameters=params,
    optimizer_state=opt_state,
    temp=temp,
    other=max(0.0, total - params - opt_state - temp),
  )


def _host_available_bytes() -> float | None:
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return float(line.split()[1]) * 1024  # The file's unit is kB.
  except OSError:
    pass
  try:
    return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
  except (ValueError, OSError, AttributeError):
    return None


def available_bytes(device: jax.Device, resident: float = 0.0) -> tuple[float, str] | None:
  """(bytes `device` has for one program, where the number comes from), or None if unknown
  (or PAX_DEVICE_MEMORY_BYTES=0: not checked).

  `resident`: bytes per device of the program's arguments that already exist (added back on
  CPU, where they are part of the host memory already in use).
  """
  override = os.environ.get(ENV_VAR, "").strip()
  if override:
    try:
      limit = float(override)
    except ValueError as e:
      raise OutOfMemoryError(
        f"{ENV_VAR}={override!r} is not a number of bytes (e.g. 2e9); unset it to use the "
        "device's own memory"
      ) from e
    return (limit, ENV_VAR) if limit > 0 else None
  if device.platform == "cpu":
    host = _host_available_bytes()
    if host is None:
      return None
    local = sum(1 for d in jax.local_devices() if d.platform == "cpu")
    return host / local + resident, f"host memory available, over {local} CPU device(s)"
  stats = device.memory_stats() or {}
  if "bytes_limit" not in stats:
    return None
  return float(stats["bytes_limit"]), f"{device.device_kind} memory"


# -- What to change. ---------------------------------------------------------------------------


def _find_remat(obj: Any, depth: int = 0) -> tuple[str, Any, Any] | None:
  """(layer class, remat, checkpoint_policy) of the first layer (module or config) under `obj`
  with a checkpoint_policy; remat None when the layer always rematerialises (repeats)."""
  if depth > 8:
    return None
  import fiddle as fdl  # pylint: disable=g-import-not-at-top

  if isinstance(obj, fdl.Buildable):
    cls = obj.__fn_or_cls__
    fields = {n: getattr(obj, n, None) for n in _field_names(cls)}
  elif isinstance(obj, nn.Module):
    cls = type(obj)
    fields = {n: getattr(obj, n, None) for n in _field_names(cls)}
  else:
    return None
  if "checkpoint_policy" in fields:
    return cls.__name__, fields.get("remat"), fields["checkpoint_policy"]
  for value in fields.values():
    for child in value if isinstance(value, (list, tuple)) else (value,):
      found = _find_remat(child, depth + 1)
      if found:
        return found
  return None


def _field_names(cls: Any) -> list[str]:
  if dataclasses.is_dataclass(cls):
    return [f.name for f in dataclasses.fields(cls) if f.name not in ("parent", "name")]
  return []


def settings_hint(model: Any, mesh: jax.sharding.Mesh, batch: Any, plan_: MemoryPlan) -> str:
  """The experiment settings that move `plan_`'s need, with their values now; the larger part
  of the need (state or activations) decides which come first."""
  rows = seq = None
  leaves = [x for x in jax.tree.leaves(batch) if getattr(x, "ndim", 0) >= 2]
  if leaves:
    ids = batch.get("ids") if isinstance(batch, dict) else None  # NestedMaps are dicts.
    first = ids if ids is not None else leaves[0]
    sharding = getattr(first, "sharding", None)
    shape = sharding.shard_shape(first.shape) if sharding is not None else first.shape
    rows, seq = shape[0], first.shape[1]
  now_rows = f"now {rows} rows: " if rows is not None else ""
  now_seq = f"now {seq}: " if seq is not None else ""
  activations = [
    f"a smaller per-device batch ({now_rows}PERCORE_BATCH_SIZE, or the input's batch_size)",
    f"a shorter sequence ({now_seq}MAX_SEQ_LEN, or the input's seq_len)",
  ]
  remat = _find_remat(model)
  if remat is None:
    activations.append("remat (a remat'd or repeated layer stack, CHECKPOINT_POLICY)")
  else:
    layer, on, policy = remat
    policy_name = getattr(policy, "name", policy)
    if on is False:
      activations.append(f"remat ({layer} has remat=False; remat=True with CHECKPOINT_POLICY)")
    else:
      activations.append(
        f"a remat policy that saves less (CHECKPOINT_POLICY now {policy_name}; SAVE_NOTHING "
        "saves least)"
      )
  fprop = getattr(model, "fprop_dtype", None) or getattr(model, "dtype", None)
  fprop_name = np.dtype(fprop).name if fprop is not None else "unknown"
  if fprop_name != "bfloat16":
    activations.append(f"bfloat16 activations (FPROP_DTYPE, now {fprop_name})")
  axes = " ".join(f"{k}={v}" for k, v in mesh.shape.items())
  state = [
    f"more devices with the weights and optimizer state sharded over them (ICI_MESH_SHAPE / "
    f"DCN_MESH_SHAPE, now {axes} on {mesh.size} device(s); FSDP over data or model parallel "
    "over mdl divides them)"
  ]
  if plan_.temp >= plan_.parameters + plan_.optimizer_state:
    ordered = activations + state
  else:
    ordered = state + activations
  return "to fit: " + "; ".join(ordered)


# -- The check. --------------------------------------------------------------------------------


def verdict(plan_: MemoryPlan, available: tuple[float, str] | None, hint: str) -> tuple[bool, str]:
  """(whether `plan_` fits `available` (bytes, source), the one line that says so)."""
  need = plan_.need()
  if available is None:
    return (
      True,
      f"Memory plan: {need}; not checked (the device's memory is unknown, or {ENV_VAR}=0)",
    )
  limit, source = available
  if plan_.total > limit:
    return False, f"{need}, but the device has {gib(limit)} ({source}); {hint}"
  return True, f"Memory plan: {need} of {gib(limit)} ({source})"


def check(plan_: MemoryPlan, available: tuple[float, str] | None, hint: str) -> str:
  """Raises OutOfMemoryError when `plan_` does not fit `available` (bytes, source); else returns
  the one-line plan to log."""
  fits, line = verdict(plan_, available, hint)
  if not fits:
    raise OutOfMemoryError(f"out of memory before the first step: {line}")
  return line


_OOM_PATTERN = re.compile(r"RESOURCE_EXHAUSTED|out of memory", re.IGNORECASE)
_ALLOCATION = re.compile(r"allocating (\d+) bytes", re.IGNORECASE)


def is_out_of_memory(error: BaseException) -> bool:
  """Whether `error` (or its cause) is XLA running out of memory."""
  while error is not None:
    if isinstance(error, jax.errors.JaxRuntimeError):  # jaxlib's XlaRuntimeError too.
      return bool(_OOM_PATTERN.search(str(error)))
    error = error.__cause__ or error.__context__
  return False


def runtime_error(
  error: BaseException, program: str = "the program", plan_: MemoryPlan | None = None, hint=""
) -> OutOfMemoryError:
  """The one-line OutOfMemoryError for an OOM XLA raised while running `program`."""
  allocation = _ALLOCATION.search(str(error))
  what = f" allocating {gib(int(allocation.group(1)))}" if allocation else ""
  planned = f" (planned: {gib(plan_.total)} per device: {plan_.breakdown()})" if plan_ else ""
  hint = hint or (
    "to fit: a smaller per-device batch (PERCORE_BATCH_SIZE); a shorter sequence (MAX_SEQ_LEN); "
    "remat (CHECKPOINT_POLICY); bfloat16 activations (FPROP_DTYPE); more devices with the "
    "weights sharded over them (ICI_MESH_SHAPE)"
  )
  return OutOfMemoryError(f"out of memory running {program}{what}{planned}; {hint}")


class Preflighted:
  """A jitted function that checks each new program's memory before its first run.

  On the first call with a new input signature (shapes, dtypes, shardings) it lowers and
  compiles `jitted` for those arguments, checks the plan (`check`: raises OutOfMemoryError, or
  logs the plan once) and keeps the compiled program; later calls with that signature run it
  directly, so the program is compiled once, as plain jit would. (With JAX's automatic PGLE on,
  `jax_enable_pgle`, calls go to the jitted function, which PGLE profiles and recompiles.) The
  first call must happen where jit's would: inside the partitioner's rules context, since the
  layers' sharding constraints apply while the function is traced.
  """

  def __init__(
    self,
    jitted: Any,
    program: str,
    *,
    model: Any,
    mesh: jax.sharding.Mesh,
    batch_argnum: int = 1,
    state_argnum: int = 0,
  ):
    self._jitted, self.program, self._model, self._mesh = jitted, program, model, mesh
    self._batch_argnum, self._state_argnum = batch_argnum, state_argnum
    self._compiled: dict[Any, tuple[Any, MemoryPlan | None, str]] = {}

  def preflight(self, *args) -> MemoryPlan | None:
    """Compiles and checks the program for `args` now, without running it (a later call with
    the same signature runs the compiled program); returns its plan."""
    return self._entry(args)[1]

  def _entry(self, args) -> tuple[Any, MemoryPlan | None, str]:
    leaves, treedef = jax.tree.flatten(args)
    key = (treedef, tuple(_leaf_signature(x) for x in leaves))
    entry = self._compiled.get(key)
    if entry is None:
      entry = self._compile(args)
      self._compiled[key] = entry
    return entry

  def __call__(self, *args):
    compiled, plan_, hint = self._entry(args)
    if jax.config.jax_enable_pgle:
      # JAX's automatic PGLE profiles and recompiles jitted calls only, not AOT-compiled ones.
      compiled = self._jitted
    try:
      return compiled(*args)
    except Exception as e:  # pylint: disable=broad-except
      if is_out_of_memory(e):
        raise runtime_error(e, self.program, plan_, hint) from e
      raise

  def _compile(self, args) -> tuple[Any, MemoryPlan | None, str]:
    compiled = self._jitted.lower(*args).compile()
    state = args[self._state_argnum]
    plan_ = plan(compiled, self.program, state)
    if plan_ is None:
      return compiled, None, ""
    hint = settings_hint(self._model, self._mesh, args[self._batch_argnum], plan_)
    # On CPU the arguments already sit in the host memory MemAvailable no longer counts.
    resident = _bytes_per_device([x for x in jax.tree.leaves(args) if isinstance(x, jax.Array)])
    available = available_bytes(self._mesh.devices.flat[0], resident)
    logging.info("%s", check(plan_, available, hint))
    return compiled, plan_, hint


def _leaf_signature(x: Any) -> Any:
  return (getattr(x, "shape", None), getattr(x, "dtype", type(x)), getattr(x, "sharding", None))
