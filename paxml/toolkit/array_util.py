"""Leading-axis reshapes for micro-batches and pmap (bobbin's `array_util`)."""

from typing import Any

import jax


def split_leading_axis(
  n: int, tree: Any, *, leading_axis_name: str | None = None, split_group_name: str | None = None
) -> Any:
  """Reshapes every leaf from [n * m, ...] to [n, m, ...].

  Args:
    n: the number of groups (e.g. local devices).
    tree: the arrays to split.
    leading_axis_name: what the leading axis is (e.g. "batch size"), for the
      error message.
    split_group_name: what the groups are (e.g. "# of devices"), for the error
      message.

  Raises:
    ValueError: when a leading axis is not a multiple of `n`.
  """

  def split(x):
    lead = x.shape[0]
    if lead % n:
      hint = ""
      if leading_axis_name is not None:
        hint = f"\n{leading_axis_name} must be a multiple of {split_group_name}"
      raise ValueError(f"Trying to split {lead} rows into {n} groups." + hint)
    return x.reshape((n, lead // n) + tuple(x.shape[1:]))

  return jax.tree.map(split, tree)


def flatten_leading_axes(tree: Any, num_leading_axes: int = 2) -> Any:
  """Merges the first `num_leading_axes` axes of every leaf into one."""
  return jax.tree.map(lambda x: x.reshape((-1,) + tuple(x.shape[num_leading_axes:])), tree)
