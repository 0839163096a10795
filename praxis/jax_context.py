"""Pax's `JaxContext` (re-exported by base_layer): run-wide settings read by layers.

    context_p = base_layer.JaxContext.HParams(do_eval=True)
    with base_layer.JaxContext.new_context(hparams=context_p):
      out = layer.apply(variables, x)      # layers see self.do_eval == True

Layers read it while they are traced (it is a Python-side stack, not part of jit's cache key), so
enter it around the first call of a jitted function.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from typing import Any

import jax.numpy as jnp


class _Stack(threading.local):
  def __init__(self):
    super().__init__()
    self.stack: list[JaxContext] = []


_STACK = _Stack()


class JaxContext:
  """The settings of the current forward pass: eval mode, summary verbosity, ..."""

  @dataclasses.dataclass
  class HParams:
    """JaxContext settings (Pax's fields and defaults).

    Attributes:
      do_eval: eval mode (dropout off, batch norm uses its moving statistics); None reads False.
      summary_verbosity: summaries with a verbosity above this are dropped (Pax's default 3).
      mesh_axes_transpose: {new_axis: old_axis} renaming of mesh axes in shardings.
      self_reflect_configs: record each layer's config in the "hyper_params" collection
        (abstract_init_with_mdl_config sets it).
    """

    do_eval: bool | None = None
    summary_verbosity: int = 3
    mesh_axes_transpose: dict[str, str] | None = None
    self_reflect_configs: bool = False

    def clone(self) -> JaxContext.HParams:
      return copy.deepcopy(self)

  def __init__(self, hparams: JaxContext.HParams):
    self._hparams = hparams.clone()
    self._summaries = SummaryDict()

  @property
  def hparams(self) -> JaxContext.HParams:
    return self._hparams

  @property
  def do_eval(self) -> bool:
    return bool(self._hparams.do_eval)

  @property
  def summary_verbosity(self) -> int:
    return self._hparams.summary_verbosity

  @property
  def self_reflect_configs(self) -> bool:
    return self._hparams.self_reflect_configs

  @property
  def summary_dict(self) -> SummaryDict:
    """Global summaries added with add_global_summary (`.dict`: {key: value})."""
    return self._summaries

  def __enter__(self) -> JaxContext:
    _STACK.stack.append(self)
    return self

  def __exit__(self, *unused_exc):
    if not _STACK.stack or _STACK.stack[-1] is not self:
      raise RuntimeError("JaxContext contexts exited out of order.")
    _STACK.stack.pop()

  @staticmethod
  def top() -> JaxContext | None:
    return _STACK.stack[-1] if _STACK.stack else None

  @staticmethod
  def has_context() -> bool:
    return bool(_STACK.stack)

  @staticmethod
  def new_context(*, hparams: JaxContext.HParams | None = None) -> JaxContext:
    """A new context: `hparams`, else a copy of the current context's, else the defaults."""
    if hparams is None:
      current = JaxContext.top()
      hparams = current.hparams if current is not None else JaxContext.HParams()
    return JaxContext(hparams)


def cur_jax_context() -> JaxContext:
  current = JaxContext.top()
  if current is None:
    raise RuntimeError(
      "No JaxContext is active; wrap the call in `with base_layer.JaxContext.new_context():`."
    )
  return current


class SummaryDict:
  """Summaries by key `<name><n>_<type>` (Pax's _SummaryDict): `add_summary` appends a number
  to the name while the key is taken (`loss_scalar`, `loss1_scalar`, ...)."""

  def __init__(self) -> None:
    self.dict: dict[str, Any] = {}

  def add_summary(self, name: str, tensor: Any, summary_type: Any) -> None:
    suffix = "_" + summary_type.name.lower()
    key, count = name + suffix, 0
    while key in self.dict:
      count += 1
      key = f"{name}{count}{suffix}"
    kind = summary_type.name
    if kind in ("IMAGE", "AGGREGATE_IMAGE"):
      if tensor.ndim == 3:  # [H, W, C] -> [1, H, W, C]
        tensor = jnp.expand_dims(tensor, 0)
      if tensor.ndim != 4:
        raise ValueError(
          f"Image summary {name!r} must be [B, H, W, C] or [H, W, C], got shape {tensor.shape}."
        )
    if kind == "AUDIO" and tensor.ndim == 2:  # [T, C] -> [1, T, C]
      tensor = jnp.expand_dims(tensor, 0)
    self.dict[key] = tensor

  def clear(self) -> None:
    self.dict = {}


def add_global_summary(
  name: str, tensor: Any, summary_type: Any = None, verbosity: int = 2
) -> None:
  """Adds a summary not tied to a layer to the current context (key `<name>_<type>`; float
  tensors in float32); skipped when `verbosity` exceeds the context's summary_verbosity."""
  if summary_type is None:
    from praxis.base_layer_parts import SummaryType  # pylint: disable=import-outside-toplevel

    summary_type = SummaryType.SCALAR
  context = cur_jax_context()
  if verbosity > context.summary_verbosity:
    return
  if jnp.issubdtype(tensor.dtype, jnp.floating):
    tensor = tensor.astype(jnp.float32)
  context.summary_dict.add_summary(name, tensor, summary_type)


def all_global_summaries() -> dict[str, Any]:
  return cur_jax_context().summary_dict.dict


def clear_global_summary() -> None:
  cur_jax_context().summary_dict.clear()
