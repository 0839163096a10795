"""Helpers that build Chain configs and small layers that are handy inside a chain.

Each helper returns a `pax_fiddle.Config` with a default name (override with name=...):
chain, copy_n_times, repeat (a scanned Repeat of a chain), add_residual, apply_padding,
dict_to_args, log_args, full_like, feed_forward; kwargs_with_name fills in a default name.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
import copy
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import linears
from praxis.layers import repeats
from praxis.layers.chain import chain as chain_lib
from praxis import pytypes

Config = pax_fiddle.Config
BaseLayer = base_layer.BaseLayer
Chain = chain_lib.Chain


def kwargs_with_name(default_name: str, **kwargs: Any) -> dict[str, Any]:
  """kwargs with name=default_name added unless a name is given."""
  return kwargs if "name" in kwargs else {**kwargs, "name": default_name}


def _name_layers_uniquely(layers_tpl: Sequence[Any]) -> list[Any]:
  """Copies of the non-empty templates; repeated names get suffixes 0, 1, ... (unnamed: 'layers')."""
  layers_tpl = [l for l in layers_tpl if l]
  counts = collections.Counter(l.name or "layers" for l in layers_tpl)
  seen = collections.defaultdict(int)
  named = []
  for layer in layers_tpl:
    name = layer.name or "layers"
    suffix = str(seen[name]) if counts[name] > 1 else ""
    seen[name] += 1
    named.append(copy.deepcopy(layer).set(name=name + suffix))
  return named


def chain(*layers_tpl: Any, **kwargs: Any) -> Config:
  """Config(Chain) of the layers (None and empty chains are dropped), uniquely named."""
  return Config(
    Chain, layers=_name_layers_uniquely(layers_tpl), **kwargs_with_name("chain", **kwargs)
  )


def copy_n_times(num_times: int, *layers_tpl: Any, **kwargs: Any) -> Config:
  """A chain of num_times copies of the layers (separate weights per copy).

  repeat() compiles once for all copies (a scan) where its constraints allow; prefer it.
  """
  copies = [copy.deepcopy(l) for l in layers_tpl * num_times]
  return chain(*copies, **kwargs_with_name("chain_copy_n_times", **kwargs))


def repeat(x_times: int, *layers_tpl: Any, **kwargs: Any) -> Config:
  """Config(repeats.Repeat) scanning a chain of the layers x_times, all positional args carried."""
  return Config(
    repeats.Repeat,
    x_times=x_times,
    sub_tpl=chain(*layers_tpl),
    positional_args_as_scan_carry=True,
    **kwargs_with_name("chain_repeat", **kwargs),
  )


class ApplyPadding(BaseLayer):
  """Zeroes the padded positions of `inputs` (Pax's py_utils.apply_padding with an axis).

  `paddings` lines up with `inputs` from dim 0 and gains trailing size-1 dims: [B, T] and
  [B, T, 1] both pad inputs [B, T, D].

  Attributes:
    axis: where the paddings' dims start lining up with the inputs' trailing dims.
  """

  axis: int = 0

  def __call__(self, inputs: jax.Array, paddings: jax.Array) -> jax.Array:
    head, tail = list(paddings.shape[: self.axis]), list(paddings.shape[self.axis :])
    inputs_tail = inputs.ndim - self.axis
    ones = [1] * max(inputs_tail - len(tail), 0)
    paddings = jnp.reshape(paddings, head + tail[:inputs_tail] + ones)
    return jnp.where(paddings > 0, jnp.zeros([], inputs.dtype), inputs)


def apply_padding(**kwargs: Any) -> Config:
  """Config(ApplyPadding): zeroes padded positions of the first argument."""
  return Config(ApplyPadding, **kwargs_with_name("pad", **kwargs))


class AddResidual(Chain):
  """A Chain whose first output gets the first input added."""

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    outputs = list(chain_lib.ensure_tuple(super().__call__(*args, **kwargs)))
    outputs[0] = outputs[0] + args[0]
    return tuple(outputs) if len(outputs) > 1 else outputs[0]


def add_residual(*layers: Any, **kwargs: Any) -> Config:
  """Config(AddResidual): chains the layers and adds the residual to the first output."""
  return Config(
    AddResidual, layers=_name_layers_uniquely(layers), **kwargs_with_name("add_residual", **kwargs)
  )


class DictToArgs(BaseLayer):
  """Turns a dict into positional values (one value, or a tuple of them).

  Attributes:
    keys: the keys to look up, in the order to return.
  """

  keys: Sequence[str] = ()

  def __call__(self, input_batch: dict[str, jax.Array]) -> Any:
    values = []
    for key in self.keys:
      value = input_batch.get(key)
      if value is None:
        raise ValueError(
          f"DictToArgs: key {key!r} is not in the batch (keys: {list(input_batch)})."
        )
      values.append(value)
    return tuple(values) if len(values) > 1 else values[0]


def dict_to_args(*keys: str, **kwargs: Any) -> Config:
  """Config(DictToArgs) looking up `keys`."""
  return Config(DictToArgs, keys=keys, **kwargs_with_name("dict_to_args", **kwargs))


class LogArgs(BaseLayer):
  """Logs its arguments' shapes (and values with log_values) and returns nothing, for debugging.

  Returning None leaves the chain's argument stack as it was.

  Attributes:
    message: a header for the log lines.
    log_values: log tensor values too, not only shapes.
  """

  message: str | None = None
  log_values: bool = False

  def _describe(self, value: Any) -> str:
    if isinstance(value, jax.Array):
      return f"{value.shape} values=\n{value}" if self.log_values else f"{value.shape}"
    return f"{value}"

  def __call__(self, *args: Any, **kwargs: Any) -> None:
    logging.info("---- %s len(args)=%d len(kwargs)=%d", self.message or "", len(args), len(kwargs))
    for i, arg in enumerate(args):
      logging.info("%d: %s", i, self._describe(arg))
    for key, value in kwargs.items():
      logging.info("%s= %s", key, self._describe(value))
    logging.info("----")


def log_args(message: str | None = None, log_values: bool = False, **kwargs: Any) -> Config:
  """Config(LogArgs)."""
  return Config(
    LogArgs, message=message or "", log_values=log_values, **kwargs_with_name("log_args", **kwargs)
  )


class FullLike(BaseLayer):
  """jnp.full_like(inputs, fill_value).

  Attributes:
    fill_value: the value.
  """

  fill_value: float = 1.0

  def __call__(self, inputs: jax.Array) -> jax.Array:
    return jnp.full_like(inputs, self.fill_value)


def full_like(fill_value: float, **kwargs: Any) -> Config:
  """Config(FullLike)."""
  return Config(FullLike, fill_value=fill_value, **kwargs_with_name("full_like", **kwargs))


def feed_forward(
  input_dims: int, output_dims: int, activation_tpl: Any = None, **kwargs: Any
) -> Config:
  """Config(linears.FeedForward) with an Identity activation unless one is given."""
  return Config(
    linears.FeedForward,
    input_dims=input_dims,
    output_dims=output_dims,
    activation_tpl=activation_tpl or Config(activations.Identity),
    **kwargs_with_name("feedforward", **kwargs),
  )


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
