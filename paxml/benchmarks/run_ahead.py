r"""Steps/s of the trainer with its run-ahead bound (at most trainer.MAX_STEPS_IN_FLIGHT steps
dispatched and unfinished) against the loop without it (unbounded, as before issue 33), in one
process, alternating.

  ./bazelw run //paxml/benchmarks:run_ahead -- \
      --exp=demo.SyntheticDemoLm --warmup=5 --steps=100 --repeats=3

Each side is a `train_and_evaluate` run timed over a window of steps after `warmup` (the method
of trainer_overhead.py: the step hook waits for the outputs at both ends). Sides alternate
(unbounded, bounded, unbounded, ...) so that both see the same load; every time is printed, and
the ratio of the medians.
"""

from collections.abc import Sequence
import statistics

from absl import app

from paxml import experiment_registry
from paxml import trainer
from paxml.benchmarks import trainer_overhead

# trainer_overhead's flags: --exp, --warmup, --steps, --repeats.
_EXP, _WARMUP, _STEPS, _REPEATS = (
  trainer_overhead._EXP,  # pylint: disable=protected-access
  trainer_overhead._WARMUP,  # pylint: disable=protected-access
  trainer_overhead._STEPS,  # pylint: disable=protected-access
  trainer_overhead._REPEATS,  # pylint: disable=protected-access
)

UNBOUNDED = 10**9


def main(argv: Sequence[str]) -> None:
  del argv
  experiment_cls = experiment_registry.get_experiment(_EXP.value)
  bound = trainer.MAX_STEPS_IN_FLIGHT
  times = {UNBOUNDED: [], bound: []}
  try:
    for _ in range(_REPEATS.value):
      for side in (UNBOUNDED, bound):
        trainer.MAX_STEPS_IN_FLIGHT = side
        seconds = trainer_overhead.trainer_step_seconds(experiment_cls, _WARMUP.value, _STEPS.value)
        times[side].append(seconds)
        name = "unbounded" if side == UNBOUNDED else f"bound {side}"
        print(f"{name:>10}: {1 / seconds:.2f} steps/s ({1000 * seconds:.1f} ms/step)", flush=True)
  finally:
    trainer.MAX_STEPS_IN_FLIGHT = bound
  before, after = (statistics.median(times[s]) for s in (UNBOUNDED, bound))
  print(
    f"median steps/s: unbounded {1 / before:.2f}, bound {bound}: {1 / after:.2f}; "
    f"bounded / unbounded = {before / after:.3f}"
  )


if __name__ == "__main__":
  app.run(main)
