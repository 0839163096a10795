"""Trace directories -> XLA profile bytes: the post-processing step of PGLE.

`convert(run_dir)` gives what `jax.experimental.profiler.get_profiled_instructions_proto(run_dir)`
gives (XLA's converter), sorted by name so the same trace always gives the same bytes, and with an
exception instead of an empty profile when nothing could be measured. Beyond it: percentile /
median / min / max over several runs or hosts, CPU traces (`include_host=True`), text output and
per-instruction sample counts (`convert_detailed`). The work is done in C++ (profiling/cc).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from profiling import _pgle

Aggregation = _pgle.Aggregation

# Every failure the converter reports; TraceNotFoundError is also a FileNotFoundError, the others
# are ValueErrors.
TraceNotFoundError = _pgle.TraceNotFoundError
TraceFormatError = _pgle.TraceFormatError
NoDeviceEventsError = _pgle.NoDeviceEventsError
InvalidArgumentError = _pgle.InvalidArgumentError

_PROFILE_PLUGIN_DIR = os.path.join("plugins", "profile")


@dataclasses.dataclass(frozen=True)
class Entry:
  name: str  # `<fingerprint>::<hlo instruction>`, or the bare name when the module has none.
  cost_us: float
  samples: int  # Executions measured, over all runs.
  groups: int  # Runs (or hosts, with per_host) in which it ran.


@dataclasses.dataclass(frozen=True)
class Conversion:
  """A conversion's profile and what went into it; one call into C++ makes all of it."""

  profile: bytes  # The ProfiledInstructionsProto: text format if `text`, else binary.
  text: bool
  entries: tuple[Entry, ...]  # Sorted by name.
  trace_files: tuple[str, ...]
  num_groups: int
  num_samples: int  # Executions measured, over all runs.

  def profile_bytes(self, text: bool = False) -> bytes:
    """The ProfiledInstructionsProto XLA reads: binary, or text format for a `.pbtxt` file."""
    if text == self.text:
      return self.profile
    return _pgle.serialize_profile([(e.name, e.cost_us) for e in self.entries], text)


def resolve_run_dir(path: str | os.PathLike) -> str:
  """`path` itself, or the newest run under it if it is a logdir given to jax.profiler.

  jax.profiler writes `<logdir>/plugins/profile/<run>/`, the run named by its start time
  (YYYY_MM_DD_HH_MM_SS), so the newest run sorts last.
  """
  path = os.fspath(path)
  plugin_dir = os.path.join(path, _PROFILE_PLUGIN_DIR)
  if os.path.isdir(plugin_dir):
    runs = sorted(d for d in os.listdir(plugin_dir) if os.path.isdir(os.path.join(plugin_dir, d)))
    if runs:
      return os.path.join(plugin_dir, runs[-1])
  return path  # The C++ side says what is wrong with it, if anything.


def _aggregation(
  percentile: float | None, aggregation: Aggregation | None
) -> tuple[Aggregation, float]:
  if percentile is not None and aggregation not in (None, Aggregation.PERCENTILE):
    raise InvalidArgumentError(
      f"percentile={percentile} and aggregation={aggregation.name} contradict each other: "
      "give one of them"
    )
  if percentile is not None:
    return Aggregation.PERCENTILE, float(percentile)
  return (aggregation or Aggregation.MEAN), 0.0


def _planes(include_host: bool) -> _pgle.PlaneSelection:
  return _pgle.PlaneSelection.DEVICE_ELSE_HOST if include_host else _pgle.PlaneSelection.DEVICE


def _conversion(result: tuple, text: bool) -> Conversion:
  profile, entries, files, num_groups, _, num_samples = result
  return Conversion(
    profile, text, tuple(Entry(*e) for e in entries), tuple(files), num_groups, num_samples
  )


def _convert_run_dirs(run_dirs, percentile, aggregation, include_host, per_host, text, entries):
  """The one call into C++ behind `convert` and `convert_detailed`: its result tuple."""
  if isinstance(run_dirs, (str, os.PathLike)):
    run_dirs = [run_dirs]
  kind, value = _aggregation(percentile, aggregation)
  return _pgle.convert_run_dirs(
    [resolve_run_dir(d) for d in run_dirs],
    _planes(include_host),
    kind,
    value,
    per_host,
    text=text,
    entries=entries,
  )


def convert_detailed(
  run_dirs: str | os.PathLike | Sequence[str | os.PathLike],
  percentile: float | None = None,
  *,
  aggregation: Aggregation | None = None,
  include_host: bool = False,
  per_host: bool = False,
  text: bool = False,
) -> Conversion:
  """Converts one or several runs (see `convert`); also returns the entries with sample counts."""
  return _conversion(
    _convert_run_dirs(run_dirs, percentile, aggregation, include_host, per_host, text, True), text
  )


def convert(
  run_dirs: str | os.PathLike | Sequence[str | os.PathLike],
  percentile: float | None = None,
  *,
  aggregation: Aggregation | None = None,
  include_host: bool = False,
  per_host: bool = False,
  text: bool = False,
) -> bytes:
  """Returns the profile (ProfiledInstructionsProto bytes) of the traces in `run_dirs`.

  Each of `run_dirs` is a run directory `<logdir>/plugins/profile/<run>/` (or a logdir, for its
  newest run). With one run and no options this is XLA's converter: per instruction, the mean
  duration of its executions on all hosts. `percentile=p` instead takes, per instruction, XLA's
  auto-PGLE percentile (sorted values, index int(p/100*(n-1))) of the per-run means;
  `aggregation=Aggregation.MEDIAN/MIN/MAX` the plain statistic; `per_host=True` treats each host's
  trace as a run. `include_host=True` reads the /host:CPU plane of traces without a device plane,
  which makes CPU traces usable (for tests and for looking at reports; XLA only uses GPU profiles).
  The C++ converter returns the serialized profile directly: the entries never become Python
  objects.

  Raises TraceNotFoundError (a FileNotFoundError), TraceFormatError, NoDeviceEventsError or
  InvalidArgumentError (ValueErrors) with a message that says what to do.
  """
  profile, *_ = _convert_run_dirs(
    run_dirs, percentile, aggregation, include_host, per_host, text, False
  )
  return profile


def convert_xspaces(
  xspaces: Sequence[bytes],
  percentile: float | None = None,
  *,
  aggregation: Aggregation | None = None,
  include_host: bool = False,
  text: bool = False,
) -> Conversion:
  """Like `convert_detailed` for serialized XSpaces (e.g. from `ProfilerSession.stop()`), one per run."""
  kind, value = _aggregation(percentile, aggregation)
  return _conversion(
    _pgle.convert_xspaces(
      list(xspaces), _planes(include_host), kind, value, text=text, entries=True
    ),
    text,
  )


def read_profile(path: str | os.PathLike) -> list[tuple[str, float]]:
  """[(name, cost_us)] sorted by name from a `.pb` or `.pbtxt` profile file (format by extension, as XLA)."""
  path = os.fspath(path)
  with open(path, "rb") as f:
    data = f.read()
  return _pgle.parse_profile(data, path.endswith(".pbtxt"))


def write_profile(data: bytes, path: str | os.PathLike) -> str:
  """Writes profile bytes atomically (XLA may read the path while a job starts); returns the path."""
  path = os.fspath(path)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, path)
  return path
