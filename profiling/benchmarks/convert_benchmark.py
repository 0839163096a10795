"""Benchmark: our trace converter against jaxlib's on one large trace, in the same run.

  bazel run //profiling/benchmarks:convert_benchmark -- --size_mb=100 --repeats=3

Captures a CPU trace of a real jitted train step (profiling/cpu_trace.py), relabels its /host:CPU
plane /device:GPU:0 so that jaxlib's converter reads it, repeats its events until the trace is
--size_mb MiB (large_trace.py), and writes it as <dir>/host.xplane.pb. Then converts that directory
--repeats times with each converter, alternating which goes first, each conversion in a fresh
process (convert_worker.py) so that peak memory is per converter. Exits non-zero unless both give
the same names with cost_us equal within 1e-9 relative. Prints the trace's size and events, the
median seconds of each, the ratio, peak memory and the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from hostenv import user_paths
from profiling import _pgle
from profiling import cpu_trace
from profiling import trace_relabel
from profiling.benchmarks import convert_worker
from profiling.benchmarks import large_trace

RELATIVE_TOLERANCE = 1e-9
_PLANE_NAME = "/device:GPU:0"
_FINGERPRINT = "0123abcd"  # So that names carry the `<fingerprint>::` prefix, as on GPU.
_STEPS = 3
_CONVERTERS = tuple(convert_worker.CONVERTERS)  # ("ours", "jaxlib")


class ProfileMismatch(Exception):
  """The two converters disagree on the benchmark's trace."""


@dataclasses.dataclass(frozen=True)
class Measurement:
  seconds: tuple[float, ...]  # One per repeat, in run order.
  peak_rss_mib: float  # Largest over the repeats.
  rss_after_import_mib: (
    float  # Smallest over the repeats: the interpreter and the converter's module.
  )

  @property
  def median_seconds(self) -> float:
    return statistics.median(self.seconds)


@dataclasses.dataclass(frozen=True)
class Report:
  trace_mib: float
  trace: large_trace.GrownTrace
  measurements: dict[str, Measurement]  # By converter: "ours", "jaxlib".
  names: int  # Instructions in both profiles.
  machine: str

  @property
  def ratio(self) -> float:
    """How many times faster ours is: jaxlib's median time over ours."""
    return self.measurements["jaxlib"].median_seconds / self.measurements["ours"].median_seconds


def machine() -> str:
  model = "unknown CPU"
  with open("/proc/cpuinfo") as f:
    for line in f:
      if line.startswith("model name"):
        model = line.split(":", 1)[1].strip()
        break
  # Another job on a shared machine slows both converters and blurs the ratio: say how busy it was.
  load = os.getloadavg()[0]
  return (
    f"{model}, nproc {len(os.sched_getaffinity(0))}, load average {load:.2f} at start; "
    f"our extension built as {build_config()}"
  )


def build_config() -> str:
  """The Bazel configuration our extension was built in, e.g. k8-opt or k8-fastbuild (the default mode; .bazelrc adds -O2 to it)."""
  match = re.search(r"bazel-out/([^/]+)/", os.path.realpath(_pgle.__file__))
  return match.group(1) if match else "unknown"


def capture_trace(workdir: str) -> bytes:
  """A relabelled device-plane trace of a few train steps (a few hundred KB, mostly HloProtos)."""
  run_dir = cpu_trace.trace_train_steps(os.path.join(workdir, "log"), steps=_STEPS)
  (path,) = glob.glob(os.path.join(run_dir, "*.xplane.pb"))
  with open(path, "rb") as f:
    return trace_relabel.relabel(f.read(), _PLANE_NAME, _FINGERPRINT)


def read_costs(path: str) -> dict[str, float]:
  with open(path, "rb") as f:
    costs = _pgle.parse_profile(f.read())
  as_dict = dict(costs)
  if len(as_dict) != len(costs):
    raise ProfileMismatch(f"{path} names an instruction more than once")
  return as_dict


def compare(ours: dict[str, float], theirs: dict[str, float]) -> float:
  """The largest relative cost difference over all names.

  Raises:
    ProfileMismatch: the names differ, or a cost differs by more than RELATIVE_TOLERANCE.
  """
  if not theirs:
    raise ProfileMismatch("jaxlib's profile is empty: the trace has nothing to compare")
  if set(ours) != set(theirs):
    only_ours, only_theirs = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    raise ProfileMismatch(
      f"different names: only in ours {only_ours[:5]} ({len(only_ours)}), "
      f"only in jaxlib's {only_theirs[:5]} ({len(only_theirs)})"
    )
  largest = 0.0
  for name, cost in sorted(theirs.items()):
    if abs(ours[name] - cost) > RELATIVE_TOLERANCE * abs(cost):
      raise ProfileMismatch(
        f"{name}: ours {ours[name]!r} us, jaxlib's {cost!r} us "
        f"(relative difference {abs(ours[name] - cost) / abs(cost):.3g})"
      )
    if cost:
      largest = max(largest, abs(ours[name] - cost) / abs(cost))
  return largest


def _convert_in_subprocess(which: str, run_dir: str, output: str) -> dict[str, float]:
  # The child finds our modules on the PYTHONPATH that Bazel's launcher exported to us.
  command = [sys.executable, "-m", convert_worker.__name__, which, run_dir, output]
  result = subprocess.run(command, capture_output=True, text=True, check=False)
  if result.returncode != 0:
    raise RuntimeError(
      f"{which} converter failed (exit {result.returncode}):\n{result.stderr[-4000:]}"
    )
  return json.loads(result.stdout.strip().splitlines()[-1])


def run(size_mb: float, repeats: int, workdir: str, log=print) -> Report:
  log(f"capturing a {_STEPS}-step CPU trace and growing it to {size_mb:g} MiB ...")
  trace = large_trace.grow(capture_trace(workdir), int(size_mb * 2**20))
  run_dir = os.path.join(workdir, "large")
  os.makedirs(run_dir, exist_ok=True)
  trace_path = os.path.join(run_dir, "host.xplane.pb")
  with open(trace_path, "wb") as f:
    f.write(trace.data)
  log(f"wrote {trace_path}")

  outputs = {which: os.path.join(workdir, f"{which}.pb") for which in _CONVERTERS}
  results = {which: [] for which in _CONVERTERS}
  for r in range(repeats):
    # Alternate which goes first, so that neither always finds the file fresher in the page cache.
    for which in _CONVERTERS if r % 2 == 0 else reversed(_CONVERTERS):
      log(f"repeat {r + 1}/{repeats}: {which} ...")
      results[which].append(_convert_in_subprocess(which, run_dir, outputs[which]))
  theirs = read_costs(outputs["jaxlib"])
  compare(read_costs(outputs["ours"]), theirs)

  measurements = {
    which: Measurement(
      seconds=tuple(m["seconds"] for m in ms),
      peak_rss_mib=max(m["peak_rss_mib"] for m in ms),
      rss_after_import_mib=min(m["rss_after_import_mib"] for m in ms),
    )
    for which, ms in results.items()
  }
  return Report(len(trace.data) / 2**20, trace, measurements, len(theirs), machine())


def format_report(report: Report) -> str:
  t = report.trace
  lines = [
    f"trace    {report.trace_mib:.1f} MiB: {t.events:,} events on {t.plane_name}, "
    f"{t.op_events:,} of them with hlo_op; {t.copies:,} copies of a {_STEPS}-step trace of {t.events_per_copy} "
    "events",
  ]
  for which, m in report.measurements.items():
    runs = ", ".join(f"{s:.3f}" for s in m.seconds)
    lines.append(
      f"{which:<8} median {m.median_seconds:.3f} s (runs {runs}); peak RSS {m.peak_rss_mib:.0f} MiB "
      f"({m.rss_after_import_mib:.0f} MiB after imports)"
    )
  lines += [
    f"ratio    {report.ratio:.2f}x (jaxlib median / ours median; > 1 means ours is faster)",
    f"parity   same {report.names} names, cost_us equal within {RELATIVE_TOLERANCE:g} relative",
    f"machine  {report.machine}",
  ]
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  parser.add_argument(
    "--size_mb", type=float, default=100, help="size of the trace to convert, in MiB"
  )
  parser.add_argument(
    "--repeats", type=int, default=3, help="conversions per converter; the median is reported"
  )
  parser.add_argument(
    "--workdir",
    help="where to write the traces and profiles (default: a temporary "
    "directory, removed at the end); kept when given",
  )
  args = parser.parse_args(argv)
  if args.size_mb <= 0 or args.repeats < 1:
    parser.error(f"--size_mb must be > 0 and --repeats >= 1, got {args.size_mb} and {args.repeats}")

  # `bazel run` runs us in the runfiles tree: a relative --workdir is relative to where the user ran it.
  workdir = (
    user_paths.resolve(args.workdir)
    if args.workdir
    else tempfile.mkdtemp(prefix="convert_benchmark_")
  )
  try:
    report = run(
      args.size_mb, args.repeats, workdir, log=lambda m: print(m, file=sys.stderr, flush=True)
    )
  except ProfileMismatch as e:
    print(f"FAIL: our converter and jaxlib's disagree on the benchmark trace: {e}", file=sys.stderr)
    return 1
  finally:
    if not args.workdir:
      shutil.rmtree(workdir, ignore_errors=True)
  print(format_report(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
