"""The one way this repository imports TensorFlow: `tf = quiet_tensorflow.import_tensorflow()`.

Only the modules that feed data through tf.data (or SeqIO, which imports TensorFlow) call it, so a
process that trains on synthetic or in-memory data never pays TensorFlow's start-up (seconds of
CPU per process). It does two things on the first call:

  * TensorFlow's C++ start-up notices ("oneDNN custom operations are on", twice; the CPU feature
    guard; the `tensorflow` wheel's CUDA probe on a machine without a GPU) go to file descriptor 2
    from C++, before any flag is parsed, and TF 2.21 prints the oneDNN one whatever
    TF_CPP_MIN_LOG_LEVEL says. They are noise to a user of `paxml:main --mode=decode`, so they
    are dropped; every other line written meanwhile is passed on. TF_CPP_MIN_LOG_LEVEL=0 keeps
    them all.
  * As Pax's setup_jax does, TensorFlow gets no GPU: it only feeds data, and a GPU build would
    reserve most of the GPU memory that JAX needs.

A module that imports SeqIO calls it first (`import seqio` then finds TensorFlow loaded).
"""

import os
import sys
import tempfile
import threading
from types import ModuleType

_NOTICES = (
  "oneDNN custom operations are on",
  "All log messages before absl::InitializeLog() is called",
  "cpu_feature_guard",
  "To enable the following instructions:",
  # The `tensorflow` wheel (which tensorflow-text needs) looks for CUDA at import; on a machine
  # without a GPU it says so twice and logs cuInit's failure. JAX finds its own devices.
  "Could not find cuda drivers on your machine",
  "failed call to cuInit",
)

# Two threads must not swap file descriptor 2 at once (the second would capture the first's copy).
_lock = threading.Lock()
_tensorflow: ModuleType | None = None


def _import_with_notices_dropped() -> ModuleType:
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TF's other INFO lines.
  sys.stderr.flush()
  saved_stderr = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)  # The notices come from C++, below sys.stderr.
    try:
      import tensorflow  # pylint: disable=g-import-not-at-top

      # Asking also makes the wheel's CUDA probe (and its cuInit failure) happen here.
      tensorflow.config.set_visible_devices([], "GPU")
    finally:
      sys.stderr.flush()
      os.dup2(saved_stderr, 2)
      os.close(saved_stderr)
      captured.seek(0)
      for line in captured.read().decode(errors="replace").splitlines(keepends=True):
        if not any(notice in line for notice in _NOTICES):
          sys.stderr.write(line)
  return tensorflow


def import_tensorflow() -> ModuleType:
  """Returns the `tensorflow` module, imported without its start-up notices, with no GPU."""
  global _tensorflow
  with _lock:
    if _tensorflow is None:
      if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
        import tensorflow  # pylint: disable=g-import-not-at-top

        try:
          tensorflow.config.set_visible_devices([], "GPU")
        except RuntimeError:  # Its devices were set up already, by whoever imported it.
          pass
        _tensorflow = tensorflow
      else:
        _tensorflow = _import_with_notices_dropped()
  return _tensorflow
