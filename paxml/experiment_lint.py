"""Warns about an UPPERCASE experiment field that looks like a misspelt one (`NUM_TRIAN_STEPS`).

Pax experiments configure themselves with UPPERCASE class attributes that their `task()` and
`datasets()` read. A misspelt override is never read, and the run silently uses the base class's
value. Experiments also define attributes of their own for their own code, which this cannot
tell from typos, so the result is a warning, never an error: an attribute that nothing read
while the configs were built, one edit (insert, delete, replace or swap two neighbours) away
from one that was read.
"""

from typing import Any

from absl import logging


def _one_edit_apart(a: str, b: str) -> bool:
  """Whether `a` becomes `b` by one insertion, deletion, substitution or adjacent swap."""
  if a == b or abs(len(a) - len(b)) > 1:
    return False
  if len(a) == len(b):
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    if len(diff) == 1:
      return True
    return (
      len(diff) == 2
      and diff[1] == diff[0] + 1
      and a[diff[0]] == b[diff[1]]
      and a[diff[1]] == b[diff[0]]
    )
  short, long_ = (a, b) if len(a) < len(b) else (b, a)
  i = 0
  while i < len(short) and short[i] == long_[i]:
    i += 1
  return short[i:] == long_[i + 1 :]


def _uppercase_names(obj: Any) -> set[str]:
  names = {n for klass in type(obj).__mro__ for n in vars(klass)}
  names |= set(vars(obj))
  return {n for n in names if n.isupper() and not n.startswith("_")}


def unread_near_misses(experiment: Any, build=None) -> list[tuple[str, str]]:
  """(unread attribute, the read one it is one edit from) pairs, sorted.

  `build(probe)` builds the configs from `probe`, a copy of `experiment` that records which
  attributes are read; the default calls `task()`, `datasets()` and `decode_datasets()`.
  """
  read: set[str] = set()
  base = type(experiment)

  class _Recording(base):  # pylint: disable=missing-class-docstring
    def __getattribute__(self, name):
      if name.isupper():
        read.add(name)
      return super().__getattribute__(name)

  probe = object.__new__(_Recording)
  probe.__dict__.update(vars(experiment))
  read.clear()
  if build is None:

    def build(p):
      p.task()
      p.datasets()
      if hasattr(p, "decode_datasets"):
        p.decode_datasets()

  build(probe)
  unread = _uppercase_names(experiment) - read
  return sorted(
    (name, known) for name in unread for known in sorted(read) if _one_edit_apart(name, known)
  )


def warn_near_misses(experiment: Any, name: str) -> list[tuple[str, str]]:
  """Logs one warning per suspicious attribute of `experiment` (named `name`); returns them."""
  try:
    pairs = unread_near_misses(experiment)
  except Exception:  # pylint: disable=broad-exception-caught
    return []  # A check that fails must not stop a run the real build accepted.
  for unread, known in pairs:
    logging.warning(
      "%s.%s is never read; did you mean %s? (%s stays at %r.) If %s is your own field, "
      "ignore this.",
      name,
      unread,
      known,
      known,
      getattr(experiment, known, None),
      unread,
    )
  return pairs
