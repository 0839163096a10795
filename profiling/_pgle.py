"""profiling._pgle: the C++ library's Python binding (_pgle.cc), loaded on its own protobuf runtime.

The binding is built as native/_pgle.so. Importing this module loads it and replaces this module
with it in sys.modules, so `from profiling import _pgle` gives the extension itself.

Why not a plain import: the extension links the system libprotobuf. TensorFlow loads its libraries
with RTLD_GLOBAL and they export another protobuf build, whose symbols would otherwise win the
dynamic linker's lookup: our generated code would then register its descriptors in TensorFlow's
pool ("Symbol name tensorflow.profiler.XSpace conflicts with the existing symbol", then abort) and
run against another protobuf version's internals. RTLD_DEEPBIND makes the extension and its own
dependencies resolve symbols among themselves first, whatever was imported before or after.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _load():
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native", "_pgle.so")
  loader = importlib.machinery.ExtensionFileLoader(__name__, path)
  spec = importlib.util.spec_from_file_location(__name__, path, loader=loader)
  flags = sys.getdlopenflags()
  sys.setdlopenflags(os.RTLD_NOW | os.RTLD_LOCAL | os.RTLD_DEEPBIND)
  try:
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
  finally:
    sys.setdlopenflags(flags)
  return module


sys.modules[__name__] = _load()
