"""The little we need from an HLO module's text: scheduled instructions and the fingerprint.

Reads what `jax.jit(f).lower(...).compile().as_text()` prints (or an XLA dump's
`*after_optimizations.txt`). Not an HLO parser: names, opcodes and which computation they are in.
"""

from __future__ import annotations

import dataclasses
import re

# Instructions that never run as kernels or transfers, so no profile can time them.
FREE_OPCODES = frozenset(
  {
    "parameter",
    "constant",
    "get-tuple-element",
    "tuple",
    "bitcast",
    "after-all",
    "add-dependency",
    "opt-barrier",
    "domain",
  }
)

# `ENTRY %main.3 (p: f32[2]) -> f32[2] {` or `%fused_computation (...) -> ... {` (the `%` is
# optional in newer XLA).
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
# Computations run inside another instruction (fusion bodies, async wrappers, reducers), not
# scheduled on their own.
_CALLED = re.compile(r"\b(?:calls|to_apply)=\{?%?([\w.\-]+)")
_FINGERPRINT = re.compile(r'fingerprint_before_lhs="([^"]*)"')


@dataclasses.dataclass(frozen=True)
class HloModuleSummary:
  # Instructions the latency-hiding scheduler places and a profile can time, by name -> opcode.
  scheduled: dict[str, str]
  # All instruction names in the text, for telling stale profile entries from real ones.
  all_names: frozenset[str]
  # `fingerprint_before_lhs` of the entry computation's root, None when the module was not
  # compiled with the GPU latency-hiding scheduler.
  fingerprint: str | None


def _opcode(rest: str) -> str:
  """The opcode in `f32[2]{0} add(a, b), ...` or `(f32[], s32[]) tuple(...)`."""
  i = 0
  if rest.startswith("("):  # A tuple shape: skip to its closing parenthesis.
    depth = 0
    for i, c in enumerate(rest):
      depth += c == "("
      depth -= c == ")"
      if depth == 0:
        break
    i += 1
  else:
    i = rest.find(" ")
    if i < 0:
      return ""
  match = re.match(r"\s*([\w\-]+)\(", rest[i:])
  return match.group(1) if match else ""


def summarize(hlo_text: str) -> HloModuleSummary:
  computations: dict[str, list[tuple[str, str]]] = {}
  called: set[str] = set()
  fingerprint = None
  entry = None
  current = None
  for line in hlo_text.splitlines():
    computation = _COMPUTATION.match(line)
    if computation and not line.startswith((" ", "\t")):
      current = computation.group(2)
      computations[current] = []
      if computation.group(1):
        entry = current
      continue
    instruction = _INSTRUCTION.match(line)
    if instruction is None or current is None:
      continue
    name, rest = instruction.group(2), instruction.group(3)
    computations[current].append((name, _opcode(rest)))
    called.update(_CALLED.findall(rest))
    if instruction.group(1) and current == entry:
      found = _FINGERPRINT.search(rest)
      fingerprint = found.group(1) if found else None
  scheduled = {
    name: opcode
    for computation, instructions in computations.items()
    if computation not in called
    for name, opcode in instructions
    if opcode not in FREE_OPCODES
  }
  all_names = frozenset(n for instructions in computations.values() for n, _ in instructions)
  return HloModuleSummary(scheduled, all_names, fingerprint)
