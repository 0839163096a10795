"""Loads the C++ extension `_pgle_ext` so that it runs on its own protobuf runtime.

The extension links the system libprotobuf. TensorFlow loads its libraries with RTLD_GLOBAL and
they export another protobuf build, whose symbols would otherwise win the dynamic linker's lookup:
our generated code would then register its descriptors in TensorFlow's pool ("Symbol name
tensorflow.profiler.XSpace conflicts with the existing symbol", then abort) and run against
another protobuf version's internals. RTLD_DEEPBIND makes the extension and its own dependencies
resolve symbols among themselves first, whatever was imported before or is imported after.
"""

import os
import sys

_flags = sys.getdlopenflags()
sys.setdlopenflags(os.RTLD_NOW | os.RTLD_LOCAL | os.RTLD_DEEPBIND)
try:
  from profiling import _pgle_ext  # pylint: disable=g-import-not-at-top
finally:
  sys.setdlopenflags(_flags)

# The extension's functions, classes and exceptions under this module's name.
globals().update({name: getattr(_pgle_ext, name) for name in dir(_pgle_ext) if not name.startswith("__")})
