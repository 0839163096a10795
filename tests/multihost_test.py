"""Two processes on 127.0.0.1 (jax.distributed, gloo CPU collectives) train like one process.

Each process has 2 fake CPU devices (4 global, mesh (1, 4, 1)) and feeds its half of the global
batch; the reference is the test's own process with 4 fake devices feeding the whole batch.
Same global batch, same per-step losses (rtol 2e-5: the cross-process all-reduce may sum in
another order); one set of summaries (only process 0 writes); and a second 2-process run
restores the checkpoint both processes wrote and continues.

Multislice (Pax's c4_multislice shape, scaled down): 2 processes x 4 devices with
DCN_MESH_SHAPE=[2, 1, 1] and ICI_MESH_SHAPE=[1, 4, 1], each process one slice along `replica`
(mesh replica 2 x data 4); the same global batch gives the same losses as the one-process run.
"""

import os
import socket
import subprocess
import sys
import textwrap

from absl.testing import absltest
import fiddle as fdl
import jax
import numpy as np

from paxml import synthetic_input
from paxml import trainer
from paxml.testing import compile_cache
from paxml.testing import event_files
from paxml.testing import tiny_lm

# Shared with the children: the resumed 2-process run compiles what the first one did and reads
# process 0's entries.
compile_cache.use_for_this_test()


class GlobalSliceInput(synthetic_input.SyntheticLmInput):
  """Generates the global batch and returns the rows of this input's `infeed_host_index`.

  So 1 process and N processes see the same global batch at every step (the ordinary
  synthetic input gives each host its own stream instead). The index is the one the trainer
  gives each process (Partitioner.preprocess_input_config): were it left at 0 everywhere, every
  process would feed the first rows and the losses would differ from the 1-process run.
  """

  def get_next(self):
    import jax  # pylint: disable=g-import-not-at-top

    host, self.infeed_host_index = self.infeed_host_index, 0  # One stream: the global batch.
    try:
      batch = super().get_next()
    finally:
      self.infeed_host_index = host
    rows = self.batch_size // jax.process_count()
    return {k: v[host * rows : (host + 1) * rows] for k, v in batch.items()}


class MultihostLm(tiny_lm.TinyLm):
  BATCH_SIZE = 8  # Global rows; each of 2 processes feeds 4.
  INPUT_SEED = 11
  NUM_TRAIN_STEPS = 4
  SAVE_INTERVAL_STEPS = 2
  SUMMARY_INTERVAL_STEPS = 1
  EVAL_INTERVAL_STEPS = None
  DECODE_INTERVAL_STEPS = None
  ICI_MESH_SHAPE = (1, 4, 1)

  def datasets(self):
    config = super().datasets()[0]
    fdl.update_callable(config, GlobalSliceInput)
    return [config]


class MultihostLm6(MultihostLm):
  NUM_TRAIN_STEPS = 6


class MultisliceLm(MultihostLm):
  """Two slices joined over DCN: each process is one slice of 4 devices along `replica`."""

  DCN_MESH_SHAPE = (2, 1, 1)


_CHILD = """
import sys
from absl import logging
logging.set_verbosity(logging.INFO)
from paxml import main, trainer
from tests import multihost_test
port, num, idx, job_log_dir, exp = sys.argv[1:]
if int(num) > 1:
  main.initialize_distributed(f"127.0.0.1:{port}", int(num), int(idx))
experiment = getattr(multihost_test, exp)()
result = trainer.train_and_evaluate(experiment, job_log_dir)
from paxml import partitioning
mesh = partitioning.create_mesh(experiment.ICI_MESH_SHAPE, experiment.DCN_MESH_SHAPE)
# The process of each device, by replica row: one process per slice when DCN splits `replica`.
print("MESH", dict(mesh.shape), [sorted({d.process_index for d in row.flat}) for row in mesh.devices])
print("RESULT", result["step"])
"""


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _run(num_processes, devices_per_process, job_log_dir, exp):
  # The test's own XLA flags (pax_py_test's optimisation level 0: compiles in a fraction of the
  # time) with this child's device count in place of the test's.
  xla_flags = [
    flag
    for flag in os.environ.get("XLA_FLAGS", "").split()
    if not flag.startswith("--xla_force_host_platform_device_count=")
  ]
  xla_flags.append(f"--xla_force_host_platform_device_count={devices_per_process}")
  env = dict(
    os.environ,
    PYTHONPATH=os.pathsep.join(sys.path),
    JAX_PLATFORMS="cpu",
    XLA_FLAGS=" ".join(xla_flags),
  )
  port = _free_port()
  procs = [
    subprocess.Popen(
      [
        sys.executable,
        "-c",
        textwrap.dedent(_CHILD),
        str(port),
        str(num_processes),
        str(i),
        job_log_dir,
        exp,
      ],
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for i in range(num_processes)
  ]
  outputs = [p.communicate(timeout=400) for p in procs]
  for p, (out, err) in zip(procs, outputs):
    assert p.returncode == 0, err[-4000:]
  return [out + err for out, err in outputs]


class MultihostTest(absltest.TestCase):
  def test_two_processes_match_one(self):
    single_dir = self.create_tempdir().full_path
    multi_dir = self.create_tempdir().full_path
    # The one-process reference runs in this process (4 devices, set by the BUILD target): a
    # child would only add its start-up.
    self.assertEqual(jax.device_count(), 4, "the BUILD target sets 4 host devices")
    trainer.train_and_evaluate(MultihostLm(), single_dir)
    _run(2, 2, multi_dir, "MultihostLm")
    (single,) = event_files.scalars_by_file(single_dir)
    multi = event_files.scalars_by_file(multi_dir)
    self.assertLen(multi, 1)  # One set of summaries: process 0's.
    self.assertEqual(sorted(multi[0]), [1, 2, 3, 4])
    np.testing.assert_allclose(
      [multi[0][s] for s in range(1, 5)], [single[s] for s in range(1, 5)], rtol=2e-5
    )
    self.assertIn("checkpoint_00000004", os.listdir(os.path.join(multi_dir, "checkpoints")))

    logs = _run(2, 2, multi_dir, "MultihostLm6")
    for log in logs:
      self.assertIn("Restored checkpoint at step 4", log)
    self.assertEqual(sorted(event_files.scalars_by_file(multi_dir)[-1]), [5, 6])

    # Multislice, against the same one-process reference (same global batch of 8 rows).
    slice_dir = self.create_tempdir().full_path
    logs = _run(2, 4, slice_dir, "MultisliceLm")
    for log in logs:
      self.assertIn("MESH {'replica': 2, 'data': 4, 'mdl': 1} [[0], [1]]", log)
    (multislice,) = event_files.scalars_by_file(slice_dir)
    np.testing.assert_allclose(
      [multislice[s] for s in range(1, 5)], [single[s] for s in range(1, 5)], rtol=2e-5
    )


if __name__ == "__main__":
  absltest.main()
