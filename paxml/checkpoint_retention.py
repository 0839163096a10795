"""Which checkpoints to delete: Pax's `save_max_to_keep`, `keep_period` and
`save_keep_interval_duration`, counted over verified steps only; and which set-aside steps under `<checkpoints>_corrupt/` to
delete (`set_aside_to_remove`)."""

import re


def steps_to_remove(
  complete: list[int],
  saved_at: dict[int, float | None],
  *,
  max_to_keep: int | None,
  keep_period: int | None = None,
  keep_seconds: float | None = None,
) -> list[int]:
  """The steps of `complete` (verified steps, oldest first) that retention deletes.

  Kept: the newest `max_to_keep`; every multiple of `keep_period`; and, walking from the oldest,
  each step saved at least `keep_seconds` after the previous kept one (`saved_at[step]`, seconds
  since the epoch; None: unknown, never kept for time). Steps not in `complete` (a newer save
  that never got its manifest) are not counted and never returned, so they cannot push a
  verified step out. `max_to_keep` None keeps everything.
  """
  if max_to_keep is None:
    return []
  keep = set(complete[-max_to_keep:]) if max_to_keep > 0 else set()
  last_kept_time = None
  for step in complete:
    when = saved_at.get(step)
    if keep_period and step % keep_period == 0:
      keep.add(step)
    if (
      keep_seconds is not None
      and when is not None
      and (last_kept_time is None or when - last_kept_time >= keep_seconds)
    ):
      keep.add(step)
    if step in keep and when is not None:
      last_kept_time = when
  return [s for s in complete if s not in keep]


# checkpoints_corrupt/ holds at most this many damaged steps older than the newest verified one.
MAX_DAMAGED_SET_ASIDE = 3
UNFINISHED_SUFFIX = ".unfinished"
_SET_ASIDE_NAME = re.compile(r"checkpoint_(\d{8})(\.unfinished)?(?:\.(\d+))?")


def set_aside_to_remove(names: list[str], newest_verified: int | None) -> list[str]:
  """The entries of `<checkpoints>_corrupt/` (`names`) to delete, given the newest step that
  verifies in the checkpoint directory.

  Only entries older than `newest_verified` go: a newer verified step supersedes them. Of those,
  every unfinished one (`checkpoint_N.unfinished`: killed before its checksums.json, nothing to
  inspect) goes, and damaged ones beyond the newest MAX_DAMAGED_SET_ASIDE. Names this code did
  not write are left alone.
  """
  if newest_verified is None:
    return []
  damaged, remove = [], []
  for name in names:
    match = _SET_ASIDE_NAME.fullmatch(name)
    if not match or int(match.group(1)) >= newest_verified:
      continue
    if match.group(2):
      remove.append(name)
    else:
      damaged.append((int(match.group(1)), int(match.group(3) or 0), name))
  damaged.sort()
  remove += [name for _, _, name in damaged[: max(0, len(damaged) - MAX_DAMAGED_SET_ASIDE)]]
  return sorted(remove)
