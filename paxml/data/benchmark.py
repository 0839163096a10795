r"""Measures the text pipeline's throughput in tokens per second.

    ./bazelw run //paxml/data:prepare -- --output_dir=/tmp/kjv
    ./bazelw run //paxml/data:benchmark -- --data_dir=/tmp/kjv

Counts the real (weight > 0) tokens of the batches `TextInput.get_next()` returns over
--num_batches batches after --warmup_batches, on one host. Compare with what the trainer consumes
per second on the demo model (tokens/s in its train summaries): the input should be >= 10x faster
so it never holds the device up.
"""

from __future__ import annotations

import os
import time
from typing import Sequence

from absl import app
from absl import flags

from paxml.data import text_pipeline

_DATA_DIR = flags.DEFINE_string("data_dir", "/tmp/kjv", "Output directory of the prepare tool.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 16, "Rows per batch.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 128, "Tokens per row.")
_PACKING = flags.DEFINE_enum("packing", "pack", ["concat", "pack", "pad"], "Packing mode.")
_NUM_BATCHES = flags.DEFINE_integer("num_batches", 300, "Batches to time.")
_WARMUP = flags.DEFINE_integer("warmup_batches", 20, "Batches read before timing starts.")


def measure(inp: text_pipeline.TextInput, num_batches: int, warmup: int) -> dict[str, float]:
  for _ in range(warmup):
    inp.get_next()
  tokens = 0
  start = time.perf_counter()
  for _ in range(num_batches):
    tokens += int(inp.get_next().weights.sum())
  seconds = time.perf_counter() - start
  return {"tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds,
          "batches_per_second": num_batches / seconds}


def main(argv: Sequence[str]) -> None:
  del argv
  start = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
  data_dir = os.path.join(start, os.path.expanduser(_DATA_DIR.value))
  inp = text_pipeline.TextInput(
      file_pattern=os.path.join(data_dir, "train-*.tfrecord"),
      tokenizer_path=os.path.join(data_dir, "spm.model"), batch_size=_BATCH_SIZE.value,
      seq_len=_SEQ_LEN.value, packing=_PACKING.value)
  r = measure(inp, _NUM_BATCHES.value, _WARMUP.value)
  print(f"TextInput ({_PACKING.value}, batch {_BATCH_SIZE.value} x {_SEQ_LEN.value}): "
        f"{r['tokens']:,} tokens in {r['seconds']:.2f} s = {r['tokens_per_second']:,.0f} "
        f"tokens/s ({r['batches_per_second']:.1f} batches/s)")


if __name__ == "__main__":
  app.run(main)
