"""One conversion in a process of its own, so that its peak memory is its own.

  python -m profiling.benchmarks.convert_worker {ours,jaxlib} RUN_DIR OUTPUT

Writes the profile bytes to OUTPUT and prints one JSON line: the conversion's wall time (imports
excluded) and the process's resident memory after imports and at its peak (VmHWM).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable


def _ours() -> Callable[[str], bytes]:
  from profiling import conversion  # pylint: disable=g-import-not-at-top

  return conversion.convert  # Default mode: device planes, mean cost, as XLA's converter.


def _jaxlib() -> Callable[[str], bytes]:
  # The function jax.experimental.profiler.get_profiled_instructions_proto calls.
  from jax._src.lib import _profiler  # pylint: disable=g-import-not-at-top

  return _profiler.get_profiled_instructions_proto


CONVERTERS = {"ours": _ours, "jaxlib": _jaxlib}


def _status_mib(field: str) -> float:
  """A memory field of /proc/self/status (VmRSS, VmHWM), in MiB."""
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) / 1024  # The kernel reports kB.
  raise RuntimeError(f"no {field} in /proc/self/status: this benchmark needs Linux")


def main(argv: list[str]) -> int:
  if len(argv) != 4 or argv[1] not in CONVERTERS:
    print(f"usage: {argv[0]} {{{','.join(CONVERTERS)}}} RUN_DIR OUTPUT", file=sys.stderr)
    return 2
  _, which, run_dir, output = argv
  convert = CONVERTERS[which]()
  rss_after_import = _status_mib("VmRSS")
  start = time.perf_counter()
  profile = convert(run_dir)
  seconds = time.perf_counter() - start
  peak = _status_mib("VmHWM")
  with open(output, "wb") as f:
    f.write(profile)
  print(
    json.dumps({"seconds": seconds, "peak_rss_mib": peak, "rss_after_import_mib": rss_after_import})
  )
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
