"""Pax's `praxis.test_utils`: the TestCase and helpers Pax's layer tests import.

    class MyTest(test_utils.TestCase):
      def test_x(self):
        self.assertAllClose(test_utils.to_np(out), expected)

TensorFlow is imported only by `to_tf_nmap` (Pax's tests compare against lingvo's TF layers).
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping
import zlib

from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

NestedMap = pytypes.NestedMap
JTensor = jax.Array


def _dtype(x: Any) -> Any:
  return getattr(x, "dtype", None) or np.asarray(x).dtype


class TestCase(parameterized.TestCase):
  """parameterized.TestCase with Pax's array assertions and a per-test numpy RandomState."""

  def setUp(self):
    super().setUp()
    # adler32 of the test name: the same seed on every run, unlike hash().
    self._rng = np.random.RandomState(zlib.adler32(self._testMethodName.encode()))

  def rng(self) -> np.random.RandomState:
    return self._rng

  def assertNear(self, f1, f2, err, msg=None):  # pylint: disable=invalid-name
    f1 = float(np.asarray(f1))
    f2 = float(np.asarray(f2))
    self.assertTrue(
      f1 == f2 or math.fabs(f1 - f2) <= err,
      f"{f1} != {f2} +/- {err}" + (f" ({msg})" if msg else ""),
    )

  def assertAllClose(self, x, y, check_dtypes=True, rtol=1e-5, atol=1e-5, **kwargs):  # pylint: disable=invalid-name
    """np.testing.assert_allclose, after checking that the dtypes agree (bfloat16 as float32)."""
    x, y = np.asarray(x), np.asarray(y)
    if check_dtypes:
      self.assertDtypesMatch(x, y)
    x = x.astype(np.float32) if x.dtype == jnp.bfloat16 else x
    y = y.astype(np.float32) if y.dtype == jnp.bfloat16 else y
    np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, **kwargs)

  def assertNotAllClose(self, x, y, check_dtypes=True, rtol=1e-5, atol=1e-5, **kwargs):  # pylint: disable=invalid-name
    try:
      self.assertAllClose(x, y, check_dtypes=check_dtypes, rtol=rtol, atol=atol, **kwargs)
    except AssertionError:
      return
    raise AssertionError(f"The two values are close at all elements: {x} {y}")

  def assertArraysEqual(self, x, y, check_dtypes=True, **kwargs):  # pylint: disable=invalid-name
    x, y = np.asarray(x), np.asarray(y)
    if check_dtypes:
      self.assertDtypesMatch(x, y)
    np.testing.assert_array_equal(x, y, **kwargs)

  def assertDtypesMatch(self, x, y):  # pylint: disable=invalid-name
    self.assertEqual(
      jax.dtypes.canonicalize_dtype(_dtype(x)), jax.dtypes.canonicalize_dtype(_dtype(y))
    )


def to_np(x: Any) -> np.ndarray:
  """A TF or JAX tensor as a float32 numpy array."""
  return np.asarray(x, dtype=np.float32)


def to_tf_nmap(x_nmap: NestedMap) -> NestedMap:
  """The same tree with numpy / JAX leaves as TF constants (float32/64, int32/64, uint32)."""
  import tensorflow.compat.v2 as tf  # pylint: disable=import-outside-toplevel

  def to_tf(x):
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float64, np.int32, np.int64, np.uint32):
      raise TypeError(f"to_tf_nmap: dtype {x.dtype} is not supported.")
    return tf.constant(x, tf.as_dtype(x.dtype))

  return tf.nest.map_structure(to_tf, x_nmap)


def unshard_input_nmap(x_nmap: NestedMap) -> NestedMap:
  """[num_devices, batch, ...] leaves reshaped to [num_devices * batch, ...]."""
  return jax.tree.map(lambda x: jnp.reshape(x, (x.shape[0] * x.shape[1],) + x.shape[2:]), x_nmap)


def apply(layer, layer_vars, method, *args, context_p=None, **kwargs):
  """layer.apply(..., method=method) inside a JaxContext with `context_p`."""
  with base_layer.JaxContext.new_context(hparams=context_p):
    return layer.apply(layer_vars, *args, **kwargs, method=method)


def _lingvo_fflayer(ff: NestedMap) -> NestedMap:
  """lingvo's FeedForwardNet variables (fc[0], fc[1]) from a TransformerFeedForward's."""
  return NestedMap(
    fc=[
      NestedMap(w=ff.ffn_layer1.linear.w, b=ff.ffn_layer1.bias.b),
      NestedMap(w=ff.ffn_layer2.linear.w, b=ff.ffn_layer2.bias.b),
    ],
    dropout=[NestedMap(), NestedMap()],
  )


def replace_jax_transformer_ffwd_vars_to_tf(jax_initial_vars: NestedMap) -> NestedMap:
  """A TransformerFeedForward's variables as lingvo's TransformerFeedForwardLayer names them."""
  return NestedMap(
    fflayer=_lingvo_fflayer(jax_initial_vars),
    layer_norm=NestedMap(
      bias=jax_initial_vars.layer_norm.bias, scale=jax_initial_vars.layer_norm.scale
    ),
    residual_dropout=NestedMap(),
    residual_droppath=NestedMap(),
  )


def replace_jax_attention_vars_to_tf(
  jax_initial_vars: NestedMap, cross_attention: bool | None = False
) -> NestedMap:
  """A Transformer layer's variables as lingvo's batch-major TransformerLayer names them.

  lingvo's cross-attention block reuses `layer_norm` (its init equals `cross_layer_norm`'s).
  """
  v = jax_initial_vars
  out = v.copy()
  out.fflayer = v.ff_layer.copy()
  out.fflayer.residual_dropout = NestedMap()
  out.fflayer.fflayer = _lingvo_fflayer(v.ff_layer)
  out.fflayer.fflayer.dropout = [1.0, 1.0]
  out.self_atten = NestedMap(
    layer_norm=v.layer_norm,
    atten=NestedMap(v.self_attention, atten_dropout=NestedMap()),
    residual_dropout=1.0,
  )
  if cross_attention:
    out.cross_atten = NestedMap(
      layer_norm=v.layer_norm,
      atten=NestedMap(v.cross_attention, atten_dropout=NestedMap()),
      residual_dropout=1.0,
    )
  return out


def replace_jax_single_shard_full_softmax_vars_to_tf(jax_initial_vars: NestedMap) -> NestedMap:
  """A FullSoftmax's variables as lingvo's single-shard softmax names them (linear, bias)."""
  out = jax_initial_vars.copy()
  logits = out.pop("logits_ffn")
  out.linear = NestedMap(w=logits.linear.w)
  out.bias = NestedMap(b=logits.bias.b)
  return out


def replace_jax_simple_full_softmax_vars_to_tf(jax_initial_vars: NestedMap) -> NestedMap:
  """A FullSoftmax's variables as lingvo's SimpleFullSoftmax names them (weight_0, bias_0)."""
  out = jax_initial_vars.copy()
  logits = out.pop("logits_ffn")
  out.weight_0 = logits.linear.w
  out.bias_0 = logits.bias.b
  return out


__all__ = [
  "TestCase",
  "to_np",
  "to_tf_nmap",
  "unshard_input_nmap",
  "apply",
  "py_utils",
  "replace_jax_attention_vars_to_tf",
  "replace_jax_transformer_ffwd_vars_to_tf",
  "replace_jax_single_shard_full_softmax_vars_to_tf",
  "replace_jax_simple_full_softmax_vars_to_tf",
]


def _tfevent_files(root: str) -> dict[str, list[str]]:
  """{leaf directory under root: its events.out.tfevents* files} (directories without subdirs)."""
  found = {}
  for dirname, subdirs, fnames in os.walk(root):
    if subdirs:
      continue
    events = sorted(f for f in fnames if f.startswith("events.out.tfevents"))
    if events:
      found[dirname] = [os.path.join(dirname, f) for f in events]
  return found


def get_tfevent_log_dirs(root: Any) -> list[str]:
  """The directories below `root` (relative to it) whose files include TensorBoard event files."""
  return [os.path.relpath(os.path.normpath(d), root) for d in _tfevent_files(os.fspath(root))]


def get_tfevent_scalars(root: str) -> Mapping[str, float]:
  """{tag: value} of every scalar summary in the event files below `root` (the last value of a
  tag wins): tensors of the 'scalars' plugin, and plain `simple_value`s."""
  from tensorboard.backend.event_processing import event_file_loader  # pylint: disable=import-outside-toplevel
  from tensorboard.util import tensor_util  # pylint: disable=import-outside-toplevel

  scalars = {}
  for files in _tfevent_files(root).values():
    for path in files:
      for event in event_file_loader.LegacyEventFileLoader(path).Load():
        for value in event.summary.value:
          if value.HasField("tensor"):
            if value.metadata.plugin_data.plugin_name == "scalars":
              scalars[value.tag] = tensor_util.make_ndarray(value.tensor).item()
          elif value.HasField("simple_value"):
            scalars[value.tag] = float(value.simple_value)
  return scalars


def replace_jax_light_conv_vars_to_tf(
  jax_initial_vars: NestedMap, jax_initial_non_trainable_vars: NestedMap
) -> NestedMap:
  """A LightConv1D's variables as lingvo's LConvLayer names them (TF constants).

  lingvo keeps the two GLU halves in one `linear_start` [D, 2D] (gate first), the conv kernel
  as [k, 1, D, 1], and the BatchNorm's moving statistics beside its weights in `norm`.
  """
  v, nt = jax_initial_vars, jax_initial_non_trainable_vars
  gated, act = v.linear_start_gated, v.linear_start_act
  out = NestedMap(
    ln=NestedMap(bias=v.ln.bias, scale=v.ln.scale),
    norm=NestedMap(
      beta=v.conv_norm.beta,
      gamma=v.conv_norm.gamma,
      moving_mean=nt.conv_norm.moving_mean,
      moving_variance=nt.conv_norm.moving_variance,
    ),
    dropout=[NestedMap(), NestedMap()],
    depthwise_conv1d=NestedMap(w=np.expand_dims(v.depthwise_conv1d.w, axis=-1)),
    linear_end=NestedMap(w=v.linear_end.linear.w, b=v.linear_end.bias.b),
    linear_start=NestedMap(
      w=np.concatenate([gated.linear.w, act.linear.w], axis=-1),
      b=np.concatenate([gated.bias.b, act.bias.b], axis=-1),
    ),
  )
  return to_tf_nmap(out)


def _lingvo_conformer_ffn(block: NestedMap) -> NestedMap:
  ff = _lingvo_fflayer(block)
  return NestedMap(layer_norm=block.layer_norm, residual_dropout=NestedMap(), fflayer=ff)


def replace_jax_conformer_layer_vars_to_tf(
  jax_initial_vars: NestedMap, jax_initial_non_trainable_vars: NestedMap
) -> NestedMap:
  """A Conformer's variables as lingvo's ConformerLayer names them (TF constants)."""
  v = jax_initial_vars
  out = NestedMap(
    lconv=replace_jax_light_conv_vars_to_tf(v.lconv, jax_initial_non_trainable_vars.lconv),
    final_ln=NestedMap(bias=v.final_ln.bias, scale=v.final_ln.scale),
    fflayer_start=_lingvo_conformer_ffn(v.fflayer_start),
    fflayer_end=_lingvo_conformer_ffn(v.fflayer_end),
    trans_atten=NestedMap(
      layer_norm=v.trans_atten.norm,
      residual_dropout=NestedMap(),
      atten=NestedMap(v.trans_atten.self_atten, atten_dropout=NestedMap()),
    ),
  )
  return to_tf_nmap(out)
