r"""What checkpoint checksums cost: save and restore with and without verification.

    ./bazelw run //paxml/benchmarks:checkpoint_integrity_cost -- --params=100_000_000 \
        --dir=/tmp/ckpt_cost

A train-state-shaped tree (params plus two Adam moments, float32, in 1-8 M-element arrays) is
saved with plain Orbax (no manifest) and with `paxml.checkpoints.Checkpointer` (manifest: file
SHA-256s read back from disk and per-array checksums on the device), then restored with
`verify=False` and with `verify=True`. Each is timed `--repeats` times (the median is printed),
with the bytes per second of the checkpoint size. The page cache is warm, as it is right after a
save; a cold read adds the disk's read time to both restores alike.
"""

import os
import shutil
import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from paxml import checkpoint_integrity
from paxml import checkpoints

_PARAMS = flags.DEFINE_integer("params", 50_000_000, "Parameters (the state holds 3x as many).")
_DIR = flags.DEFINE_string("dir", "/tmp/checkpoint_integrity_cost", "Scratch directory.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed repetitions of each measurement.")


def _state(num_params: int):
  sizes, left = [], num_params
  while left > 0:
    sizes.append(min(left, 1 << (20 + len(sizes) % 4)))
    left -= sizes[-1]
  key = jax.random.PRNGKey(0)
  params = {
    f"w{i}": jax.random.normal(jax.random.fold_in(key, i), (n,)) for i, n in enumerate(sizes)
  }
  return {
    "params": params,
    "opt_state": {"m": jax.tree.map(lambda x: x * 0.1, params), "v": jax.tree.map(jnp.abs, params)},
    "step": jnp.int32(1),
  }


def _median(fn, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _du(path: str) -> int:
  return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def main(argv):
  del argv
  state = _state(_PARAMS.value)
  jax.block_until_ready(state)
  abstract = jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
  )
  root = _DIR.value
  counter = [0]

  def fresh(name):
    counter[0] += 1
    path = os.path.join(root, f"{name}{counter[0]}")
    shutil.rmtree(path, ignore_errors=True)
    return path

  def plain_save():
    with ocp.CheckpointManager(fresh("plain"), item_names=("state",)) as manager:
      manager.save(0, args=ocp.args.Composite(state=ocp.args.StandardSave(state)))
      manager.wait_until_finished()

  def checked_save():
    with checkpoints.Checkpointer(fresh("checked"), save_interval_steps=1, max_to_keep=1) as ckpt:
      ckpt.save(0, state, {"pos": 0})
      ckpt.wait_until_finished()

  results = {}
  shutil.rmtree(root, ignore_errors=True)
  os.makedirs(root)
  results["save, Orbax alone"] = _median(plain_save, _REPEATS.value)
  results["save + manifest"] = _median(checked_save, _REPEATS.value)
  job_log_dir = os.path.join(root, f"checked{counter[0]}")
  step_dir = os.path.join(checkpoints.checkpoint_dir(job_log_dir), "checkpoint_00000000")
  size = _du(step_dir)
  results["  of which file SHA-256s"] = _median(
    lambda: checkpoint_integrity.file_checksums(step_dir), _REPEATS.value
  )
  results["  of which array checksums"] = _median(
    lambda: checkpoint_integrity.finish_array_checksums(
      checkpoint_integrity.start_array_checksums(state)
    ),
    _REPEATS.value,
  )

  def restore(verify):
    with checkpoints.Checkpointer(
      job_log_dir, save_interval_steps=1, max_to_keep=1, verify=verify
    ) as ckpt:
      jax.block_until_ready(ckpt.restore(abstract).state)

  results["restore, verify=False"] = _median(lambda: restore(False), _REPEATS.value)
  results["restore, verify=True"] = _median(lambda: restore(True), _REPEATS.value)

  print(
    f"{_PARAMS.value:,} params, state {size / 1e9:.2f} GB on disk, "
    f"{jax.devices()[0].platform} x{jax.device_count()}, {os.cpu_count()} CPUs"
  )
  for name, secs in results.items():
    print(f"{name:28s} {secs:7.2f} s  {size / secs / 1e9:6.2f} GB/s")
  shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
  app.run(main)
