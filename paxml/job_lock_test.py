"""Tests of the job_log_dir lease."""

import json
import os
import socket
import subprocess
import sys

from absl.testing import absltest

from paxml import job_lock


def _write_lease(directory, **holder):
  with open(os.path.join(directory, job_lock.LOCK_FILE), "w") as f:
    json.dump(holder, f)


class JobLockTest(absltest.TestCase):
  def test_holds_the_lease_with_host_pid_and_time_then_releases_it(self):
    directory = self.create_tempdir().full_path
    with job_lock.JobLock(directory):
      with open(os.path.join(directory, job_lock.LOCK_FILE)) as f:
        holder = json.load(f)
      self.assertEqual(holder["pid"], os.getpid())
      self.assertEqual(holder["host"], socket.gethostname())
      self.assertGreater(holder["start_time"], 0)
      # A second holder in the same directory fails while the first holds it (even this PID:
      # the lease is per acquisition, not per process).
      with self.assertRaisesRegex(job_lock.JobLockError, f"PID {os.getpid()}"):
        job_lock.JobLock(directory).acquire()
    self.assertFalse(os.path.exists(os.path.join(directory, job_lock.LOCK_FILE)))

  def test_live_holder_is_named_in_one_line(self):
    directory = self.create_tempdir().full_path
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
      _write_lease(directory, host=socket.gethostname(), pid=holder.pid, start_time=1e10)
      with self.assertRaises(job_lock.JobLockError) as raised:
        job_lock.JobLock(directory).acquire()
    finally:
      holder.kill()
      holder.wait()
    message = str(raised.exception)
    self.assertLen(message.splitlines(), 1)
    self.assertIn(f"PID {holder.pid} on host {socket.gethostname()}", message)
    self.assertIn("use another --job_log_dir", message)

  def test_dead_holder_on_this_host_is_taken_over_with_a_warning(self):
    directory = self.create_tempdir().full_path
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _write_lease(directory, host=socket.gethostname(), pid=gone.pid, start_time=1.0)
    with self.assertLogs("absl", "WARNING") as logs:
      with job_lock.JobLock(directory):
        pass
    self.assertIn(f"PID {gone.pid}", "\n".join(logs.output))

  def test_a_reused_pid_is_not_the_holder(self):
    directory = self.create_tempdir().full_path
    # This process started long after 1970: the lease's PID now belongs to someone else.
    _write_lease(directory, host=socket.gethostname(), pid=os.getpid(), start_time=1.0)
    with job_lock.JobLock(directory):
      pass

  def test_another_hosts_lease_is_reported_not_taken(self):
    directory = self.create_tempdir().full_path
    _write_lease(directory, host="elsewhere.example", pid=1, start_time=1e9)
    with self.assertRaisesRegex(job_lock.JobLockError, "another host"):
      job_lock.JobLock(directory).acquire()


if __name__ == "__main__":
  absltest.main()
