"""pgle: JAX profiler traces -> XLA profile -> XLA flags. Run `bazel run //profiling:pgle -- --help`."""

from __future__ import annotations

import argparse
import os
import sys

from profiling import conversion as convert_lib
from profiling import flags as flags_lib
from profiling import reporting as report_lib

WORKFLOW = f"""\
PGLE (profile-guided latency estimation) on GPU, manual workflow:

  1. Trace a few training steps, with the same XLA flags as step 3's run (the profile is matched
     to the compiled module by its fingerprint, which depends on them):
       XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true python train.py ...
     tracing with jax.profiler.trace(LOGDIR) or profiling.collect(step, steps, LOGDIR).
  2. Convert the trace into a profile (LOGDIR means its newest run, LOGDIR/plugins/profile/<run>/):
       bazel run //profiling:pgle -- convert LOGDIR -o /abs/path/profile.pb
     and look at it (add --hlo module.txt, the compiled HLO, for coverage and dropped entries):
       bazel run //profiling:pgle -- report /abs/path/profile.pb
  3. Rerun with the profile:
       export XLA_FLAGS="$(bazel run //profiling:pgle -- flags /abs/path/profile.pb)"
       python train.py ...
     XLA logs "{flags_lib.FOUND_PROFILE_LOG_LINE}" when it uses the profile
     (an INFO line: keep TF_CPP_MIN_LOG_LEVEL at 0 to see it). If it is missing:
     the profile's fingerprint does not match (report --hlo shows DROPPED entries; re-collect with
     identical code, shapes and flags), or the path is wrong.

Auto PGLE (JAX profiles and recompiles by itself; no effect on .lower().compile() AOT functions):
  JAX_ENABLE_PGLE=true JAX_PGLE_PROFILING_RUNS=3 JAX_PGLE_AGGREGATION_PERCENTILE=90 python train.py

On CPU (tests, exploring): traces have no device plane; `convert --include_host` reads /host:CPU.
"""

_AGGREGATIONS = {
  "mean": convert_lib.Aggregation.MEAN,
  "median": convert_lib.Aggregation.MEDIAN,
  "min": convert_lib.Aggregation.MIN,
  "max": convert_lib.Aggregation.MAX,
}


def _path(path: str) -> str:
  """Paths as the user typed them: `bazel run` runs us in the runfiles, not the user's directory.

  The rule of paxml.user_paths.resolve, restated: profiling imports nothing of paxml, so that its
  wheel installs without paxml's (paxml requires profiling, not the other way round).
  """
  start = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
  return os.path.join(start, os.path.expanduser(path))


def _convert(args: argparse.Namespace) -> int:
  output = _path(args.output)
  conversion = convert_lib.convert_detailed(
    [_path(d) for d in args.run_dirs],
    args.percentile,
    aggregation=_AGGREGATIONS[args.aggregation] if args.aggregation else None,
    include_host=args.include_host,
    per_host=args.per_host,
    text=output.endswith(".pbtxt"),
  )
  convert_lib.write_profile(conversion.profile, output)
  print(
    f"wrote {output}: {len(conversion.entries)} instruction costs from {conversion.num_samples} executions in "
    f"{len(conversion.trace_files)} trace file(s), {conversion.num_groups} group(s)"
  )
  if args.verbose:
    for e in conversion.entries:
      print(f"  {e.cost_us:12.3f} us  x{e.samples:<6d} {e.name}")
  return 0


def _report(args: argparse.Namespace) -> int:
  hlo = None
  if args.hlo:
    with open(_path(args.hlo)) as f:
      hlo = f.read()
  print(report_lib.report(_path(args.profile), hlo).format(top=args.top))
  return 0


def _flags(args: argparse.Namespace) -> int:
  flags = flags_lib.xla_flags(_path(args.profile))
  if args.merge:
    flags = flags_lib.merge_xla_flags(os.environ.get("XLA_FLAGS"), flags)
  print(flags)
  return 0


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
    prog="pgle",
    description=__doc__.splitlines()[0],
    epilog=WORKFLOW,
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  commands = parser.add_subparsers(dest="command", required=True, metavar="{convert,report,flags}")

  convert = commands.add_parser(
    "convert",
    help="trace run directories -> profile.pb",
    epilog=WORKFLOW,
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  convert.add_argument(
    "run_dirs", nargs="+", help="LOGDIR/plugins/profile/<run>/ (or LOGDIR: its newest run)"
  )
  convert.add_argument(
    "-o", "--output", required=True, help="profile file; .pbtxt writes text format"
  )
  how = convert.add_mutually_exclusive_group()
  how.add_argument(
    "--percentile",
    type=float,
    help="per instruction, XLA's auto-PGLE percentile of the per-run means (default: "
    "XLA's mean over all executions)",
  )
  how.add_argument(
    "--aggregation", choices=sorted(_AGGREGATIONS), help="statistic of the per-run means"
  )
  convert.add_argument(
    "--per_host", action="store_true", help="aggregate over hosts instead of runs"
  )
  convert.add_argument(
    "--include_host",
    action="store_true",
    help="read /host:CPU of traces without a device plane (CPU runs)",
  )
  convert.add_argument(
    "-v", "--verbose", action="store_true", help="list every entry with its sample count"
  )
  convert.set_defaults(run=_convert)

  report = commands.add_parser("report", help="top instructions, coverage, entries XLA would drop")
  report.add_argument("profile", help="profile .pb or .pbtxt")
  report.add_argument("--hlo", help="compiled HLO text of the module the profile is for")
  report.add_argument("--top", type=int, default=20)
  report.set_defaults(run=_report)

  flags = commands.add_parser("flags", help="print the XLA_FLAGS for a run that uses the profile")
  flags.add_argument("profile", help="profile file or directory of <fingerprint>.pb files")
  flags.add_argument("--merge", action="store_true", help="append to the current $XLA_FLAGS")
  flags.set_defaults(run=_flags)
  return parser


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  try:
    return args.run(args)
  except (OSError, ValueError) as e:  # The C++ errors are subclasses of these.
    print(f"pgle {args.command}: {e}", file=sys.stderr)
    return 1


if __name__ == "__main__":
  sys.exit(main())
