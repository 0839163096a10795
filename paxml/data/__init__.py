"""paxml.data: the inputs an experiment trains and evaluates on.

Public modules (import them directly; this file imports nothing, so `import paxml.data.synthetic`
does not pull in TensorFlow). `BaseInput`, the contract every input follows, is Pax's
`praxis.base_input`.
  indexed_input: `IndexedInput`, BaseInput over index-addressable examples (sharding, eval
    padding, O(1) restore).
  synthetic: `SyntheticLmData` (Pax's constant LM batches) and `SyntheticRandomLmData` (random
    tokens, for benchmarks).
  tokenizer: `Tokenizer` (a SentencePiece model: encode, decode, ids_to_strings) and `train`.
  packing: `Packer`, `pack_all`: documents to LM rows by concatenation, packing with
    segment_ids/segment_pos, or padding.
  text_pipeline: `TextInput`, LM batches from TFRecord / JSONL / text files through tf.data
    (sharded, seeded shuffle, deterministic, resumable), `InputDataError`, `check_tfrecord`.
  corpus: `read_documents` (KJV chapters, paragraphs, lines), `split_train_eval`.
  prepare: the `bazel run //paxml/data:prepare` tool (`run`, `format_summary`).
  digits: `DigitsInput`, scikit-learn's 8x8 digits as a classification input.
  host_to_device: `to_global` (host batches -> global jax.Arrays with a batch sharding) and
    `Prefetcher` (does it ahead in a thread; `get_state` counts only consumed batches).
  demo_data: `ensure_prepared`, `text_input`: the KJV prepared on first use into a cache
    directory (DemoLm's data), `find_corpus` (the @corpus//:kjv runfile).
See README.md beside this file for the corpus and how to prepare it.
"""

__all__ = [
  "corpus",
  "demo_data",
  "digits",
  "host_to_device",
  "indexed_input",
  "packing",
  "prepare",
  "synthetic",
  "text_pipeline",
  "tokenizer",
]
