"""The XLA flags of the second PGLE run: use the latency-hiding scheduler with a measured profile."""

from __future__ import annotations

import glob
import os
import shlex

from profiling import _pgle

LATENCY_HIDING_FLAG = "--xla_gpu_enable_latency_hiding_scheduler"
PROFILE_PATH_FLAG = "--xla_gpu_pgle_profile_file_or_directory_path"
# What XLA logs at compile time when it found and used the profile.
FOUND_PROFILE_LOG_LINE = "Found profile, using profile guided latency estimator"


def _check_profile(path: str) -> None:
  """Fails early, here, on a profile XLA would reject or ignore only at compile time."""
  if os.path.isdir(path):
    # In a directory XLA looks for `<fingerprint>.pbtxt`, then `<fingerprint>.pb`.
    if not glob.glob(os.path.join(path, "*.pb")) + glob.glob(os.path.join(path, "*.pbtxt")):
      raise FileNotFoundError(
        f"profile directory '{path}' holds no *.pb or *.pbtxt file. XLA looks there for "
        "<module fingerprint>.pbtxt or .pb; write profiles with `pgle convert -o DIR/<fingerprint>.pb`, "
        "or pass a single profile file."
      )
    return
  if not os.path.isfile(path):
    raise FileNotFoundError(
      f"profile '{path}' does not exist. Create it first: "
      "bazel run //profiling:pgle -- convert <run dir> -o <profile.pb>"
    )
  with open(path, "rb") as f:
    costs = _pgle.parse_profile(f.read(), path.endswith(".pbtxt"))
  if not costs:
    raise ValueError(
      f"profile '{path}' has no instruction costs; XLA would use it and change nothing. "
      "Convert a trace of a GPU run again (pgle convert says why it finds no costs)."
    )


def xla_flags(profile_path: str | os.PathLike, *, check: bool = True) -> str:
  """The flags (one string, for XLA_FLAGS) that make XLA's GPU scheduler use `profile_path`.

  `profile_path` is a `.pb` / `.pbtxt` file or a directory of `<fingerprint>.pb(txt)` files; it is
  made absolute because XLA resolves it from the process's working directory. With `check`, the
  profile must exist and parse. XLA logs FOUND_PROFILE_LOG_LINE when it used it.
  """
  path = os.path.abspath(os.fspath(profile_path))
  if any(c.isspace() for c in path):
    # XLA splits XLA_FLAGS at whitespace.
    raise ValueError(
      f"profile path '{path}' contains whitespace, which XLA_FLAGS cannot carry: move it."
    )
  if check:
    _check_profile(path)
  return f"{LATENCY_HIDING_FLAG}=true {PROFILE_PATH_FLAG}={path}"


def merge_xla_flags(existing: str | None, flags: str) -> str:
  """`existing` XLA_FLAGS with `flags` appended, earlier settings of the same flags removed."""
  new = shlex.split(flags)
  names = {f.split("=", 1)[0] for f in new}
  kept = [f for f in shlex.split(existing or "") if f.split("=", 1)[0] not in names]
  return " ".join(kept + new)
