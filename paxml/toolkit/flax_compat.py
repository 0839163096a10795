"""flax's TrainState for params that are not a dict, as bobbin relied on.

flax >= 0.8 looks for its fp8 OVERWRITE_WITH_GRADIENT collection with
`name in params` inside `TrainState.create` and `apply_gradients`, so params
that are None, a tuple or a scalar raise `TypeError: argument of type
'NoneType' is not iterable`. bobbin code (and bobbin's own tests) build
`flax.training.train_state.TrainState.create(apply_fn=None, params=None,
tx=optax.identity())` for states that only carry a step.

`install()` (run when `paxml.toolkit` is imported) wraps both methods of
flax's class: a dict still goes through flax unchanged; any other tree
(None, a tuple, an array) takes the plain optax path flax took before 0.8. Nothing that
works in flax changes, only the TypeError goes away; docs/toolkit.md lists
this as a deliberate difference.
"""

from collections.abc import Mapping
from typing import Any

import flax.training.train_state
import optax

_FlaxTrainState = flax.training.train_state.TrainState
_INSTALLED_MARK = "_paxml_toolkit_accepts_any_params"


def _flax_handles(tree: Any) -> bool:
  # Only a mapping survives flax's `OVERWRITE_WITH_GRADIENT in tree` in both
  # methods (an array passes `create` but not `apply_gradients`); for any
  # other tree flax's result would be the plain optax one below anyway.
  return isinstance(tree, Mapping)


def install() -> None:
  """Makes flax's TrainState.create/apply_gradients accept any params tree."""
  if getattr(_FlaxTrainState, _INSTALLED_MARK, False):
    return
  flax_create = _FlaxTrainState.create.__func__
  flax_apply_gradients = _FlaxTrainState.apply_gradients

  def create(cls, *, apply_fn: Any, params: Any, tx: optax.GradientTransformation, **kwargs: Any):
    if _flax_handles(params):
      return flax_create(cls, apply_fn=apply_fn, params=params, tx=tx, **kwargs)
    return cls(step=0, apply_fn=apply_fn, params=params, tx=tx, opt_state=tx.init(params), **kwargs)

  def apply_gradients(self, *, grads: Any, **kwargs: Any):
    if _flax_handles(grads):
      return flax_apply_gradients(self, grads=grads, **kwargs)
    updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
    return self.replace(
      step=self.step + 1,
      params=optax.apply_updates(self.params, updates),
      opt_state=opt_state,
      **kwargs,
    )

  create.__doc__ = flax_create.__doc__
  apply_gradients.__doc__ = flax_apply_gradients.__doc__
  _FlaxTrainState.create = classmethod(create)
  _FlaxTrainState.apply_gradients = apply_gradients
  setattr(_FlaxTrainState, _INSTALLED_MARK, True)
