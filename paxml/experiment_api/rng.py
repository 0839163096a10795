"""Device placement and per-host/per-device keys (JAXline's RNG handling).

  get_first(tree): device 0's slice of a pmapped value.
  bcast_local_devices(tree): a copy on every local device (leading axis).
  specialize_rng_host_device(rng, host_id, axis_name, mode): inside pmap,
    fold in the host id (modes `unique_host_*`) and then the device index
    (modes `*_unique_device`). The host id is data passed in, not
    `jax.process_index()` read inside the program: reading it would give
    every host a different executable.
"""

from typing import Any

import jax
import numpy as np

from paxml.experiment_api import base_config
from paxml.toolkit import pmap_utils


def get_first(tree: Any) -> Any:
  return jax.tree.map(lambda x: x[0], tree)


def bcast_local_devices(tree: Any) -> Any:
  if not jax.tree.leaves(tree):
    return tree
  return pmap_utils.replicate(tree)


def specialize_rng_host_device(rng: jax.Array, host_id: jax.Array, axis_name: str,
                               mode: str) -> jax.Array:
  if mode not in base_config.RANDOM_MODES:
    raise ValueError(f"Unknown random mode {mode!r}; use one of {base_config.RANDOM_MODES}.")
  if mode.startswith("unique_host"):
    rng = jax.random.fold_in(rng, host_id)
  if mode.endswith("unique_device"):
    rng = jax.random.fold_in(rng, jax.lax.axis_index(axis_name))
  return rng


def host_id_devices() -> jax.Array:
  """This process's index, once per local device (an argument for pmap)."""
  return bcast_local_devices(np.int32(jax.process_index()))


def make_step_rng_splitter(mode: str):
  """Returns pmapped `(state_rng, host_ids) -> (step_rng, next_state_rng)`."""
  def split(rng, host_id):
    step_rng, next_rng = jax.random.split(rng)
    return specialize_rng_host_device(step_rng, host_id, "i", mode), next_rng
  return jax.pmap(split, axis_name="i")


def make_eval_rng(seed: int, mode: str) -> jax.Array:
  """The eval key: the same on every call, specialised per host/device by `mode`."""
  specialize = jax.pmap(
      lambda r, h: specialize_rng_host_device(r, h, "i", mode), axis_name="i")
  return specialize(bcast_local_devices(jax.random.PRNGKey(seed)), host_id_devices())
