"""Gives every sharding annotation in a config its own objects.

Sharing does not matter for sharding annotations, but Fiddle keeps it (two layers whose `wt`
is the same list stay tied); codegen and graphs read better without it.
"""

from typing import Any, TypeVar

from fiddle import daglish

from paxml.tools.fiddle import remove_sharding

_T = TypeVar("_T")


def _deep_copy(value: Any) -> Any:
  """A copy of `value` in which no two places share an object (unlike `copy.deepcopy`, which
  keeps `[x, x]` as two references to one copy)."""
  return daglish.BasicTraversal.run(lambda x, state: state.map_children(x), value)


class _UnmemoizedShardingTraversal(daglish.MemoizedTraversal):
  """Memoizes everything but sharding annotations, so each place gets its own copy."""

  def apply(self, value: Any, state: Any) -> Any:
    result = super().apply(value, state)
    if remove_sharding._is_sharding_annotation(value, state.current_path):  # pylint: disable=protected-access
      del self.memo[id(value)]
    return result


def unshare_sharding(config: _T) -> _T:
  """A copy of `config` whose sharding annotations share no objects."""

  def visit(value: Any, state: daglish.State) -> Any:
    if remove_sharding._is_sharding_annotation(value, state.current_path):  # pylint: disable=protected-access
      return _deep_copy(value)
    return state.map_children(value)

  return _UnmemoizedShardingTraversal.run(visit, config)
