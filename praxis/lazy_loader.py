"""Pax's LazyLoader: a module object that imports the real module on first attribute access.

    tf = lazy_loader.LazyLoader('tf', globals(), 'tensorflow.compat.v2')

`tf` costs nothing until `tf.<name>` is read; then the module is imported, replaces the loader in
the given globals under its local name, and the attribute is returned.
"""

import importlib
import types

from absl import logging


class LazyLoader(types.ModuleType):
  """Stands for module `name` in `parent_module_globals[local_name]` until first used."""

  def __init__(self, local_name, parent_module_globals, name, warning=None):
    self._local_name = local_name
    self._parent_module_globals = parent_module_globals
    self._warning = warning
    self.__module__ = name.rsplit(".", 1)[0]
    self.__wrapped__ = None
    super().__init__(name)

  def _load(self):
    module = importlib.import_module(self.__name__)
    self._parent_module_globals[self._local_name] = module
    if self._warning:
      logging.warning(self._warning)
      self._warning = None
    self.__dict__.update(module.__dict__)
    return module

  def __getattr__(self, item):
    return getattr(self._load(), item)

  def __dir__(self):
    return dir(self._load())

  def __repr__(self):
    return f"<LazyLoader {self.__name__} as {self._local_name}>"
