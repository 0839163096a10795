"""`main(experiment_class, argv)`: JAXline's command line.

  python my_experiment.py --config=my_experiment.py \
      --config.training_steps=1000 --jaxline_mode=train_eval_multithreaded

Works called directly (`platform.main(Experiment, sys.argv)`: it parses the
flags itself) and under `app.run(functools.partial(platform.main,
Experiment))`. Modes: `train`; any mode starting with `eval` (the mode string
reaches the experiment, so `eval_test` and `eval_dev` jobs can run side by
side); `train_eval_multithreaded` (training in a worker thread, the
evaluator in the main thread; both experiments get that mode string).
"""

import concurrent.futures
import contextlib
import pdb
import sys
import threading
from typing import Any, Callable

from absl import flags
from absl import logging
import jax
from ml_collections import config_flags

from paxml.experiment_api import base_config
from paxml.experiment_api import checkpointer as checkpointer_lib
from paxml.experiment_api import train
from paxml.experiment_api import writers

FLAGS = flags.FLAGS
_CONFIG = config_flags.DEFINE_config_file(
    "config", help_string="A Python file whose get_config() returns the experiment config; "
    "override fields with --config.<field>=<value>.")
_MODE = flags.DEFINE_string("jaxline_mode", "train",
                            "train, eval* (e.g. eval, eval_test) or train_eval_multithreaded.")
_POST_MORTEM = flags.DEFINE_bool("jaxline_post_mortem", False,
                                 "On an exception, enter the debugger at the failure.")
_DISABLE_PMAP_JIT = flags.DEFINE_bool(
    "jaxline_disable_pmap_jit", False, "Run jit and pmap uncompiled, op by op, to debug.")


@contextlib.contextmanager
def _maybe_disable_jit(disable: bool):
  if disable:
    with jax.disable_jit():
      yield
  else:
    yield


def _ensure_flags_parsed(argv: list[str]) -> None:
  if not FLAGS.is_parsed():
    FLAGS(argv)


def main(experiment_class: type, argv: list[str],
         checkpointer_factory: Callable[[Any, str], Any] = checkpointer_lib.create_checkpointer,
         writer_factory: Callable[[Any, str], Any] = writers.create_writer) -> None:
  """Runs the mode given by --jaxline_mode on the --config experiment."""
  _ensure_flags_parsed(list(argv))
  try:
    with _maybe_disable_jit(_DISABLE_PMAP_JIT.value):
      _run(experiment_class, checkpointer_factory, writer_factory)
  except Exception:  # pylint: disable=broad-except
    if not _POST_MORTEM.value:
      raise
    pdb.post_mortem(sys.exc_info()[2])


def _run(experiment_class, checkpointer_factory, writer_factory) -> None:
  config = _CONFIG.value
  if config is None:
    raise ValueError(
        "No --config given. Run e.g. `python my_experiment.py --config=my_experiment.py`, "
        "where my_experiment.py defines get_config() built on base_config.get_base_config().")
  base_config.validate_config(config)
  mode = _MODE.value
  if mode == "train":
    train.train(experiment_class, config, checkpointer_factory(config, "train"),
                writer_factory(config, "train"))
  elif mode.startswith("eval"):
    train.evaluate(experiment_class, config, checkpointer_factory(config, mode),
                   writer_factory(config, mode), jaxline_mode=mode)
  elif mode == "train_eval_multithreaded":
    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="train") as pool:
      def train_then_signal():
        try:
          train.train(experiment_class, config, checkpointer_factory(config, "train"),
                      writer_factory(config, "train"), mode=mode)
        finally:
          stop.set()
      future = pool.submit(train_then_signal)
      train.evaluate(experiment_class, config, checkpointer_factory(config, "eval"),
                     writer_factory(config, "eval"), jaxline_mode=mode, stop=stop)
      future.result()  # Re-raises a training failure here.
  else:
    raise ValueError(f"Unknown --jaxline_mode={mode!r}; use train, eval (or any mode "
                     "starting with eval) or train_eval_multithreaded.")
  logging.info("Mode %s done.", mode)
