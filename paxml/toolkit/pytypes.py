"""Type aliases of the toolkit (bobbin's `pytypes`), for self-documenting code."""

from collections.abc import Callable, Iterable
from typing import Any

# Any nested structure of arrays (dicts, tuples, dataclasses of arrays).
ArrayTree = Any
# One input batch: an array tree.
Batch = ArrayTree
# A backend name for `jax.jit`/`jax.pmap` ("cpu", "gpu", "tpu"), or None.
Backend = str | None
# A `jax.Device`.
Device = Any
# A parameter tree.
Parameter = ArrayTree
# A nullary function returning a fresh iterable of batches (one pass of a set).
BatchGen = Callable[[], Iterable[Batch]]
# Flax variable collections: {"params": ..., "batch_stats": ..., ...}.
VarCollection = dict[str, ArrayTree]
