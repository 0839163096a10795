"""Checkpointed train states in both layouts this project has written, and their arrays' names.

Checkpoints written before the train state took Pax's fields hold
`{step, params, opt_state, skipped_steps}`; newer ones hold Pax's
`TrainState(step, mdl_vars={"params": ...}, opt_states=[...], extra_state={"skipped_steps": ...})`.
Restores read either (`restore_target` / `from_saved`), and warm-start rules see one set of names
for both (`pax_name`): Pax's `mdl_vars` names (`params/lm/...`), `opt_states/0/...`, `step` and
`extra_state/skipped_steps`.
"""

from collections.abc import Mapping
from typing import Any

from paxml import train_states

_LEGACY_KEYS = frozenset({"step", "params", "opt_state", "skipped_steps"})


def is_legacy(saved_tree: Any) -> bool:
  """Whether a saved state's tree (its metadata, or the restored dict) has the old fields."""
  return isinstance(saved_tree, Mapping) and set(saved_tree) == _LEGACY_KEYS


def legacy_target(abstract: train_states.TrainState) -> dict[str, Any]:
  """`abstract` (the new layout) rearranged as an old checkpoint stores it, to restore into."""
  (opt_state,) = abstract.opt_states  # The old layout had one learner.
  return {
    "step": abstract.step,
    "params": abstract.mdl_vars["params"],
    "opt_state": opt_state,
    "skipped_steps": abstract.extra_state[train_states.SKIPPED_STEPS],
  }


def restore_target(abstract: Any, saved_tree: Any) -> Any:
  """What to restore a checkpoint whose tree is `saved_tree` into, given the wanted `abstract`."""
  if is_legacy(saved_tree) and isinstance(abstract, train_states.TrainState):
    return legacy_target(abstract)
  return abstract


def from_saved(restored: Any) -> Any:
  """A restored state in Pax's fields, whichever layout it was saved in."""
  if not is_legacy(restored):
    return restored
  return train_states.make_train_state(
    step=restored["step"],
    params=restored["params"],
    opt_state=restored["opt_state"],
    skipped_steps=restored["skipped_steps"],
  )


def params_key(saved_tree: Mapping[str, Any]) -> tuple[str, ...]:
  """The keys leading to the weights in a saved state's tree (either layout)."""
  return ("params",) if is_legacy(saved_tree) else ("mdl_vars", "params")


def pax_name(saved_name: str) -> str:
  """The name warm-start rules match for an array saved under `saved_name` (either layout).

  Pax's rules name model variables without a prefix (`params/lm/...`), so `mdl_vars/` is dropped;
  an old checkpoint's `opt_state/...` and `skipped_steps` read as the new layout's.
  """
  head, _, rest = saved_name.partition("/")
  if head == "mdl_vars":
    return rest
  if head == "opt_state":
    return f"opt_states/0/{rest}"
  if saved_name == "skipped_steps":
    return f"extra_state/{train_states.SKIPPED_STEPS}"
  return saved_name
