"""The leader: the one process of a job that writes what the job writes once.

Summaries, the config files of job_log_dir, checkpoint manifests and deletions, the job lock and
decode outputs are written by the leader only (Pax's and bobbin's process 0); every process
computes. The one test of it, so that no two places disagree about who writes.
"""

import jax


def is_leader() -> bool:
  """Whether this process is the job's leader (process 0)."""
  return jax.process_index() == 0
