r"""Turns a text corpus into TFRecord shards and a SentencePiece model for `TextInput`.

    ./bazelw run //paxml/data:prepare -- --output_dir=/tmp/kjv

reads the King James Bible that the @corpus repository built (see paxml/data/README.md) and
writes, under --output_dir:

  train-00000-of-00008.tfrecord ...  tf.train.Example {text: bytes} per document (chapter)
  eval-00000-of-00001.tfrecord       the held-out documents
  spm.model, spm.vocab               SentencePiece model trained on the train documents only
  summary.json                       counts, token statistics and the unigram entropy

then prints the same summary. The unigram entropy (nats per token of the train documents'
token distribution, and its cross-entropy on the eval documents) is the loss a model that ignores
context would reach: a trained LM's eval log-perplexity should be well below it.
"""

from __future__ import annotations

import collections
import json
import math
import os
import sys
import traceback
from typing import Any, Sequence

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tqdm

from hostenv import quiet_tensorflow
from hostenv import user_paths
from paxml.data import corpus
from paxml.data import tokenizer as tokenizer_lib

tf = quiet_tensorflow.import_tensorflow()

_DEFAULT_INPUT = "external/corpus/kjv.txt"  # the @corpus//:kjv runfile; see _find_input

_INPUT = flags.DEFINE_string("input", _DEFAULT_INPUT, "Text file to read (default: the KJV).")
_FORMAT = flags.DEFINE_enum("format", "kjv", corpus.FORMATS, "How the file splits into documents.")
# Checked in main rather than with required=True, so tests can import this module.
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where to write the shards and the model.")
_NUM_SHARDS = flags.DEFINE_integer(
  "num_shards",
  8,
  "Train TFRecord shards (>= the number of infeed hosts, so each host reads whole files).",
)
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 4096, "SentencePiece vocabulary size.")
_MODEL_TYPE = flags.DEFINE_enum("model_type", "unigram", ["unigram", "bpe"], "SentencePiece model.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", 20, "Hold out one document in this many.")
_REPLACE_INVALID_UTF8 = flags.DEFINE_bool(
  "replace_invalid_utf8",
  False,
  "Replace bytes that are not valid UTF-8 with U+FFFD instead of stopping with an error.",
)


def run(
  input_path: str,
  fmt: str,
  output_dir: str,
  num_shards: int = 8,
  vocab_size: int = 4096,
  model_type: str = "unigram",
  eval_every: int = 20,
  progress: bool = True,
  replace_invalid_utf8: bool = False,
) -> dict[str, Any]:
  """Writes the shards, the model and summary.json; returns the summary."""
  docs = corpus.read_documents(input_path, fmt, replace_invalid_utf8)
  if len(docs) < eval_every:
    raise ValueError(
      f"{input_path}: {len(docs)} documents in format {fmt!r}; need at least "
      f"eval_every={eval_every} to hold one out. Check --format."
    )
  train, evals = corpus.split_train_eval(docs, eval_every)
  os.makedirs(output_dir, exist_ok=True)

  model_path = os.path.join(output_dir, "spm.model")
  print(
    f"Training a {vocab_size}-piece SentencePiece {model_type} model on {len(train)} documents ...",
    flush=True,
  )
  tok = tokenizer_lib.train(
    (text for _, text in train), model_path, vocab_size, model_type, input_sentence_size=0
  )
  with open(os.path.join(output_dir, "spm.vocab"), "w", encoding="utf-8") as f:
    f.writelines(f"{tok.id_to_piece(i)}\n" for i in range(tok.vocab_size))

  files = {}
  counts = {}
  bar = tqdm.tqdm(total=len(docs), unit="doc", desc="Writing TFRecords", disable=not progress)
  for split, split_docs, shards in (("train", train, num_shards), ("eval", evals, 1)):
    paths = [
      os.path.join(output_dir, f"{split}-{i:05d}-of-{shards:05d}.tfrecord") for i in range(shards)
    ]
    writers = [tf.io.TFRecordWriter(p) for p in paths]
    token_counts = collections.Counter()
    for i, (_, text) in enumerate(split_docs):
      feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode("utf-8")]))
      writers[i % shards].write(
        tf.train.Example(features=tf.train.Features(feature={"text": feature})).SerializeToString()
      )
      token_counts.update(tok.encode([text])[0].tolist())
      bar.update(1)
    for w in writers:
      w.close()
    files[split] = paths
    counts[split] = token_counts
  bar.close()

  summary = {
    "input": input_path,
    "format": fmt,
    "documents": {"train": len(train), "eval": len(evals)},
    "characters": {"train": sum(len(t) for _, t in train), "eval": sum(len(t) for _, t in evals)},
    "tokens": {split: int(sum(c.values())) for split, c in counts.items()},
    "tokenizer": {"path": model_path, "vocab_size": tok.vocab_size, "model_type": model_type},
    "train_pattern": os.path.join(output_dir, f"train-*-of-{num_shards:05d}.tfrecord"),
    "eval_pattern": os.path.join(output_dir, "eval-*-of-00001.tfrecord"),
    "files": {split: paths for split, paths in files.items()},
    **unigram_entropies(counts["train"], counts["eval"], tok.vocab_size),
  }
  with open(os.path.join(output_dir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
  return summary


def unigram_entropies(
  train: collections.Counter, evals: collections.Counter, vocab_size: int
) -> dict[str, float]:
  """Unigram entropy of the train tokens, and add-one-smoothed cross-entropy on eval (nats)."""
  n = sum(train.values())
  p = np.array([c / n for c in train.values()])
  entropy = float(-(p * np.log(p)).sum())
  denominator = n + vocab_size
  eval_n = sum(evals.values())
  cross = -sum(c * math.log((train.get(t, 0) + 1) / denominator) for t, c in evals.items())
  return {
    "unigram_entropy_nats": entropy,
    "unigram_eval_cross_entropy_nats": float(cross / max(eval_n, 1)),
  }


def format_summary(summary: dict[str, Any]) -> str:
  lines = [
    f"Read {summary['input']} ({summary['format']}): "
    f"{summary['documents']['train']} train + {summary['documents']['eval']} eval documents, "
    f"{summary['characters']['train'] + summary['characters']['eval']:,} characters.",
    f"Tokenizer: {summary['tokenizer']['path']} ({summary['tokenizer']['vocab_size']} pieces, "
    f"{summary['tokenizer']['model_type']}).",
    f"Tokens: {summary['tokens']['train']:,} train, {summary['tokens']['eval']:,} eval "
    f"({summary['characters']['train'] / max(summary['tokens']['train'], 1):.2f} chars/token).",
    f"Train: {len(summary['files']['train'])} files {summary['train_pattern']}",
    f"Eval:  {len(summary['files']['eval'])} file  {summary['eval_pattern']}",
    f"Unigram entropy {summary['unigram_entropy_nats']:.3f} nats/token (train); unigram "
    f"cross-entropy on eval {summary['unigram_eval_cross_entropy_nats']:.3f}: an LM's eval "
    "log-perplexity should end well below this.",
  ]
  return "\n".join(lines)


def _find_input(path: str) -> str:
  """A user path (relative to where they ran bazel), or the @corpus runfile."""
  if path == _DEFAULT_INPUT:
    # With --nolegacy_external_runfiles the external repository sits beside the main one.
    for candidate in (path, os.path.join("..", "corpus", "kjv.txt")):
      if os.path.isfile(candidate):
        return os.path.abspath(candidate)
    raise FileNotFoundError(
      "The KJV corpus is not in this program's runfiles; run the tool through Bazel "
      "(`./bazelw run //paxml/data:prepare -- ...`), which builds @corpus//:kjv, or pass "
      "--input=FILE."
    )
  return user_paths.resolve(path)


def main(argv: Sequence[str]) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not _OUTPUT_DIR.value:
    raise app.UsageError("--output_dir is required: the directory to write the data into.")
  try:
    summary = run(
      _find_input(_INPUT.value),
      _FORMAT.value,
      user_paths.resolve(_OUTPUT_DIR.value),
      _NUM_SHARDS.value,
      _VOCAB_SIZE.value,
      _MODEL_TYPE.value,
      _EVAL_EVERY.value,
      progress=True,
      replace_invalid_utf8=_REPLACE_INVALID_UTF8.value,
    )
  except (ValueError, OSError, RuntimeError) as e:
    # One line (what, and what to do); --verbosity=1 adds the traceback.
    if logging.get_verbosity() >= logging.DEBUG:
      traceback.print_exc()
    print(f"error: {e}", file=sys.stderr)
    return 1
  print(format_summary(summary))
  return 0


if __name__ == "__main__":
  app.run(main)
