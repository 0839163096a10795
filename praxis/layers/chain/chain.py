"""Chain: layers called in turn, the positional arguments treated as a stack.

Each layer takes as many leading arguments as its `__call__` has required positional
parameters (all of them if it is variadic); its outputs replace those leading arguments and
the rest stay on the stack for later layers:

    outs = layer(*args[:n], **matching_kwargs)
    args = outs + args[len(outs):]

So `(inputs, paddings)` flows through a layer that only maps `inputs`, and a layer that
returns `(inputs, paddings)` passes both on. Keyword arguments are passed, unchanged, to each
layer whose signature names them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import inspect
from typing import Any

from praxis import base_layer


class Chain(base_layer.BaseLayer):
  """Calls `layers` in order with the argument stack described in the module docstring.

  Attributes:
    preserve_adopted_names: keep the names the layers were configured with (Flax's adoption
      naming); the variable tree then reads `<chain>/<layer name>`.
    layers: the layers (configs in the Chain's config, built with it); None entries are skipped.
  """

  preserve_adopted_names: bool = True
  layers: Sequence[base_layer.BaseLayer] | None = None

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    """The last layer's outputs (the input stack when there are no layers)."""
    return self.call_chain(*args, **kwargs)[-1]

  def call_chain(self, *args: Any, **kwargs: Any) -> Sequence[Any]:
    """Every layer's outputs, in order."""
    return call_chain(self.layers or (), *args, **kwargs)


def ensure_tuple(x: Any) -> tuple[Any, ...]:
  """x if it is a tuple, else (x,)."""
  return x if isinstance(x, tuple) else (x,)


def _name_attr(layer: Any) -> str:
  return getattr(layer, "name", "") or ""


def call_chain(layers: Sequence[Callable[..., Any]], *args: Any, **kwargs: Any) -> list[Any]:
  """Calls the non-None `layers` one after the other; returns each one's resulting stack.

  A stack of one item is returned as that item, of several as a tuple. With no layers the
  result is [args] (or [args[0]] for one argument).
  """
  outputs = []
  stack = args
  for index, layer in enumerate(l for l in layers if l is not None):
    try:
      result = call_chained_layer(layer, *stack, **kwargs)
    except Exception as e:
      # Re-raise the same type, saying which layer failed with which stack.
      raise type(e)(f"{e} Layer index={index} name={_name_attr(layer)} args: {stack}") from e
    outputs.append(result)
    stack = ensure_tuple(result)
  if not outputs:
    return [args if len(args) > 1 else args[0]]
  return outputs


def _num_required_positional(
  signature: inspect.Signature, kwargs: dict[str, Any]
) -> tuple[int, bool]:
  """(leading parameters without a default before any given kwarg, whether it is variadic)."""
  count = 0
  for name, param in signature.parameters.items():
    if name in kwargs or param.default is not inspect.Parameter.empty:
      return count, False
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
      return count, True
    count += 1
  return count, False


def call_chained_layer(layer: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
  """Calls `layer` on the leading args it requires (and the kwargs it names); returns the stack.

  The returned stack is the layer's outputs followed by the args it did not replace: one
  item is returned as is, several as a tuple.
  """
  signature = inspect.signature(layer.__call__)
  count, variadic = _num_required_positional(signature, kwargs)
  if count > len(args):
    raise ValueError(
      f"Layer name={_name_attr(layer)} needs {count} positional args but the chain has "
      f"{len(args)} (signature={signature}); give the chain more inputs or put a layer that "
      "produces them before it."
    )
  if variadic:
    outs = layer(*args, **kwargs)
  else:
    named = {k: v for k, v in kwargs.items() if k in signature.parameters}
    outs = layer(*args[:count], **named)
  outs = [] if outs is None else list(ensure_tuple(outs))
  stack = outs + list(args[len(outs) :])
  return tuple(stack) if len(stack) > 1 else stack[0]
