"""paxml.data: the inputs an experiment trains and evaluates on.

Public modules (import them directly; this file imports nothing, so `import paxml.data.base_input`
does not pull in TensorFlow):
  base_input: `BaseInput`, the contract of every input (sizes, multihost sharding, the eval table,
    `get_state`/`set_state` for input checkpointing), and `InputConfigError`.
  indexed_input: `IndexedInput`, BaseInput over index-addressable examples (sharding, eval
    padding, O(1) restore).
  synthetic: `SyntheticLmData` (Pax's constant LM batches) and `SyntheticRandomLmData` (random
    tokens, for benchmarks).
"""

__all__ = [
    "base_input",
    "indexed_input",
    "synthetic",
]
