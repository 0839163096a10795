"""One trainer per job_log_dir: a lease file naming its holder (host, PID, start time).

Two trainers on one directory would adopt each other's checkpoints, delete each other's
in-progress saves on start-up and interleave their summaries. `JobLock` makes the second one
stop at once with one line naming the first. A lease left by a process that died on this host
(its PID is gone, or now belongs to a process started later) is taken over with a warning; a
lease from another host cannot be checked from here, so it is reported and left to the user
(delete the file when that job is really gone).

Multi-host jobs take it once: process 0 holds the lease for the job, the others learn from it
whether it succeeded.
"""

import datetime
import json
import os
import socket
import time

from absl import logging
import jax

from paxml import leader

LOCK_FILE = "train.lock"


class JobLockError(Exception):
  """job_log_dir is held by another live trainer; the message names it and what to do."""


def _process_start_time(pid: int) -> float | None:
  """When process `pid` started (seconds since the epoch), or None if unknown or gone."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/stat") as f:
      boot = next(float(line.split()[1]) for line in f if line.startswith("btime"))
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
  except (OSError, IndexError, StopIteration, ValueError):
    return None


def _alive(pid: int, started: float | None) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # Exists, owned by someone else.
  actual = _process_start_time(pid)
  # A PID reused by a process that started after the holder wrote its lease is not the holder.
  return not (actual is not None and started is not None and actual > started + 2)


def _describe(holder: dict) -> str:
  started = datetime.datetime.fromtimestamp(holder.get("start_time", 0)).isoformat(
    sep=" ", timespec="seconds"
  )
  return f"PID {holder.get('pid')} on host {holder.get('host')}, started {started}"


class JobLock:
  """`with JobLock(job_log_dir):` holds `<job_log_dir>/train.lock` for the block."""

  def __init__(self, job_log_dir: str):
    self.path = os.path.join(job_log_dir, LOCK_FILE)
    self._held = False

  def _create(self) -> bool:
    me = {"host": socket.gethostname(), "pid": os.getpid(), "start_time": time.time()}
    try:
      fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
      return False
    with os.fdopen(fd, "w") as f:
      json.dump(me, f)
    return True

  def _read_holder(self) -> dict | None:
    try:
      with open(self.path) as f:
        return json.load(f)
    except FileNotFoundError:
      return None
    except (OSError, ValueError):
      return {}  # Being written right now, or garbage: treated below.

  def acquire(self) -> None:
    """Takes the lease or raises JobLockError naming the live holder."""
    os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
    for _ in range(5):
      if self._create():
        self._held = True
        return
      holder = self._read_holder()
      if holder is None:
        continue  # Released between our two calls.
      if not holder:
        time.sleep(0.2)  # A lease being written; read it again.
        holder = self._read_holder() or {"host": "?", "pid": "?"}
        if holder.get("pid") == "?":
          raise JobLockError(
            f"{self.path} is unreadable; if no trainer uses this job_log_dir, delete it and "
            "run again"
          )
      same_host = holder.get("host") == socket.gethostname()
      if (
        same_host
        and isinstance(holder.get("pid"), int)
        and not _alive(holder["pid"], holder.get("start_time"))
      ):
        # Move the stale lease out of the way atomically: of two processes taking it over,
        # only one rename succeeds; the other finds the winner's new lease next round.
        stale = f"{self.path}.stale-{os.getpid()}"
        try:
          os.rename(self.path, stale)
        except FileNotFoundError:
          continue
        os.remove(stale)
        logging.warning(
          "Took over %s from a trainer that is gone (%s).", self.path, _describe(holder)
        )
        continue
      where = "" if same_host else " (another host: cannot check whether it is alive)"
      raise JobLockError(
        f"{os.path.dirname(self.path)} is in use by another trainer ({_describe(holder)}"
        f"{where}). Stop it, or use another --job_log_dir; if it is gone, delete "
        f"{self.path}."
      )
    raise JobLockError(
      f"could not take {self.path}: it keeps changing; is another trainer "
      "starting in the same job_log_dir?"
    )

  def release(self) -> None:
    if self._held:
      self._held = False
      holder = self._read_holder()
      if holder and holder.get("pid") == os.getpid():
        os.remove(self.path)

  def __enter__(self) -> "JobLock":
    self.acquire()
    return self

  def __exit__(self, *exc_info) -> None:
    self.release()


class JobLease:
  """The job's lease in a multi-process job: process 0 holds the JobLock; every process raises
  the same JobLockError when it could not be taken."""

  def __init__(self, job_log_dir: str):
    self._lock = JobLock(job_log_dir) if leader.is_leader() else None

  def __enter__(self) -> "JobLease":
    error = ""
    if self._lock is not None:
      try:
        self._lock.acquire()
      except JobLockError as e:
        error = str(e)
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
      import numpy as np  # pylint: disable=g-import-not-at-top

      failed = multihost_utils.broadcast_one_to_all(np.int32(bool(error)))
      if int(failed) and not error:
        error = "process 0 could not take the job_log_dir lease (see its error)"
    if error:
      raise JobLockError(error)
    return self

  def __exit__(self, *exc_info) -> None:
    if self._lock is not None:
      self._lock.release()
