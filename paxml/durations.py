"""Reading durations such as Pax's `save_keep_interval_duration='12h'`."""

import datetime
import re

Duration = datetime.timedelta | float | int | str

_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(value: Duration | None) -> datetime.timedelta | None:
  """Returns `value` as a timedelta: seconds, or a string like '12h', '1h30m', '90s'."""
  if value is None or isinstance(value, datetime.timedelta):
    return value
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    return datetime.timedelta(seconds=value)
  if isinstance(value, str):
    parts = re.findall(r"(\d+(?:\.\d+)?)([dhms])", value.strip())
    if parts and "".join(n + u for n, u in parts) == value.replace(" ", ""):
      return datetime.timedelta(seconds=sum(float(n) * _UNIT_SECONDS[u] for n, u in parts))
  raise ValueError(
    f"Cannot read {value!r} as a duration; pass a datetime.timedelta, a number of "
    "seconds, or a string of <number><unit> parts with units d/h/m/s, e.g. '12h'."
  )
