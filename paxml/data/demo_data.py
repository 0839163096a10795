"""The demo's data: the KJV corpus prepared on first use into a cache directory.

`DemoLm` must train on real text from a fresh clone with one command, so nobody runs the prepare
tool by hand: the first input that needs the data prepares it (about 10 s on two cores) and later
runs reuse it.

  where the corpus comes from  @corpus//:kjv, a data dependency of //paxml:main, found in the
                               program's runfiles (`find_corpus`)
  where the data goes          $XDG_CACHE_HOME/paxml-monorepo/data/kjv-<corpus sha256[:12]>-v<vocab>
                               (~/.cache when XDG_CACHE_HOME is unset): one directory per corpus
                               version and vocabulary size, as `prepare` writes it
  who prepares it              the first process that takes the directory's lock; others wait and
                               then read what it wrote (several hosts or runs at once are safe)

`text_input(split, ...)` is what an experiment's dataset config calls: it prepares (or finds) the
data and returns a `TextInput` over the split. Building the config is what prepares, never
writing it, so abstract builds and config dumps need no corpus.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from typing import Any, Iterator, TYPE_CHECKING

from absl import logging

if TYPE_CHECKING:
  from paxml.data import text_pipeline  # For the annotation only: it imports TensorFlow.

SPLITS = ("train", "eval")
# Bump when prepare's output format changes, so that old caches are not read.
_FORMAT_VERSION = 1


def find_corpus() -> str:
  """The path of kjv.txt in the runfiles of the running Bazel program."""
  # This file is <runfiles>/<main repo>/paxml/data/demo_data.py; @corpus sits beside the main
  # repository (--nolegacy_external_runfiles) or under its external/ (the legacy layout).
  repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  roots = [os.path.dirname(repo_root), os.path.join(repo_root, "external")]
  if os.environ.get("RUNFILES_DIR"):
    roots.insert(0, os.environ["RUNFILES_DIR"])
  candidates = [os.path.join(root, "corpus", "kjv.txt") for root in roots]
  for path in candidates:
    if os.path.isfile(path):
      return path
  raise FileNotFoundError(
    f"The KJV corpus (@corpus//:kjv) is not in this program's runfiles (looked for "
    f"{candidates}). Run through Bazel (`./bazelw run //paxml:main -- ...`), whose :main target "
    "has the corpus as a data dependency, or give the experiment a CORPUS_PATH (a KJV text "
    "file) or a DATA_DIR written by `./bazelw run //paxml/data:prepare`. Outside Bazel (the "
    "installed wheels): `--fdl.CORPUS_PATH=/path/kjv.txt` (in a checkout, `./bazelw build "
    "@corpus//:kjv` puts it at `$(./bazelw info output_base)/external/corpus/kjv.txt`), or "
    "prepare any text file with `python -m paxml.data.prepare --input=FILE --format=paragraphs "
    "--vocab_size=1024 --output_dir=DIR` and pass `--fdl.DATA_DIR=DIR`."
  )


def cache_root() -> str:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "paxml-monorepo", "data")


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def default_data_dir(corpus_path: str, vocab_size: int) -> str:
  """The cache directory for this corpus file's content and vocabulary size."""
  return os.path.join(
    cache_root(), f"kjv-{_sha256(corpus_path)[:12]}-v{vocab_size}-f{_FORMAT_VERSION}"
  )


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
  """Holds an exclusive lock on `directory` (a lock file beside it) while preparing it."""
  os.makedirs(os.path.dirname(directory), exist_ok=True)
  with open(directory + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)


def _read_summary(data_dir: str) -> dict[str, Any] | None:
  # prepare.run writes summary.json last: its presence means the directory is complete.
  path = os.path.join(data_dir, "summary.json")
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def ensure_prepared(
  data_dir: str | None = None, corpus_path: str | None = None, vocab_size: int = 4096
) -> tuple[str, dict[str, Any]]:
  """Prepares the KJV into `data_dir` unless it is there already; returns (data_dir, summary).

  `data_dir=None` uses the cache (module docstring); `corpus_path=None` the @corpus runfile.
  A `data_dir` that already holds a summary.json is used as it is, whatever wrote it.
  """
  if data_dir is not None:
    summary = _read_summary(data_dir)
    if summary is not None:
      logging.info("Using the prepared data in %s", data_dir)
      return data_dir, summary
  corpus_path = corpus_path or find_corpus()
  data_dir = data_dir or default_data_dir(corpus_path, vocab_size)
  with _locked(data_dir):
    summary = _read_summary(data_dir)
    if summary is not None:
      logging.info(
        "Using the KJV prepared in %s (unigram entropy %.3f nats/token)",
        data_dir,
        summary["unigram_entropy_nats"],
      )
      return data_dir, summary
    logging.info(
      "Preparing the demo data (first use; about 10 s): reading %s, training a "
      "%d-piece SentencePiece model and writing TFRecord shards into %s",
      corpus_path,
      vocab_size,
      data_dir,
    )
    # Imported here, not at the top: prepare and text_pipeline pull in TensorFlow (seconds, and
    # notices on stderr), and `main` imports this module to register DemoLm.
    from paxml.data import prepare  # pylint: disable=g-import-not-at-top

    start = time.monotonic()
    summary = prepare.run(corpus_path, "kjv", data_dir, vocab_size=vocab_size, progress=False)
    logging.info(
      "Prepared in %.1f s:\n%s", time.monotonic() - start, prepare.format_summary(summary)
    )
  return data_dir, summary


def text_input(
  split: str,
  data_dir: str | None = None,
  corpus_path: str | None = None,
  vocab_size: int = 4096,
  **text_input_fields: Any,
) -> "text_pipeline.TextInput":
  """A TextInput over `split` ("train" or "eval") of the prepared KJV (prepared if needed).

  `text_input_fields` are TextInput's (batch_size, seq_len, packing, is_training, ...).
  """
  if split not in SPLITS:
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}.")
  data_dir, _ = ensure_prepared(data_dir, corpus_path, vocab_size)
  from paxml.data import text_pipeline  # pylint: disable=g-import-not-at-top

  return text_pipeline.TextInput(
    file_pattern=os.path.join(data_dir, f"{split}-*.tfrecord"),
    tokenizer_path=os.path.join(data_dir, "spm.model"),
    file_format="tfrecord",
    **text_input_fields,
  )
