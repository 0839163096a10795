r"""The text pipeline's tokens/s against what the trainer consumes on the demo model.

    ./bazelw run //paxml/benchmarks:input_pipeline                      # DemoLm's data (prepared if needed)
    ./bazelw run //paxml/benchmarks:input_pipeline -- --data_dir=/tmp/kjv   # a directory from :prepare

In one run, on one host, with DemoLm's batch shape (--batch_size/--seq_len default to it):
  pipeline  real (weight > 0) tokens of the batches `TextInput.get_next()` returns, over
            --num_batches batches after --warmup_batches;
  trainer   tokens of the jitted `trainer.train_step` on DemoLm's model and optimizer, over
            --train_steps steps after one compiling step, each fed a batch read beforehand
            (so the pipeline's cost is not counted twice);
and prints their ratio. The input should be >= 10x faster so it never holds the device up.
"""

from __future__ import annotations

import os
import time
from typing import Sequence

from absl import app
from absl import flags

from hostenv import user_paths
from paxml.data import demo_data
from paxml.data import text_pipeline
from paxml.tasks.lm.params import demo

_DATA_DIR = flags.DEFINE_string(
  "data_dir",
  None,
  "Output directory of the prepare tool; default: DemoLm's (prepared into the cache on first use).",
)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", demo.DemoLm.BATCH_SIZE, "Rows per batch.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", demo.DemoLm.SEQ_LEN, "Tokens per row.")
_PACKING = flags.DEFINE_enum(
  "packing", demo.DemoLm.PACKING, ["concat", "pack", "pad"], "Packing mode."
)
_NUM_BATCHES = flags.DEFINE_integer("num_batches", 300, "Batches to time.")
_WARMUP = flags.DEFINE_integer("warmup_batches", 20, "Batches read before timing starts.")
_TRAIN_STEPS = flags.DEFINE_integer(
  "train_steps", 20, "Train steps to time; 0 skips the trainer side."
)


def measure(inp: text_pipeline.TextInput, num_batches: int, warmup: int) -> dict[str, float]:
  for _ in range(warmup):
    inp.get_next()
  tokens = 0
  start = time.perf_counter()
  for _ in range(num_batches):
    tokens += int(inp.get_next().weights.sum())
  seconds = time.perf_counter() - start
  return {
    "tokens": tokens,
    "seconds": seconds,
    "tokens_per_second": tokens / seconds,
    "batches_per_second": num_batches / seconds,
  }


def measure_trainer(batches: list, num_steps: int) -> dict[str, float]:
  """Tokens/s of DemoLm's jitted train step on `batches` (one compiling step, then timed)."""
  # Imported here: only this side needs JAX and the trainer.
  # pylint: disable=g-import-not-at-top
  import functools
  import jax
  import flax.linen as nn
  from paxml import train_states
  from paxml import trainer
  from praxis import pytypes

  # pylint: enable=g-import-not-at-top
  task = demo.DemoLm().task()
  optimizer, _ = train_states.make_optimizer(task)
  batches = [pytypes.NestedMap(jax.device_put(b)) for b in batches]
  state = nn.unbox(
    train_states.init_state(task.model, optimizer, jax.random.PRNGKey(0), batch_spec=batches[0])
  )
  step = jax.jit(
    functools.partial(
      trainer.train_step,
      model=task.model,
      optimizer=optimizer,
      num_microbatches=task.num_microbatches,
    ),
    donate_argnums=0,
  )
  rng = jax.random.PRNGKey(1)
  state, metrics = step(state, batches[0], rng)  # compiles
  jax.block_until_ready(metrics)
  start = time.perf_counter()
  for i in range(num_steps):
    state, metrics = step(state, batches[1 + i % (len(batches) - 1)], rng)
  jax.block_until_ready(metrics)
  seconds = time.perf_counter() - start
  tokens = num_steps * batches[0].ids.size
  return {
    "tokens": tokens,
    "seconds": seconds,
    "tokens_per_second": tokens / seconds,
    "steps_per_second": num_steps / seconds,
  }


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if _DATA_DIR.value:
    data_dir = user_paths.resolve(_DATA_DIR.value)
  else:
    data_dir, _ = demo_data.ensure_prepared(vocab_size=demo.DemoLm.VOCAB_SIZE)
  inp = text_pipeline.TextInput(
    file_pattern=os.path.join(data_dir, "train-*.tfrecord"),
    tokenizer_path=os.path.join(data_dir, "spm.model"),
    batch_size=_BATCH_SIZE.value,
    seq_len=_SEQ_LEN.value,
    packing=_PACKING.value,
    is_training=True,
  )
  r = measure(inp, _NUM_BATCHES.value, _WARMUP.value)
  print(
    f"pipeline: TextInput ({_PACKING.value}, batch {_BATCH_SIZE.value} x {_SEQ_LEN.value}, "
    f"{data_dir}): {r['tokens']:,} tokens in {r['seconds']:.2f} s = "
    f"{r['tokens_per_second']:,.0f} tokens/s ({r['batches_per_second']:.1f} batches/s)"
  )
  if _TRAIN_STEPS.value <= 0:
    return
  if inp.tokenizer.vocab_size > demo.DemoLm.VOCAB_SIZE:
    raise app.UsageError(
      f"{data_dir} has {inp.tokenizer.vocab_size} pieces; DemoLm's model "
      f"takes {demo.DemoLm.VOCAB_SIZE}. Leave --data_dir unset."
    )
  t = measure_trainer(
    [inp.get_next() for _ in range(min(_TRAIN_STEPS.value, 8) + 1)], _TRAIN_STEPS.value
  )
  print(
    f"trainer:  DemoLm train_step: {t['tokens']:,} tokens in {t['seconds']:.2f} s = "
    f"{t['tokens_per_second']:,.0f} tokens/s ({t['steps_per_second']:.2f} steps/s)"
  )
  print(
    f"ratio:    the pipeline is {r['tokens_per_second'] / t['tokens_per_second']:,.1f}x the "
    "trainer's consumption (goal >= 10x)"
  )


if __name__ == "__main__":
  app.run(main)
