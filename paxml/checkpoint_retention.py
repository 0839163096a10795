"""Which checkpoints to delete: Pax's `save_max_to_keep`, `keep_period` and
`save_keep_interval_duration`, counted over verified steps only."""


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
