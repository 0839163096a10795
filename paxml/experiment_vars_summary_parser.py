"""Reads back `experiment_utils.get_cls_vars_summary` text as {variable: value}.

Kept free of paxml imports so that tools reading summary files stay light. Values that are
Python literals come back as such; others (objects' reprs, bare strings) stay strings.
"""

import ast
from typing import Any

from absl import logging


def parse(cls_vars_summary: str) -> dict[str, Any]:
  """{name: value} of every `    NAME: value` line; class header lines are skipped."""
  cls_vars = {}
  for line in cls_vars_summary.splitlines():
    stripped = line.strip()
    if not stripped or stripped.endswith(":"):
      continue
    name, sep, text = line.partition(":")
    if not sep:
      logging.warning("Ignoring a summary line that is not `NAME: value`: %s", line)
      continue
    text = text.strip()
    try:
      cls_vars[name.strip()] = ast.literal_eval(text)
    except (ValueError, SyntaxError):
      cls_vars[name.strip()] = text
  return cls_vars
