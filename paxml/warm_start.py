"""Warm start: a new run's initial state takes some of its arrays from another run's checkpoint.

Pax's `train.init_from_checkpoint_rules`: `TaskConfig.init_from_checkpoint_rules` maps a source
(a job_log_dir, its checkpoints/ directory, or one checkpoint_%08d directory) to a
`tasks_lib.CheckpointLoadingRules`. It applies only when the run's own job_log_dir has no checkpoint yet;
once the run has saved, a restart resumes from its own checkpoints and never reads the source
again (the warm-started state is the run's step-0 checkpoint).

Names. Every array of the train state has a name: its path with '/' between keys, `mdl_vars/`
left out (as Pax's rules name model variables), e.g.

  params/lm/transformer/x_layers_0/ff_layer/ffn_layer1/linear/w   (weights; post_init_model_params.txt
                                                                  lists them without 'params/')
  opt_states/0/0/1/0/mu/lm/...                                     (the optimizer's moments)
  step, extra_state/skipped_steps
A checkpoint written before the train state took Pax's fields offers the same names
(paxml/train_state_names.py).

Rules. For each array of the new state (the target), in order:
  1. if its name fully matches a pattern in `ignore_rules`, it keeps its initial value;
  2. else the first `(pattern, source_format)` in `load_rules` whose pattern fully matches the
     name gives the source name `source_format.format(*match.groups())`, and the array is read
     from the checkpoint under that name (cast to the target's dtype, sharded as the target);
  3. a name no rule matches keeps its initial value.
So `(r"params/(.*)", "params/{}")` copies every weight of the same name; `(r"(.*)", "{}")` the
whole state (step and optimizer state included); and e.g.
`(r"params/lm/transformer/x_layers_(\\d+)/(.*)", "params/lm/transformer/x_layers_{}/{}")` only
the layers. A source name missing from the checkpoint, a shape that differs, a rule set that
matches nothing, or one array claimed by two sources is an error that names the arrays.
"""

from collections.abc import Mapping, Sequence
import difflib
import re
from typing import Any

from absl import logging
import jax

from paxml import checkpoints
from paxml import tasks_lib
from paxml import train_state_names
from praxis import pytypes


def _name(path: Any) -> str:
  return train_state_names.pax_name(pytypes.path_name(path))


def named_leaves(tree: Any) -> dict[str, Any]:
  """{name: leaf} for every array of `tree` (a train state, or a checkpoint's tree in either
  layout), named as in the module docstring."""
  return {_name(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def plan(
  target_names: Sequence[str],
  source_names: Sequence[str],
  rules: tasks_lib.CheckpointLoadingRules,
  source: str = "the checkpoint",
) -> dict[str, str]:
  """{target name: source name} for the arrays `rules` load; raises on a missing source."""
  loads = {}
  source_set = set(source_names)
  for name in target_names:
    if any(re.fullmatch(p, name) for p in rules.ignore_rules):
      continue
    for pattern, source_format in rules.load_rules:
      match = re.fullmatch(pattern, name)
      if match:
        source_name = source_format.format(*match.groups())
        if source_name not in source_set:
          near = difflib.get_close_matches(source_name, source_names, n=3, cutoff=0.5)
          raise KeyError(
            f"Warm start: rule ({pattern!r}, {source_format!r}) maps {name!r} to "
            f"{source_name!r}, which {source} does not have"
            + (f"; similar names there: {near}" if near else "")
            + ". Fix the rule, or exclude the array with ignore_rules."
          )
        loads[name] = source_name
        break
  if not loads:
    raise ValueError(
      f"Warm start from {source}: no array of the new state matches the load_rules "
      f"{[p for p, _ in rules.load_rules]}; its names look like {list(target_names)[:3]}"
    )
  return loads


def apply(
  state: Any, abstract_state: Any, rules_by_source: Mapping[str, tasks_lib.CheckpointLoadingRules]
) -> Any:
  """`state` with the arrays the rules name replaced by the sources' (module docstring).

  Args:
    state: the freshly initialised train state.
    abstract_state: its `jax.ShapeDtypeStruct`s with shardings (StateLayout.abstract): what each
      read array is cast and sharded to.
    rules_by_source: {source path: rules}, read in order.
  """
  targets = named_leaves(abstract_state)
  loaded: dict[str, jax.Array] = {}
  origin: dict[str, str] = {}
  for source, rules in rules_by_source.items():
    with checkpoints.CheckpointReader(source) as reader:
      step = rules.step if rules.step is not None else reader.latest_step()
      if step is None:
        raise FileNotFoundError(f"Warm start: {reader.directory} has no finished checkpoint")
      metadata = reader.state_metadata(step)
      available = named_leaves(metadata)
      loads = plan(list(targets), list(available), rules, f"{reader.directory} step {step}")
      for name, source_name in loads.items():
        if name in origin:
          raise ValueError(
            f"Warm start: {name!r} is loaded from both {origin[name]} and "
            f"{source}; narrow one source's load_rules or ignore_rules"
          )
        if available[source_name].shape != targets[name].shape:
          raise ValueError(
            f"Warm start: {name!r} has shape {targets[name].shape} but {source_name!r} in "
            f"{reader.directory} step {step} has {available[source_name].shape}"
          )
      loaded.update(_read(reader, step, metadata, loads, targets))
      origin.update(dict.fromkeys(loads, source))
      logging.info(
        "Warm start: %d of %d arrays from %s step %d",
        len(loads),
        len(targets),
        reader.directory,
        step,
      )
  kept = [n for n in targets if n not in loaded]
  if kept:
    logging.info(
      "Warm start: %d arrays keep their initial values: %s%s",
      len(kept),
      ", ".join(kept[:8]),
      " ..." if len(kept) > 8 else "",
    )
  paths, treedef = jax.tree_util.tree_flatten_with_path(state)
  return jax.tree_util.tree_unflatten(
    treedef, [loaded.get(_name(path), leaf) for path, leaf in paths]
  )


def _read(
  reader: checkpoints.CheckpointReader,
  step: int,
  metadata: Any,
  loads: dict[str, str],
  targets: dict[str, jax.ShapeDtypeStruct],
) -> dict[str, jax.Array]:
  """{target name: array} for every target in `loads`; each source array is read once.

  An array read for several targets (one source layer copied into two) is read with the first
  target's dtype and sharding and copied for the others.
  """
  first_target = {}
  for name, source_name in loads.items():
    first_target.setdefault(source_name, targets[name])
  requests = jax.tree_util.tree_map_with_path(
    lambda path, _: first_target.get(_name(path)), metadata
  )
  arrays = named_leaves(reader.restore_leaves(step, requests))
  out, used = {}, set()
  for name, source_name in loads.items():
    array, target = arrays[source_name], targets[name]
    if source_name in used or array.dtype != target.dtype or array.sharding != target.sharding:
      # A copy of its own: the train step donates every state buffer, and one buffer cannot be
      # donated twice.
      array = jax.device_put(array.astype(target.dtype), target.sharding, may_alias=False)
    used.add(source_name)
    out[name] = array
  return out
