"""Pax's argument checks: functions that raise a real exception (ValueError by default).

`assert` statements vanish under `python -O` and give poor messages; these don't. Each check
names the failing argument the way the caller wrote it, read from the calling line:

  asserts.eq(p.atten_dim, p.model_dim // p.dim_per_head)
  # ValueError: `p.atten_dim=8` must be equal to `p.model_dim // p.dim_per_head=16`.

Every check takes `value_str*=` (replaces the argument's text; use it when the call spans several
lines, since only the calling line is read), `msg=` (replaces the whole message) and
`exception_type=`. Checks: none, not_none, eq, ne, instance, subclass, le, lt, ge, gt, in_set,
between, assert_same_structure.

`with AssertsContext(enabled=False):` turns every check off (contexts nest; the innermost wins),
e.g. while exporting with symbolic shapes, where comparisons cannot be decided.
"""

from __future__ import annotations

import dataclasses
import linecache
import re
import sys
import threading
from typing import Any, Sequence

import jax

_CONTEXTS = threading.local()


def _stack() -> list[AssertsContext]:
  if not hasattr(_CONTEXTS, "stack"):
    _CONTEXTS.stack = []
  return _CONTEXTS.stack


@dataclasses.dataclass
class AssertsContext:
  """Turns the checks of this module on or off inside a `with` block (per thread)."""

  enabled: bool = True

  def __enter__(self) -> AssertsContext:
    _stack().append(self)
    return self

  def __exit__(self, *unused_exc_info) -> None:
    stack = _stack()
    if not stack or stack[-1] is not self:
      raise RuntimeError("AssertsContext exited out of order: contexts must nest.")
    stack.pop()

  @staticmethod
  def assertions_enabled() -> bool:
    """Whether the innermost open context enables checks (True when none is open)."""
    stack = _stack()
    return stack[-1].enabled if stack else True


_OPEN, _CLOSE = "([{", ")]}"


def _split_call_args(text: str) -> list[str]:
  """Splits the text after `name(` into its top-level arguments, up to the closing `)`."""
  args, depth, start, quote, i = [], 0, 0, None, 0
  while i < len(text):
    ch = text[i]
    if quote:
      if ch == "\\":
        i += 1
      elif ch == quote:
        quote = None
    elif ch in "'\"":
      quote = ch
    elif ch in _OPEN:
      depth += 1
    elif ch in _CLOSE:
      if depth == 0:
        args.append(text[start:i].strip())
        return [a for a in args if a]
      depth -= 1
    elif ch == "," and depth == 0:
      args.append(text[start:i].strip())
      start = i + 1
    i += 1
  args.append(text[start:].strip())  # the call continues on the next line
  return [a for a in args if a]


def _caller_arg_texts(check_name: str) -> list[str]:
  """The argument texts of the `check_name(...)` call on the line that called the check.

  Frame 0 is this function, 1 is `_fail`, 2 the check, 3 the user's line.
  """
  try:
    frame = sys._getframe(3)  # pylint: disable=protected-access
  except ValueError:
    return []
  line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
  call = re.search(r"(?<![\w])" + check_name + r"\(", line)
  if call is None:
    return []
  return _split_call_args(line[call.end() :])


def _fail(check_name, template, values, value_strs, msg, exception_type):
  """Raises `exception_type` with `msg`, or with `template` filled from the named values."""
  if msg:
    raise exception_type(msg)
  texts = None
  named = []
  for i, (value, value_str) in enumerate(zip(values, value_strs)):
    if value_str is None:
      if texts is None:
        texts = _caller_arg_texts(check_name)
      value_str = f"{texts[i]}={value}" if i < len(texts) else f"{value}"
    named.append(value_str)
  raise exception_type(template.format(*named))


def none(
  value: Any,
  *,
  value_str: str | None = None,
  msg: str | None = None,
  exception_type: type[Exception] = ValueError,
) -> None:
  """Raises unless `value is None`."""
  if AssertsContext.assertions_enabled() and value is not None:
    _fail("none", "`{}` must be `None`.", [value], [value_str], msg, exception_type)


def not_none(
  value: Any,
  *,
  value_str: str | None = None,
  msg: str | None = None,
  exception_type: type[Exception] = ValueError,
) -> None:
  """Raises if `value is None`."""
  if AssertsContext.assertions_enabled() and value is None:
    _fail("not_none", "`{}` must not be `None`.", [value], [value_str], msg, exception_type)


def _compare(check_name, holds, relation):
  """Makes a two-value check that raises when `holds(value1, value2)` is false."""

  def check(
    value1: Any,
    value2: Any,
    *,
    value_str1: str | None = None,
    value_str2: str | None = None,
    msg: str | None = None,
    exception_type: type[Exception] = ValueError,
  ) -> None:
    if AssertsContext.assertions_enabled() and not holds(value1, value2):
      _fail(
        check_name,
        "`{}` " + relation + " `{}`.",
        [value1, value2],
        [value_str1, value_str2],
        msg,
        exception_type,
      )

  check.__name__ = check.__qualname__ = check_name
  check.__doc__ = f"Raises unless this holds: `value1` {relation} `value2`."
  return check


eq = _compare("eq", lambda a, b: a == b, "must be equal to")
ne = _compare("ne", lambda a, b: a != b, "must not be equal to")
le = _compare("le", lambda a, b: a <= b, "must be less than or equal to")
lt = _compare("lt", lambda a, b: a < b, "must be strictly less than")
ge = _compare("ge", lambda a, b: a >= b, "must be greater than or equal to")
gt = _compare("gt", lambda a, b: a > b, "must be strictly greater than")


def instance(
  value: Any,
  instances: Any,
  *,
  value_str: str | None = None,
  msg: str | None = None,
  exception_type: type[Exception] = ValueError,
) -> None:
  """Raises unless `isinstance(value, instances)` (a type or a tuple of types)."""
  if AssertsContext.assertions_enabled() and not isinstance(value, instances):
    _fail(
      "instance",
      "`{}` must be of type `" + str(instances) + "`.",
      [value],
      [value_str],
      msg,
      exception_type,
    )


def subclass(
  value: Any,
  subclasses: Any,
  *,
  value_str: str | None = None,
  msg: str | None = None,
  exception_type: type[Exception] = ValueError,
) -> None:
  """Raises unless `issubclass(value, subclasses)` (a class or a tuple of classes)."""
  if AssertsContext.assertions_enabled() and not issubclass(value, subclasses):
    _fail(
      "subclass",
      "`{}` must be a subclass of `" + str(subclasses) + "`.",
      [value],
      [value_str],
      msg,
      exception_type,
    )


def _is_member(value: Any, elements: Sequence[Any]) -> bool:
  try:
    return value in elements
  except jax.errors.InconclusiveDimensionOperation:
    # A symbolic dimension compared with a constant cannot be decided: that element is no match.
    for element in elements:
      try:
        if value == element:
          return True
      except jax.errors.InconclusiveDimensionOperation:
        continue
    return False


def in_set(
  value: Any,
  elements: Sequence[Any],
  *,
  value_str: str | None = None,
  msg: str | None = None,
  exception_type: type[Exception] = ValueError,
) -> None:
  """Raises unless `value` is one of `elements`."""
  if AssertsContext.assertions_enabled() and not _is_member(value, elements):
    _fail(
      "in_set",
      "`{}` must be within `" + str(elements) + "`.",
      [value],
      [value_str],
      msg,
      exception_type,
    )


def between(
  value: Any,
  min_value: Any,
  max_value: Any,
  *,
  left_strict: bool = False,
  right_strict: bool = False,
  value_str: str | None = None,
  msg: str | None = None,
  exception_type: type[Exception] = ValueError,
) -> None:
  """Raises unless `min_value <= value <= max_value` (`<` on a side marked strict)."""
  if not AssertsContext.assertions_enabled():
    return
  above = min_value < value if left_strict else min_value <= value
  below = value < max_value if right_strict else value <= max_value
  if above and below:
    return
  interval = f"{'(' if left_strict else '['}{min_value}, {max_value}{')' if right_strict else ']'}"
  _fail(
    "between",
    "`{}` must be in the range `" + interval + "`.",
    [value],
    [value_str],
    msg,
    exception_type,
  )


def _containers_only_structure(tree: Any):
  """The tree's structure seen through dicts, lists and tuples only (other values are leaves)."""
  if hasattr(tree, "ToNestedDict"):  # a NestedMap compares as the dict it holds
    tree = tree.ToNestedDict()
  return jax.tree_util.tree_structure(
    tree, is_leaf=lambda node: not isinstance(node, (dict, list, tuple))
  )


def assert_same_structure(
  x: Any, y: Any, *, msg: str | None = None, exception_type: type[Exception] = ValueError
) -> None:
  """Raises unless `x` and `y` nest dicts, lists and tuples the same way (leaves may differ;
  None counts as a leaf; a NestedMap counts as a dict)."""
  if not AssertsContext.assertions_enabled():
    return
  sx, sy = _containers_only_structure(x), _containers_only_structure(y)
  if sx == sy:
    return
  raise exception_type(
    msg
    or f"Not the same structure\nEntire first structure: `{sx}`\nEntire second structure: `{sy}`\n"
  )
