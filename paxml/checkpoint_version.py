"""Pax's checkpoint format versions (`paxml.checkpoint_version`): 1.1, or 1.2 with OCDBT."""

_VERSION = 1.1
_OCDBT_VERSION = 1.2
_VERSION_KEY = "version"


def get_version(tensorstore_use_ocdbt: bool | None = None) -> float:
  """The version a save writes; the caller must say whether tensorstore uses OCDBT."""
  if tensorstore_use_ocdbt is None:
    raise ValueError("Must set the value of `tensorstore_use_ocdbt` (True or False).")
  return _OCDBT_VERSION if tensorstore_use_ocdbt else _VERSION


def get_version_key() -> str:
  """The metadata key that holds the version."""
  return _VERSION_KEY
