"""What a profile holds and whether XLA will use it: top costs, coverage, dropped entries.

XLA's GPU scheduler uses an entry `<fingerprint>::<name>` only when `<fingerprint>` is the module's
`fingerprint_before_lhs`, and an entry `<name>` for any module; everything else is dropped without
a word. An instruction without an entry falls back to XLA's analytical estimate. This report shows
both: which entries would be dropped, and which share of the module's scheduled instructions has a
measured cost.
"""

from __future__ import annotations

import collections
import dataclasses
import os

from profiling import _pgle
from profiling import hlo_text as hlo_text_lib

_SEPARATOR = "::"


def split_name(name: str) -> tuple[str | None, str]:
  """("fp", "fusion.1") for "fp::fusion.1", (None, "fusion.1") for "fusion.1"."""
  fingerprint, sep, instruction = name.rpartition(_SEPARATOR)
  return (fingerprint, instruction) if sep else (None, name)


@dataclasses.dataclass(frozen=True)
class Report:
  costs: tuple[tuple[str, float], ...]  # (name, cost_us), most expensive first.
  fingerprints: dict[str | None, int]  # Entries per fingerprint (None: unprefixed).
  module_fingerprint: str | None = None  # From the HLO text, when given.
  dropped: tuple[str, ...] = ()  # Entries XLA would ignore for this module (fingerprint mismatch).
  scheduled: int | None = None  # Instructions of the module a profile can time.
  covered: tuple[str, ...] = ()  # Those that have a usable cost.
  uncovered: tuple[str, ...] = ()  # Those that do not (they get XLA's analytical estimate).
  unknown: tuple[
    str, ...
  ] = ()  # Usable entries naming no instruction of the module (stale profile?).

  @property
  def total_us(self) -> float:
    return sum(c for _, c in self.costs)

  @property
  def coverage(self) -> float | None:
    """Share of the module's scheduled instructions with a usable cost (None without HLO text)."""
    if self.scheduled is None:
      return None
    return len(self.covered) / self.scheduled if self.scheduled else 0.0

  def format(self, top: int = 20) -> str:
    lines = [f"{len(self.costs)} instruction costs, {self.total_us:.1f} us in total"]
    for fingerprint, count in sorted(self.fingerprints.items(), key=lambda kv: -kv[1]):
      label = (
        "no fingerprint (used for any module)"
        if fingerprint is None
        else f"fingerprint {fingerprint}"
      )
      lines.append(f"  {count} entries with {label}")
    if len([f for f in self.fingerprints if f is not None]) > 1 and self.module_fingerprint is None:
      lines.append(
        "  WARNING: several fingerprints: XLA uses only the entries of the module it compiles; "
        "pass the module's HLO text (--hlo) to see which."
      )
    lines.append(f"Top {min(top, len(self.costs))} by cost:")
    for name, cost in self.costs[:top]:
      share = 100 * cost / self.total_us if self.total_us else 0
      lines.append(f"  {cost:12.3f} us {share:5.1f}%  {name}")
    if self.scheduled is not None:
      lines.append(
        f"Coverage: {len(self.covered)} of {self.scheduled} scheduled instructions have a "
        f"measured cost ({100 * self.coverage:.1f}%); the others get XLA's analytical estimate."
      )
      if self.uncovered:
        lines.append(
          "  without cost: "
          + ", ".join(self.uncovered[:10])
          + (" ..." if len(self.uncovered) > 10 else "")
        )
      if self.module_fingerprint is None:
        lines.append(
          "  The HLO text has no fingerprint_before_lhs: it was not compiled by XLA's GPU "
          "latency-hiding scheduler, so only unprefixed entries can match."
        )
    if self.dropped:
      lines.append(
        f"DROPPED: {len(self.dropped)} entries have another fingerprint than the module "
        f"({self.module_fingerprint}) and XLA will silently ignore them. Re-collect the "
        "profile from this exact program (same code, flags, shapes and XLA version)."
      )
    if self.unknown:
      lines.append(
        f"{len(self.unknown)} entries name no instruction of this module (e.g. "
        f"{', '.join(self.unknown[:5])}): the profile may be from another version of the program."
      )
    return "\n".join(lines)


def _load(profile: bytes | str | os.PathLike) -> list[tuple[str, float]]:
  if isinstance(profile, bytes):
    return _pgle.parse_profile(profile)
  path = os.fspath(profile)
  with open(path, "rb") as f:
    return _pgle.parse_profile(f.read(), path.endswith(".pbtxt"))


def report(profile: bytes | str | os.PathLike, hlo_text: str | None = None) -> Report:
  """Summarizes `profile` (bytes, or a `.pb`/`.pbtxt` path), against `hlo_text` when given.

  `hlo_text` is the compiled module (`jax.jit(f).lower(...).compile().as_text()`, or XLA's dump
  `*after_optimizations.txt`) that the profile is meant for.
  """
  costs = _load(profile)
  by_cost = tuple(sorted(costs, key=lambda nc: (-nc[1], nc[0])))
  fingerprints = collections.Counter(split_name(name)[0] for name, _ in costs)
  if hlo_text is None:
    return Report(by_cost, dict(fingerprints))

  module = hlo_text_lib.summarize(hlo_text)
  usable, dropped = set(), []
  for name, _ in costs:
    fingerprint, instruction = split_name(name)
    if fingerprint is None or fingerprint == module.fingerprint:
      usable.add(instruction)
    else:
      dropped.append(name)
  covered = tuple(sorted(n for n in module.scheduled if n in usable))
  uncovered = tuple(sorted(n for n in module.scheduled if n not in usable))
  unknown = tuple(sorted(n for n in usable if n not in module.all_names))
  return Report(
    by_cost,
    dict(fingerprints),
    module.fingerprint,
    tuple(dropped),
    len(module.scheduled),
    covered,
    uncovered,
    unknown,
  )
