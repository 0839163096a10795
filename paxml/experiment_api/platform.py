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

import ast
import concurrent.futures
import contextlib
import threading
from typing import Any, Callable

from absl import flags
from absl import logging
from ml_collections import config_flags

from paxml.experiment_api import base_config
from paxml.experiment_api import checkpointer as checkpointer_lib
from paxml.experiment_api import train
from paxml.experiment_api import utils
from paxml.experiment_api import writers

# JAXline's platform module offers these too.
TensorBoardLogger = writers.TensorBoardLogger
create_checkpointer = checkpointer_lib.create_checkpointer
create_writer = writers.create_writer

FLAGS = flags.FLAGS
_CONFIG = config_flags.DEFINE_config_file(
  "config",
  help_string="A Python file whose get_config() returns the experiment config; "
  "override fields with --config.<field>=<value>.",
)
_MODE = flags.DEFINE_string(
  "jaxline_mode", "train", "train, eval* (e.g. eval, eval_test) or train_eval_multithreaded."
)


def _parse_override(text: str, current: Any) -> Any:
  if isinstance(current, bool) or text.lower() in ("true", "false"):
    return text.lower() in ("true", "1")
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text
  if isinstance(current, float) and isinstance(value, int):
    return float(value)
  return value


def _ensure_flags_parsed(argv: list[str]) -> list[tuple[str, str]]:
  """Parses `argv` when called directly; returns the --config.x overrides to apply.

  ml_collections registers `--config.x` flags only for overrides present in
  sys.argv when the flag module is imported, so a direct call
  `main(Experiment, argv)` with overrides only in argv (a debugger, a test)
  would reject them (JAXline issue #9). Unregistered overrides are therefore
  taken out here and applied to the loaded config by `_apply_overrides`.
  """
  if argv and argv[0].startswith("-"):
    argv = ["jaxline"] + argv  # Called with sys.argv[1:]: no program name.
  overrides, rest = [], []
  for arg in argv[1:]:
    name, eq, value = arg.lstrip("-").partition("=")
    if arg.startswith("--config.") and eq and name not in FLAGS:
      overrides.append((name[len("config.") :], value))
    else:
      rest.append(arg)
  # Under app.run the flags are parsed and argv is only what is left.
  if not FLAGS.is_parsed() or any(a.startswith("-") for a in rest):
    FLAGS(argv[:1] + rest)
  return overrides


def _apply_overrides(config: Any, overrides: list[tuple[str, str]]) -> None:
  for path, text in overrides:
    *parents, leaf = path.split(".")
    node = config
    for part in parents:
      node = node[part]
    if leaf not in node:
      raise ValueError(f"--config.{path}: the config has no field {path!r}.")
    with node.unlocked() if hasattr(node, "unlocked") else contextlib.nullcontext():
      node[leaf] = _parse_override(text, node[leaf])


@utils.debugger_fallback
def main(
  experiment_class: type,
  argv: list[str],
  checkpointer_factory: Callable[[Any, str], Any] = checkpointer_lib.create_checkpointer,
  writer_factory: Callable[[Any, str], Any] = writers.create_writer,
) -> None:
  """Runs the mode given by --jaxline_mode on the --config experiment.

  --jaxline_post_mortem opens pdb on an exception; --jaxline_disable_pmap_jit
  runs the drivers without compilation (both defined in `utils`).
  """
  overrides = _ensure_flags_parsed(list(argv))
  _run(experiment_class, checkpointer_factory, writer_factory, overrides)


def _run(experiment_class, checkpointer_factory, writer_factory, overrides) -> None:
  config = _CONFIG.value
  if config is None:
    raise ValueError(
      "No --config given. Run e.g. `python my_experiment.py --config=my_experiment.py`, "
      "where my_experiment.py defines get_config() built on base_config.get_base_config()."
    )
  _apply_overrides(config, overrides)
  base_config.validate_config(config)
  mode = _MODE.value
  if mode == "train":
    train.train(
      experiment_class,
      config,
      checkpointer_factory(config, "train"),
      writer_factory(config, "train"),
    )
  elif mode.startswith("eval"):
    train.evaluate(
      experiment_class,
      config,
      checkpointer_factory(config, mode),
      writer_factory(config, mode),
      jaxline_mode=mode,
    )
  elif mode == "train_eval_multithreaded":
    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="train") as pool:

      def train_then_signal():
        try:
          train.train(
            experiment_class,
            config,
            checkpointer_factory(config, "train"),
            writer_factory(config, "train"),
          )
        finally:
          stop.set()

      future = pool.submit(train_then_signal)
      train.evaluate(
        experiment_class,
        config,
        checkpointer_factory(config, "eval"),
        writer_factory(config, "eval"),
        jaxline_mode=mode,
        stop=stop,
      )
      future.result()  # Re-raises a training failure here.
  else:
    raise ValueError(
      f"Unknown --jaxline_mode={mode!r}; use train, eval (or any mode "
      "starting with eval) or train_eval_multithreaded."
    )
  logging.info("Mode %s done.", mode)
