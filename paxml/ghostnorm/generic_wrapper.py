"""Ghost-norm support for any layer, by wrapping it, and the template rewrite that applies it.

`WrappedGhostNorm` runs a layer inside a jax.custom_vjp whose backward computes each example's
weight gradient with a vmapped VJP (one example at a time, kept as a batch of one), so any layer
follows the protocol of base.py at the cost of per-example work in the backward pass. Its
variables nest the wrapped layer's under `ghostnorm_wrapped_layer` (LAYER).

`generate_wrapped_template(cfg)` rewrites a model template: Linear, Bias and Embedding become
their ghost-norm versions (linears.py, embedding.py); the layers in the wrappable list are
wrapped; every other layer template is searched for such children. Layers outside both lists
keep plain weights, so a model must be built from covered layers only, and must not share
weights between layers.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Iterable, Mapping

import fiddle as fdl
import jax
import jax.numpy as jnp

from paxml.ghostnorm import base
from paxml.ghostnorm import embedding
from paxml.ghostnorm import linears
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import attentions as praxis_attentions
from praxis.layers import embedding_softmax as praxis_embedding
from praxis.layers import linears as praxis_linears
from praxis.layers import normalizations as praxis_normalizations
from praxis.layers import transformers as praxis_transformers

template_field = base_layer.template_field
instantiate = base_layer.instantiate
LayerTpl = pax_fiddle.Config
PARAMS = base_layer.PARAMS
LAYER = "ghostnorm_wrapped_layer"
JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor


def _create_ghostnorm_fn(
  fn: Callable[..., Any], signature: inspect.Signature
) -> Callable[..., Any]:
  """fn(variables, *args) -> outputs, as a function whose VJP follows the ghost-norm protocol.

  Keyword arguments are bound to positions with `signature` (custom_vjp takes positional
  arguments only); every positional argument must have the batch as its leading dim.
  """

  @jax.custom_vjp
  def call(variables, *args):
    return fn(base.get_param(variables), *args)

  def fwd(variables, *args):
    plain = base.get_param(variables)
    out, vjp_fn = jax.vjp(fn, plain, *args)
    return out, (vjp_fn, plain, base.get_aux(variables), args)

  def bwd(res, g):
    vjp_fn, plain, scales, args = res
    if scales is None:
      return vjp_fn(g)
    d_args = vjp_fn(g)[1:]  # the inputs' gradients are never scaled
    g_scaled = jax.tree.map(lambda t: linears._scale_rows(scales, t), g)  # pylint: disable=protected-access
    d_vars = vjp_fn(g_scaled)[0]
    batch = jax.tree.leaves(args)[0].shape[0]

    def one_example(g_one, *args_one):
      # Each example as a batch of one, so layers that expect a batch dim see one.
      add_batch = functools.partial(jax.tree.map, lambda t: t[None])
      _, vjp_one = jax.vjp(lambda v: fn(v, *add_batch(args_one)), plain)
      return vjp_one(add_batch(g_one))[0]

    per_example = jax.vmap(one_example)(g_scaled, *args)  # leaves [B, ...]
    # Batch-mean loss: example b alone would have B times its share of the gradient.
    sq_norms = jax.tree.map(
      lambda t: jnp.sum(jnp.square(t * batch).reshape(batch, -1), axis=1), per_example
    )
    return (jax.tree.map(base.ParamWithAux, d_vars, sq_norms), *d_args)

  call.defvjp(fwd, bwd)

  def call_with_kwargs(variables, *args, **kwargs):
    if base.get_aux(variables) is None:
      # Plain weights (eval, ordinary training): the layer's own call and gradient. Going
      # through custom_vjp here would run the layer as one compiled call, whose fused float
      # results can differ from the unwrapped layer's in the last bit.
      return fn(variables, *args, **kwargs)
    bound = signature.bind(*args, **kwargs)
    return call(variables, *bound.args)

  return call_with_kwargs


class WrappedGhostNorm(base_layer.BaseLayer):
  """Runs the layer of `layer_tpl` (child `ghostnorm_wrapped_layer`) with ghost-norm gradients.

  Attributes:
    layer_tpl: the wrapped layer's template.
  """

  layer_tpl: LayerTpl | None = template_field(None)

  def setup(self) -> None:
    if self.layer_tpl is None:
      raise ValueError("WrappedGhostNorm needs layer_tpl, the template of the layer to wrap.")
    self.create_child(LAYER, self.layer_tpl.clone())

  def _run(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
    layer = getattr(self, LAYER)
    method = getattr(layer, method_name)
    if self.is_initializing() or PARAMS not in self.variables:
      return method(*args, **kwargs)  # creating the variables: no gradient to customise
    # The wrapped layer runs as a pure function of its variables, outside this module's scope.
    detached = layer.clone(parent=None)
    fn = functools.partial(detached.apply, method=method_name)
    variables = {col: tree[LAYER] for col, tree in self.variables.items() if LAYER in tree}
    return _create_ghostnorm_fn(fn, inspect.signature(method))(variables, *args, **kwargs)

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    return self._run("__call__", *args, **kwargs)


# Layers wrapped whole (their children are not searched), with the methods besides __call__
# that the wrapper exposes (Pax's list).
_WRAPPABLE_LAYERS_TO_EXTRA_FNS: Mapping[type, tuple[str, ...]] = {
  praxis_attentions.AttentionProjection: (),
  praxis_attentions.CausalDepthwiseConv1D: (),
  praxis_attentions.CombinedQKVProjectionLayer: (),
  praxis_attentions.PerDimScale: (),
  praxis_embedding.Embedding: ("emb_lookup",),
  praxis_normalizations.GroupNorm: (),
  praxis_normalizations.LayerNorm: (),
  praxis_normalizations.RmsNorm: (),
  praxis_transformers.TransformerFeedForwardMoe: (),
}

# Layers replaced by a ghost-norm version with the same fields and variables.
_REPLACE_MAP: Mapping[type, type] = {
  praxis_embedding.Embedding: embedding.EmbeddingGhostNorm,
  praxis_linears.Linear: linears.LinearGhostNorm,
  praxis_linears.Bias: linears.BiasGhostNorm,
}


def _get_method_names(layer_p: pax_fiddle.Config) -> tuple[str, ...]:
  for cls, names in _WRAPPABLE_LAYERS_TO_EXTRA_FNS.items():
    if issubclass(layer_p.cls, cls):
      return names
  return ()


@functools.cache
def _wrapper_class(method_names: tuple[str, ...]) -> type[WrappedGhostNorm]:
  """WrappedGhostNorm with the extra methods `method_names` (e.g. emb_lookup) forwarded."""
  if not method_names:
    return WrappedGhostNorm

  def forwarder(name):
    def method(self, *args, **kwargs):
      return self._run(name, *args, **kwargs)  # pylint: disable=protected-access

    method.__name__ = name
    return method

  attrs = {name: forwarder(name) for name in method_names}
  attrs["__module__"] = __name__
  return type("WrappedGhostNorm_" + "_".join(method_names), (WrappedGhostNorm,), attrs)


class GhostNormPaxConfig(pax_fiddle.Config):
  """A layer config that builds its layer wrapped in a WrappedGhostNorm (the wrapper takes the
  layer's name, so the wrapped variables sit under `<name>/ghostnorm_wrapped_layer`)."""

  def __build__(self, *args: Any, **kwargs: Any) -> WrappedGhostNorm:
    if args:
      raise ValueError(
        "GhostNormPaxConfig builds from keyword arguments only; got positional ones."
      )
    layer_p = self.to_pax_config()
    for name, value in kwargs.items():
      setattr(layer_p, name, value)
    wrapper_kwargs = {k: kwargs[k] for k in ("name", "dtype", "fprop_dtype") if k in kwargs}
    return _wrapper_class(tuple(_get_method_names(layer_p)))(layer_tpl=layer_p, **wrapper_kwargs)

  @staticmethod
  def from_pax_config(pax_config: pax_fiddle.Config) -> GhostNormPaxConfig:
    return GhostNormPaxConfig.__unflatten__(*pax_config.__flatten__())

  def to_pax_config(self) -> pax_fiddle.Config:
    return pax_fiddle.Config.__unflatten__(*self.__flatten__())


def _is_layer_config(value: Any) -> bool:
  return (
    isinstance(value, fdl.Config)
    and isinstance(value.__fn_or_cls__, type)
    and issubclass(value.__fn_or_cls__, base_layer.BaseLayer)
  )


def _is_wrappable(layer_p: pax_fiddle.Config) -> bool:
  return issubclass(layer_p.cls, base_layer.BaseLayer) and issubclass(
    layer_p.cls, tuple(_WRAPPABLE_LAYERS_TO_EXTRA_FNS)
  )


def generate_wrapped_template(
  model_or_layer_p: pax_fiddle.Config,
  force_no_replace: bool = False,
  force_wrap: bool = False,
) -> pax_fiddle.Config:
  """Rewrites a layer/model template (in place) so its weights follow the ghost-norm protocol.

  Args:
    model_or_layer_p: the template.
    force_no_replace: don't swap this layer for its ghost-norm version even where one exists.
    force_wrap: wrap this layer whole even if it is not in the wrappable list.

  Returns:
    The rewritten template (a GhostNormPaxConfig where the layer itself is wrapped).
  """
  if not isinstance(model_or_layer_p, pax_fiddle.Config):
    raise TypeError(
      f"generate_wrapped_template takes a pax_fiddle.Config, got {type(model_or_layer_p)}."
    )
  if not force_no_replace and model_or_layer_p.cls in _REPLACE_MAP:
    model_or_layer_p.cls = _REPLACE_MAP[model_or_layer_p.cls]
    return model_or_layer_p
  if force_wrap or _is_wrappable(model_or_layer_p):
    return GhostNormPaxConfig.from_pax_config(model_or_layer_p)
  for name in model_or_layer_p.__dir__():
    try:
      value = getattr(model_or_layer_p, name)  # defaults too (template fields' factories)
    except AttributeError:
      continue  # a required argument not set yet
    if _is_layer_config(value):
      setattr(model_or_layer_p, name, generate_wrapped_template(value))
    elif isinstance(value, Mapping):
      if any(_is_layer_config(v) for v in value.values()):
        rewritten = {
          k: generate_wrapped_template(v) if _is_layer_config(v) else v for k, v in value.items()
        }
        setattr(model_or_layer_p, name, rewritten)
    elif isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
      items = list(value)
      if any(_is_layer_config(v) for v in items):
        rewritten = [generate_wrapped_template(v) if _is_layer_config(v) else v for v in items]
        setattr(model_or_layer_p, name, rewritten)
  return model_or_layer_p
