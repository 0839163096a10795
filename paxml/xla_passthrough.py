"""Batch values XLA cannot hold (strings, Python objects) travel beside the jitted step.

Pax's `paxml.xla_passthrough`: `split_out_xla_unsupported_batch` takes such values out of a
(nested) batch before it is sent to devices, and `merge_back_xla_unsupported_batch` puts them into
the step's (host-side) outputs again, so e.g. decode output processing still sees the raw text.

Pax's exact behaviour, which its callers rely on:
  * nothing unsupported: the same batch and partitioning spec objects come back, with `{}`;
  * a top-level key with any unsupported value below it leaves the returned batch entirely (its
    supported siblings included) and reappears, with only the unsupported values, in the
    unsupported dict; the returned spec keeps the supported part of a nested key's spec;
  * the caller's partitioning spec is never modified.
"""

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np


def _unsupported(value: Any) -> bool:
  dtype = np.asarray(value).dtype if not hasattr(value, "dtype") else value.dtype
  return np.issubdtype(dtype, np.str_) or np.issubdtype(dtype, np.object_)


def split_out_xla_unsupported_batch(
  batch: Any, partitioning_spec: Any = None
) -> tuple[Any, dict[str, Any], Any]:
  """Returns (batch without unsupported values, {key: unsupported values}, spec without them).

  Raises:
    NotImplementedError: unsupported values on a multi-process run (each host would need to
      forward its own; Pax does not support that either).
  """
  unsupported: dict[str, Any] = {}
  nested_specs: dict[str, Any] = {}
  for key, value in batch.items():
    if isinstance(value, Mapping) or hasattr(value, "items"):
      sub_spec = partitioning_spec.get(key) if partitioning_spec else None
      kept, sub_unsupported, kept_spec = split_out_xla_unsupported_batch(value, sub_spec)
      if sub_unsupported:
        batch[key] = kept
        unsupported[key] = sub_unsupported
        if partitioning_spec and key in partitioning_spec and kept_spec:
          nested_specs[key] = kept_spec
    elif _unsupported(value):
      unsupported[key] = value

  if not unsupported:
    return batch, {}, partitioning_spec
  if jax.process_count() > 1:
    raise NotImplementedError(
      f"batch keys {sorted(unsupported)} hold strings or objects, which cannot be forwarded "
      "beside the step on a multi-process run; drop them from the input (or encode them as "
      "numbers) for multi-host jobs"
    )
  kept_batch = {k: v for k, v in batch.items() if k not in unsupported}
  if partitioning_spec is None:
    return kept_batch, unsupported, None
  kept_spec = dict(nested_specs)
  kept_spec.update({k: v for k, v in partitioning_spec.items() if k not in unsupported})
  return kept_batch, unsupported, kept_spec


def merge_back_xla_unsupported_batch(out: Any, xla_unsupported_batch: Mapping[str, Any]) -> None:
  """Adds the values `split_out_xla_unsupported_batch` took out to `out`, in place."""
  if xla_unsupported_batch:
    out.update(xla_unsupported_batch)
