r"""The kill campaign: SIGKILL `python -m paxml.main` at random moments, restart it each time, and
check that the losses of every step are bit-identical to an uninterrupted run and that every
restart resumed from the newest checkpoint that was complete when the process died.

  python -m tests.kill_campaign --kills=10 --kill_seed=0     # the campaign (minutes)
  tests/kill_campaign_test.py                           # a short one in CI (2 kills)

The experiment is tests/fault_experiments.py's KillLm (60 steps, a checkpoint every 5, a loss
summary every step). One reference run is timed first: its start-up (imports, restore, first
compile: until "Training from step") and its training. A quarter of the kills land uniformly in
the start-up; the others after the child logs "Training from step", uniformly in
[0, 2 x training time / (kills + 1)], so that on average the run advances by an equal share
between kills and the kills hit training steps and saves in flight (Orbax's background writes,
the checksum manifest). A child that finishes before its kill counts as a complete run.

Checks after each kill: the newest checkpoint whose files verify (checkpoint_integrity) is the
step the next run restores ("Restored checkpoint at step c"), and that run's first summary is
step c + 1 (no step lost beyond the last checkpoint). At the end: every step 1..N has a loss,
and every loss any run wrote equals the reference's, compared as float32 bit patterns.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

from paxml import checkpoint_integrity
from paxml.testing import compile_cache
from paxml.testing import event_files

EXPERIMENT = "tests.fault_experiments.KillLm"
NUM_STEPS = 60
_RESTORED = re.compile(r"Restored checkpoint at step (\d+)")


@dataclasses.dataclass
class Outcome:
  """What one campaign saw."""

  # (when: "start-up +s" or "training +s", newest verified step after the kill or None)
  kills: list[tuple[str, int | None]]
  restored: list[int | None]  # per restart: the step it restored (None: trained from scratch)
  runs: int
  reference_seconds: tuple[float, float]  # start-up, training


def _start(job_log_dir: str, log_path: str) -> subprocess.Popen:
  with open(log_path, "w") as log:
    return subprocess.Popen(
      [sys.executable, "-m", "paxml.main", f"--exp={EXPERIMENT}", f"--job_log_dir={job_log_dir}"],
      stderr=log,
      stdout=subprocess.DEVNULL,
      env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )


_TRAINING = "Training from step"


def _wait_for_training(child: subprocess.Popen, log_path: str, timeout: float = 600) -> bool:
  """Waits until the child logs the start of its train loop (True) or exits (False)."""
  deadline = time.monotonic() + timeout
  while child.poll() is None:
    with open(log_path) as f:
      if _TRAINING in f.read():
        return True
    if time.monotonic() > deadline:
      raise AssertionError(f"no {_TRAINING!r} in {timeout} s: {open(log_path).read()[-3000:]}")
    time.sleep(0.05)
  return False


def _run_to_end(job_log_dir: str, log_path: str, timeout: float = 600) -> tuple[float, float]:
  """An uninterrupted run; returns (start-up seconds, training seconds)."""
  start = time.monotonic()
  child = _start(job_log_dir, log_path)
  _wait_for_training(child, log_path, timeout)
  training = time.monotonic()
  returncode = child.wait(timeout=timeout)
  if returncode != 0:
    raise AssertionError(f"main exited with {returncode}:\n{open(log_path).read()[-3000:]}")
  return training - start, time.monotonic() - training


def newest_verified_step(job_log_dir: str) -> int | None:
  """The newest step under checkpoints/ whose manifest and files verify (None: none does)."""
  root = os.path.join(job_log_dir, "checkpoints")
  steps = sorted(
    (int(name.split("_")[1]) for name in os.listdir(root) if re.fullmatch(r"checkpoint_\d+", name))
    if os.path.isdir(root)
    else [],
    reverse=True,
  )
  for step in steps:
    try:
      checkpoint_integrity.verify_files(os.path.join(root, f"checkpoint_{step:08d}"), step)
      return step
    except checkpoint_integrity.CorruptCheckpointError:
      continue
  return None


def _bits(value: float) -> int:
  return int(np.float32(value).view(np.uint32))


def run_campaign(kills: int, seed: int, workdir: str) -> Outcome:
  """Raises AssertionError on the first broken promise; returns what it saw."""
  rng = random.Random(seed)
  reference_dir = os.path.join(workdir, "reference")
  startup, training = _run_to_end(reference_dir, os.path.join(workdir, "reference.log"))
  (reference,) = event_files.scalars_by_file(reference_dir)
  assert sorted(reference) == list(range(1, NUM_STEPS + 1)), sorted(reference)

  job_log_dir = os.path.join(workdir, "job")
  seen_kills, restored, runs = [], [], 0
  expected_restore: int | None = None
  for k in range(kills + 1):
    log_path = os.path.join(workdir, f"run{k}.log")
    child = _start(job_log_dir, log_path)
    runs += 1
    last = k == kills
    if not last:
      if rng.random() < 0.25:
        delay = rng.uniform(0, startup)
        when = f"start-up +{delay:.2f} s"
      else:
        delay = rng.uniform(0, 2 * training / (kills + 1))
        when = f"training +{delay:.2f} s"
        if not _wait_for_training(child, log_path):
          delay = 0.0  # Already finished.
      try:
        child.wait(timeout=delay)  # Finished before the kill: a complete run.
        when += " (finished first)"
      except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGKILL)
        child.wait()
    else:
      child.wait(timeout=600)
    text = open(log_path).read()
    match = _RESTORED.search(text)
    got = int(match.group(1)) if match else None
    if match or expected_restore is not None:
      restored.append(got)
      # The run restored the newest complete checkpoint the previous run left, if it got that far.
      if match and got != expected_restore:
        raise AssertionError(
          f"run {k} restored step {got}, but step {expected_restore} was the newest complete "
          f"checkpoint when the previous run died:\n{text[-3000:]}"
        )
    if last and child.returncode != 0:
      raise AssertionError(f"the last run exited with {child.returncode}:\n{text[-3000:]}")
    if not last:
      expected_restore = newest_verified_step(job_log_dir)
      seen_kills.append((when, expected_restore))

  files = event_files.scalars_by_file(job_log_dir)
  covered = set()
  for i, losses in enumerate(files):
    for step, loss in losses.items():
      if _bits(loss) != _bits(reference[step]):
        raise AssertionError(
          f"event file {i}: step {step} loss {loss!r} differs from the reference's "
          f"{reference[step]!r}"
        )
    covered.update(losses)
  if covered != set(range(1, NUM_STEPS + 1)):
    raise AssertionError(f"steps without a loss: {sorted(set(range(1, NUM_STEPS + 1)) - covered)}")
  _check_no_gaps(files)
  return Outcome(seen_kills, restored, runs, (startup, training))


def _check_no_gaps(files: list[dict[int, float]]) -> None:
  """Each run's summaries continue from a checkpoint the one before reached: a run that wrote
  steps starts no later than one past the previous writer's last step."""
  reached = 0
  for i, losses in enumerate(files):
    if not losses:
      continue
    first = min(losses)
    if first > reached + 1:
      raise AssertionError(f"event file {i} starts at step {first}; steps up to {reached} seen")
    reached = max(reached, max(losses))


_KILLS = flags.DEFINE_integer("kills", 10, "SIGKILLs, each followed by a restart.")
_SEED = flags.DEFINE_integer("kill_seed", 0, "Seed of the kill moments.")


def main(argv):
  del argv
  compile_cache.use_for_this_test()  # Restarts read the reference run's compiled programs.
  with tempfile.TemporaryDirectory() as workdir:
    start = time.monotonic()
    outcome = run_campaign(_KILLS.value, _SEED.value, workdir)
    startup, training = outcome.reference_seconds
    print(f"reference run: start-up {startup:.1f} s, training {training:.1f} s")
    for i, (when, step) in enumerate(outcome.kills):
      print(f"kill {i + 1}: {when}; newest complete checkpoint: {step}")
    print(f"restores: {outcome.restored}")
    print(
      f"{len(outcome.kills)} kills, {outcome.runs} runs, {time.monotonic() - start:.0f} s: every "
      f"loss of steps 1..{NUM_STEPS} bit-identical to the reference; every restart resumed from "
      "the newest complete checkpoint"
    )


if __name__ == "__main__":
  app.run(main)
