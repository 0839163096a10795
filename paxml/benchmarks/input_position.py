r"""Restore and peek cost of each input at batch 10, 10^4 and 10^6 (issue 33): flat means a resumed
run and an eval_train cost the same at step 10^6 as at step 10.

  ./bazelw run //paxml/benchmarks:input_position
  ./bazelw run //paxml/benchmarks:input_position -- --corpus_path=/path/kjv.txt   # outside Bazel

For each input, built once (its build time printed apart: TextInput reads and tokenizes its
documents then, once per process), and each position N: `set_state` of the input's own state with
`num_batches = N` (the position set directly, as a restore does), then a peek (get_state,
get_next, set_state: what peekable_input.peek does for an input that cannot keep a batch). The time of
both together is printed, and the first batch is checked against the one an uninterrupted read
returns at N = 10.

Inputs: DemoLm's TextInput (concat, batch 16 x 128, 1,024 pieces) and the same data packed
("pack"), SeqIOInput on the kjv_lm task (packed), and the synthetic inputs
(paxml/synthetic_input.py's SyntheticLmInput, paxml/data/synthetic.py's SyntheticLmData).
A training SeqIOInput over a Task reads its rows by index from the row cache
(paxml/data/seqio_cache.py, built under this run's temporary directory: its build time is in the
"build" column). With --seqio_tf_data, the same input with the cache off (PAXML_SEQIO_CACHE=off) is
timed too: a tf.data pipeline, which cannot seek: given a bare position it reads N batches, so
that is timed up to --seqio_max_batches only. Its own saved state holds tf.data's iterator
checkpoint, whose restore is timed too ("saved at N", reached by reading N batches, so also up to
--seqio_max_batches); that restore costs the size of the iterator's state (the shuffle buffer),
not the position.
"""

from collections.abc import Sequence
import os
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

from paxml import synthetic_input
from paxml.data import demo_data
from paxml.data import seqio_cache
from paxml.data import synthetic

_CORPUS = flags.DEFINE_string("corpus_path", None, "KJV text (default: the Bazel runfile).")
_POSITIONS = flags.DEFINE_list("positions", ["10", "10000", "1000000"], "Batch numbers.")
_ONLY = flags.DEFINE_list("only", [], "Time only the inputs whose name starts with one of these.")
_SEQIO_TF_DATA = flags.DEFINE_bool(
  "seqio_tf_data", False, "Also time SeqIOInput's tf.data path (the row cache off)."
)
_SEQIO_MAX = flags.DEFINE_integer(
  "seqio_max_batches", 10_000, "Largest position timed for SeqIOInput (it replays)."
)


def _time_position(data, n: int) -> float:
  state = dict(data.get_state(), num_batches=n)
  # Set directly: no hint or iterator of a saved state.
  for key in ("iterator",):
    state.pop(key, None)
  start = time.perf_counter()
  data.set_state(state)
  position = data.get_state()
  data.get_next()
  data.set_state(position)
  return time.perf_counter() - start


def _time_saved_state(make, n: int) -> float:
  """Restore of the state an input saved after reading n batches, then a peek (SeqIOInput: its
  tf.data iterator checkpoint)."""
  reader = make()
  for _ in range(n):
    reader.get_next()
  state = reader.get_state()
  want = reader.get_next()
  data = make()
  start = time.perf_counter()
  data.set_state(state)
  position = data.get_state()
  got = data.get_next()
  data.set_state(position)
  seconds = time.perf_counter() - start
  np.testing.assert_array_equal(np.asarray(got["ids"]), np.asarray(want["ids"]))
  return seconds


def _check_resume(make) -> None:
  """Batches 10.. of a restored input equal those of an uninterrupted read."""
  straight = make()
  for _ in range(10):
    straight.get_next()
  want = [straight.get_next() for _ in range(3)]
  resumed = make()
  state = dict(resumed.get_state(), num_batches=10)
  state.pop("iterator", None)
  resumed.set_state(state)
  for w in want:
    got = resumed.get_next()
    for key in w:
      np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(w[key]))


def _inputs(data_dir: str):
  corpus = _CORPUS.value or demo_data.find_corpus()
  text = lambda packing: (
    lambda: demo_data.text_input(
      "train",
      data_dir=data_dir,
      corpus_path=corpus,
      vocab_size=1024,
      batch_size=16,
      seq_len=128,
      packing=packing,
      is_training=True,
      input_random_seed=1234,
    )
  )
  yield "TextInput concat (DemoLm)", text("concat"), None
  yield "TextInput pack", text("pack"), None
  yield (
    "SyntheticLmInput",
    lambda: synthetic_input.SyntheticLmInput(batch_size=16, seq_len=128, vocab_size=1024, seed=1),
    None,
  )
  yield (
    "SyntheticLmData",
    lambda: synthetic.SyntheticLmData.HParams(
      batch_size=16, seq_len=128, input_random_seed=1
    ).Instantiate(),
    None,
  )

  def seqio():
    from paxml import seqio_input  # pylint: disable=g-import-not-at-top
    from paxml.tasks.lm import kjv_seqio_tasks  # pylint: disable=g-import-not-at-top

    task = kjv_seqio_tasks.task(
      kjv_seqio_tasks.LM_TASK, data_dir=data_dir, corpus_path=corpus, vocab_size=1024
    )
    return seqio_input.SeqIOInput(
      mixture_or_task=task,
      split_name="train",
      is_training=True,
      batch_size=16,
      task_feature_lengths={"targets": 128},
      feature_converter=seqio_input.LanguageModelFeatures(pack=True),
      input_random_seed=1234,
    )

  yield "SeqIOInput kjv_lm (cache)", seqio, None
  if _SEQIO_TF_DATA.value:

    def seqio_tf_data():
      os.environ[seqio_cache.ENV_MODE] = "off"
      try:
        return seqio()
      finally:
        del os.environ[seqio_cache.ENV_MODE]

    yield "SeqIOInput kjv_lm (tf.data)", seqio_tf_data, _SEQIO_MAX.value


def main(argv: Sequence[str]) -> None:
  del argv
  positions = [int(p) for p in _POSITIONS.value]
  with tempfile.TemporaryDirectory() as tmp:
    data_dir = os.path.join(tmp, "kjv")
    # SeqIOInput's row cache is built in this run (its cost shows in the build column).
    os.environ[seqio_cache.ENV_DIR] = os.path.join(tmp, "seqio_rows")
    for name, make, limit in _inputs(data_dir):
      if _ONLY.value and not any(name.startswith(o) for o in _ONLY.value):
        continue
      try:
        _report(name, make, limit, positions)
      except Exception as e:  # pylint: disable=broad-exception-caught
        print(f"{name:28} failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)


def _report(name, make, limit, positions) -> None:
  """One input's row: its build time and restore + peek at each position."""
  start = time.perf_counter()
  data = make()
  data.get_next()  # The first read builds what the input reads from.
  built = time.perf_counter() - start
  _check_resume(make)
  cells = []
  for n in positions:
    if limit is not None and n > limit:
      cells.append(f"N={n:,}: not timed (replays)")
      continue
    cells.append(f"N={n:,}: {_time_position(data, n):.3f} s")
  if "iterator" in data.get_state():
    for n in positions:
      if n <= limit:
        cells.append(f"saved at N={n:,}: {_time_saved_state(make, n):.3f} s")
  print(f"{name:28} build {built:.2f} s | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
  app.run(main)
