"""JAXline's utilities (`jaxline.utils`), on today's JAX.

Device helpers: get_first, bcast_local_devices, double_buffer(_on_gpu),
  py_prefetch, maybe_device_get, tree_psum.
RNG: DistributedRNGMode, host_id_devices_for_rng, specialize_rng_host_device.
Running: PeriodicAction, make_async, log_activity, rendezvous, kwargs_only,
  debugger_fallback (--jaxline_post_mortem), disable_pmap_jit
  (--jaxline_disable_pmap_jit), evaluate_should_return_dict.
Plug-in protocols: Writer, Checkpointer; InMemoryCheckpointer (tests).

JAXline placed per-device values with `jax.device_put_sharded`, which JAX
removed; here they go through praxis.sharding.put_stacked (the one
replacement, which bobbin's face uses too).
"""

import collections
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
import concurrent.futures
import contextlib
import copy
import enum
import functools
import pdb
import queue
import threading
import types
from typing import Any, Protocol, TypeVar

from absl import flags
from absl import logging
import jax
import jax.numpy as jnp

from paxml import triggers
from praxis import sharding

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_JAXLINE_POST_MORTEM = flags.DEFINE_bool(
  "jaxline_post_mortem", False, "On an exception, enter the debugger at the failure."
)
_JAXLINE_DISABLE_PMAP_JIT = flags.DEFINE_bool(
  "jaxline_disable_pmap_jit",
  False,
  "Run jit and pmap uncompiled, op by op, to debug (chex.fake_pmap_and_jit).",
)


def _flag(holder: flags.FlagHolder) -> Any:
  """The flag's value; its default before flags are parsed (a library call)."""
  return holder.value if flags.FLAGS.is_parsed() else holder.default


SnapshotNT = collections.namedtuple("SnapshotNT", ["id", "pickle_nest"])
CheckpointNT = collections.namedtuple("CheckpointNT", ["active", "history"])


class Writer(Protocol):
  """What the drivers write scalars to."""

  def write_scalars(self, global_step: int, scalars: Mapping[str, Any]) -> None:
    """Writes the scalars of `global_step`."""


class Checkpointer(Protocol):
  """What the drivers save and restore with (series "latest" and "best")."""

  def save(self, ckpt_series: str) -> None:
    """Saves the series' experiment state."""

  def restore(self, ckpt_series: str) -> None:
    """Restores the newest checkpoint of the series into its experiment state."""

  def get_experiment_state(self, ckpt_series: str) -> Any:
    """The mutable state (global_step, experiment_module, ...) of a series."""

  def restore_path(self, ckpt_series: str) -> str | None:
    """An id of the newest checkpoint of the series, or None."""

  def can_be_restored(self, ckpt_series: str) -> bool:
    """Whether the series has a checkpoint."""

  def wait_for_checkpointing_to_finish(self) -> None:
    """Blocks until pending saves are done."""


def _function_name(f: Callable[..., Any]) -> str:
  if isinstance(f, functools.partial):
    return _function_name(f.func)
  return getattr(f, "__name__", repr(f))


def py_prefetch(
  iterable_function: Callable[[], Iterable[T]],
  buffer_size: int = 5,
  *,
  thread_name: str | None = None,
) -> Generator[T, None, None]:
  """Yields the items of `iterable_function()`, produced in a background thread.

  The iterable is built inside the thread (TF datasets are thread-local). A
  producer error is raised here after the items produced before it.
  """
  if buffer_size <= 1:
    raise ValueError("the buffer_size should be > 1")
  buffer: queue.Queue = queue.Queue(maxsize=buffer_size - 1)
  errors: list[BaseException] = []
  end = object()

  def produce():
    try:
      for item in iterable_function():
        buffer.put(item)
    except Exception as e:  # pylint: disable=broad-except
      logging.exception("Error in producer thread for %s", _function_name(iterable_function))
      errors.append(e)
    finally:
      buffer.put(end)

  threading.Thread(target=produce, daemon=True, name=thread_name).start()
  while (item := buffer.get()) is not end:
    yield item
  if errors:
    raise errors[0]


tree_psum = jax.lax.psum


def double_buffer(ds: Iterable[T]) -> Generator[T, None, None]:
  """Yields the batches of `ds` (leading axis = local devices) placed on the devices.

  The copy of the next batch starts before the current one is yielded, so
  two batches are on the devices and the host-to-device copy overlaps the
  step.
  """
  devices = jax.local_devices()
  put = make_async("async_device_put_sharded")(sharding.put_stacked)
  pending = None
  for batch in ds:
    assert batch is not None
    batch = put(batch, devices)
    if pending is not None:
      yield pending.result()
    pending = batch
  if pending is not None:
    yield pending.result()


def double_buffer_on_gpu(ds: Iterable[T]) -> Iterable[T]:
  """`double_buffer(ds)` on GPU, `ds` elsewhere."""
  return double_buffer(ds) if jax.default_backend() == "gpu" else ds


def get_first(xs: Any) -> Any:
  """Device 0's slice of every leaf."""
  return jax.tree.map(lambda x: x[0], xs)


def bcast_local_devices(value: Any) -> Any:
  """A copy of every leaf on each local device (a leading device axis)."""
  devices = jax.local_devices()
  return sharding.put_stacked(
    jax.tree.map(lambda v: jnp.stack([jnp.asarray(v)] * len(devices)), value), devices
  )


def make_async(thread_name_prefix: str = "") -> Callable[[F], Callable[..., Any]]:
  """Returns a decorator running the function in one background thread.

  Calls return a future at once and run in order, never overlapping. An
  error is logged in the thread and re-raised by the next call; every call
  after an error is skipped (re-raising that error).
  """
  pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name_prefix)
  errors: list[BaseException] = []

  def decorator(wrapped: F) -> Callable[..., Any]:
    def trap_errors(*args, **kwargs):
      if errors:
        return None
      try:
        return wrapped(*args, **kwargs)
      except Exception as e:
        errors.append(e)
        logging.exception("Error in producer thread for %s", thread_name_prefix)
        raise

    @functools.wraps(wrapped)
    def call(*args, **kwargs):
      if errors:
        raise errors[-1]
      return pool.submit(trap_errors, *args, **kwargs)

    if isinstance(wrapped, types.MethodType) or not hasattr(wrapped, "__get__"):
      return call
    return _BindableAsync(call)

  return decorator


class _BindableAsync:
  """An async wrapper that also works as a method (binds `self` like a function)."""

  def __init__(self, call: Callable[..., Any]):
    self._call = call
    functools.update_wrapper(self, call)

  def __call__(self, *args, **kwargs):
    return self._call(*args, **kwargs)

  def __get__(self, instance, owner=None):
    if instance is None:
      return self
    return functools.partial(self._call, instance)


def maybe_device_get(x: Any) -> Any:
  """`jax.device_get(x)` for a JAX array, `x` otherwise."""
  return jax.device_get(x) if isinstance(x, jax.Array) else x


def kwargs_only(f: F) -> F:
  """`f` callable with keyword arguments only."""

  @functools.wraps(f)
  def wrapped(**kwargs):
    return f(**kwargs)

  return wrapped


@contextlib.contextmanager
def log_activity(activity_name: str):
  """Logs "[jaxline] X starting...", then "finished." or "failed with error."."""
  logging.info("[jaxline] %s starting...", activity_name)
  try:
    yield
  except BaseException:
    logging.exception("[jaxline] %s failed with error.", activity_name)
    raise
  logging.info("[jaxline] %s finished.", activity_name)


class DistributedRNGMode(enum.Enum):
  """How step and eval keys relate across hosts and devices."""

  UNIQUE_HOST_UNIQUE_DEVICE = "unique_host_unique_device"
  UNIQUE_HOST_SAME_DEVICE = "unique_host_same_device"
  SAME_HOST_UNIQUE_DEVICE = "same_host_unique_device"
  SAME_HOST_SAME_DEVICE = "same_host_same_device"

  @property
  def unique_host(self) -> bool:
    return self.value.startswith("unique_host")

  @property
  def unique_device(self) -> bool:
    return self.value.endswith("unique_device")


def host_id_devices_for_rng(mode: str = "unique_host_unique_device") -> jax.Array | None:
  """This process's index once per local device (None when the mode ignores hosts).

  Passed into pmap as data: reading jax.process_index() inside the pmapped
  function would give each host a different program.
  """
  if not DistributedRNGMode(mode).unique_host:
    return None
  return jnp.broadcast_to(jax.process_index(), (jax.local_device_count(),))


def specialize_rng_host_device(
  rng: jax.Array, host_id: Any, axis_name: str, mode: str = "unique_host_unique_device"
) -> jax.Array:
  """Folds the host id and/or the device index into `rng` (inside pmap)."""
  m = DistributedRNGMode(mode)
  if m.unique_host:
    if host_id is None:
      raise ValueError(f"host_id must be given in RNG mode: {m}")
    rng = jax.random.fold_in(rng, host_id)
  if m.unique_device:
    rng = jax.random.fold_in(rng, jax.lax.axis_index(axis_name))
  return rng


def rendezvous() -> None:
  """Waits until every host gets here (one all-device psum)."""
  with log_activity("rendezvous"):
    x = jnp.ones([jax.local_device_count()])
    x = jax.device_get(jax.pmap(lambda v: jax.lax.psum(v, "i"), "i")(x))
    if x[0] != jax.device_count():
      raise ValueError(f"Expected {jax.device_count()} got {x}")


def _periodic_trigger(
  interval_type: str,
  interval: float,
  growth_ratios: Sequence[float] | None,
  end_step: int | None,
  clock: Callable[[], float],
) -> tuple[triggers.Trigger, triggers.TimeInterval | None]:
  """JAXline's firing rule as paxml.triggers (the schedules every front door shares).

  Returns the trigger and, for "secs", its time part (restarted by `update_time`).
  """
  time_trigger = None
  if interval_type == "secs":
    if interval > 0:
      trigger = time_trigger = triggers.TimeInterval(interval, fire_at_zero=False, clock=clock)
    else:
      trigger = triggers.StepInterval(1)  # `t - prev >= 0`: every call.
  else:
    if not float(interval).is_integer():
      raise ValueError(f"A steps interval must be a whole number of steps; got {interval!r}.")
    trigger = triggers.StepInterval(int(interval))
    if growth_ratios:
      trigger = trigger | triggers.GrowthSteps(growth_ratios)
  if end_step:
    trigger = trigger | triggers.AtSteps(end_step)
  return trigger, time_trigger


class PeriodicAction:
  """Calls `fn(global_step, scalars)` every `interval` seconds or steps.

  Called after each step as `action(t, global_step, scalars)`; when due,
  `scalars` gets `steps_per_sec` since the previous firing. With
  `log_all_data` the scalars of the steps in between are buffered and passed
  on too, one call per step. `end_step_to_action` always fires.
  """

  def __init__(
    self,
    fn: Callable[[int, dict[str, Any]], None],
    interval_type: str,
    interval: float,
    start_time: float = 0.0,
    start_step: int = 0,
    run_async: bool = True,
    log_all_data: bool = False,
    logging_growth_ratios: Sequence[float] | None = None,
    end_step_to_action: int | None = None,
  ):
    if interval_type not in ("secs", "steps"):
      raise ValueError(f"Unrecognized interval type {interval_type}.")
    if interval_type != "steps" and logging_growth_ratios:
      raise ValueError("logging_growth_ratios work with interval_type='steps' only.")
    self._fn = fn
    self._prev_time = start_time
    self._prev_step = start_step
    self._now = start_time  # The `t` of the current call: the time trigger's clock.
    self._trigger, self._time_trigger = _periodic_trigger(
      interval_type, interval, logging_growth_ratios, end_step_to_action, lambda: self._now
    )
    self._future = None
    self.log_all_data = log_all_data
    self.log: dict[int, Any] = {}
    if run_async:
      self._apply_fn = make_async(_function_name(fn))(self._apply_fn)

  def _apply_fn(self, step: int, steps_per_sec: float, scalars: dict[str, Any]) -> None:
    self.log[step] = scalars
    log, self.log = jax.device_get(self.log), {}
    log[step] = dict(log[step])
    log[step]["steps_per_sec"] = steps_per_sec
    for logged_step, logged in log.items():
      self._fn(logged_step, logged)

  def _apply_condition(self, t: float, step: int) -> bool:
    self._now = t
    return self._trigger.check(step)

  def update_time(self, t: float, step: int) -> None:
    self._prev_time = t
    self._prev_step = step
    if self._time_trigger is not None:
      self._time_trigger.restart(t)

  def wait_to_finish(self) -> None:
    """Waits for a firing running in the background."""
    if self._future is not None and not self._future.done():
      logging.info("Waiting for a periodic action to finish...")
      self._future.result()

  def __call__(self, t: float, step: int, scalar_outputs: dict[str, Any]) -> None:
    if self._apply_condition(t, step):
      elapsed = t - self._prev_time
      steps_per_sec = (step - self._prev_step) / elapsed if elapsed else float("inf")
      self._future = self._apply_fn(step, steps_per_sec, scalar_outputs)
      self.update_time(t, step)
    elif self.log_all_data:
      self.log[step] = scalar_outputs


def debugger_fallback(f: F) -> F:
  """Runs `f`; with --jaxline_post_mortem an exception opens pdb first."""

  @functools.wraps(f)
  def wrapper(*args, **kwargs):
    try:
      return f(*args, **kwargs)
    except Exception as e:  # pylint: disable=broad-except
      if _flag(_JAXLINE_POST_MORTEM):
        pdb.post_mortem(e.__traceback__)
      raise

  return wrapper


def evaluate_should_return_dict(f: F) -> F:
  """Wraps `evaluate`: a None result is logged as deprecated and becomes {}."""

  @functools.wraps(f)
  def wrapper(*args, **kwargs):
    out = f(*args, **kwargs)
    if out is None:
      logging.log_first_n(
        logging.WARNING,
        "Your experiment's evaluate function returned no output, "
        "this is deprecated behavior. `evaluate` should return a dictionary of scalars "
        "to log, just like `step`.",
        1,
      )
      return {}
    return out

  return wrapper


@contextlib.contextmanager
def _fake_pmap_and_jit():
  """Runs jit and pmap op by op (what chex.fake_pmap_and_jit gives)."""
  with jax.disable_jit():
    yield


try:
  import chex  # pylint: disable=g-import-not-at-top
except ImportError:
  # chex is not a dependency; `utils.chex.fake_pmap_and_jit` is what is used.
  chex = types.SimpleNamespace(fake_pmap_and_jit=_fake_pmap_and_jit)


def disable_pmap_jit(fn: F) -> F:
  """Runs `fn` with pmap and jit disabled when --jaxline_disable_pmap_jit is set."""

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    if _flag(_JAXLINE_DISABLE_PMAP_JIT):
      with chex.fake_pmap_and_jit():
        return fn(*args, **kwargs)
    return fn(*args, **kwargs)

  return wrapper


# Series name -> CheckpointNT, shared by every InMemoryCheckpointer.
GLOBAL_CHECKPOINT_DICT: dict[str, CheckpointNT] = {}


class InMemoryCheckpointer:
  """Keeps snapshots in process memory (tests, and JAXline's old default).

  A snapshot is copied to host memory at save, so later (donated or
  mutated) device buffers do not change it.
  """

  def __init__(self, config: Any, mode: str):
    del mode
    self._max_checkpoints_to_keep = config.max_checkpoints_to_keep

  def get_experiment_state(self, ckpt_series: str) -> Any:
    from ml_collections import config_dict  # pylint: disable=g-import-not-at-top

    if ckpt_series not in GLOBAL_CHECKPOINT_DICT:
      GLOBAL_CHECKPOINT_DICT[ckpt_series] = CheckpointNT(threading.local(), [])
    active = GLOBAL_CHECKPOINT_DICT[ckpt_series].active
    if not hasattr(active, "state"):
      active.state = config_dict.ConfigDict()
    return active.state

  def save(self, ckpt_series: str) -> None:
    from ml_collections import config_dict  # pylint: disable=g-import-not-at-top

    series = GLOBAL_CHECKPOINT_DICT[ckpt_series]
    id_ = series.history[-1].id + 1 if series.history else 0
    snapshot = config_dict.ConfigDict()
    for k, v in self.get_experiment_state(ckpt_series).items():
      snapshot[k] = v.snapshot_state() if k == "experiment_module" else v
    snapshot = jax.tree.map(lambda x: copy.deepcopy(maybe_device_get(x)), snapshot)
    series.history.append(SnapshotNT(id_, snapshot))
    if len(series.history) > self._max_checkpoints_to_keep:
      GLOBAL_CHECKPOINT_DICT[ckpt_series] = series._replace(
        history=series.history[-self._max_checkpoints_to_keep :]
      )
    logging.info("Saved checkpoint %s with id %s.", ckpt_series, id_)

  def can_be_restored(self, ckpt_series: str) -> bool:
    return bool(
      ckpt_series in GLOBAL_CHECKPOINT_DICT and GLOBAL_CHECKPOINT_DICT[ckpt_series].history
    )

  def restore(self, ckpt_series: str) -> None:
    latest = GLOBAL_CHECKPOINT_DICT[ckpt_series].history[-1]
    saved = latest.pickle_nest.to_dict()
    state = self.get_experiment_state(ckpt_series)
    for k, v in state.items():
      if k == "experiment_module":
        v.restore_from_snapshot(saved[k])
      else:
        state[k] = saved[k]
    logging.info("Returned checkpoint %s with id %s.", ckpt_series, latest.id)

  def restore_path(self, ckpt_series: str) -> Any:
    if not self.can_be_restored(ckpt_series):
      return None
    return GLOBAL_CHECKPOINT_DICT[ckpt_series].history[-1].id

  def wait_for_checkpointing_to_finish(self) -> None:
    """Nothing is asynchronous here."""
