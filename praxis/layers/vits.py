"""Pax's `praxis.layers.vits`: the Vision Transformer (ViT, arXiv:2010.11929).

    vit = base_layer.instantiate(vits.build_vision_transformer_hparams_for_test(
        pos_emb_shapes=(4, 4), patch_size=4, image_channels=3, model_dims=32, mlp_dims=64,
        num_xformer_layers=2, num_heads=4))
    features = vit.apply(variables, images)           # [B, 16, 16, 3] -> [B, 32]

VisionTransformer = `entry_stack` (VitEntryLayers: patchify, `patch_projection`, `pos_emb`,
dropout, CLS tokens) -> `transformers_stack` (a StackedTransformer over the tokens, no mask)
-> `exit_stack` (VitExitLayers: `ln`, `pooling`, `fc_tanh` or `output_projection`, dropout).
Each of the three is a template the user may swap or set to None (entry and exit).

Letters: B batch, H / W image height / width, P patch size, C image channels, N tokens,
D hidden dims.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_hyperparams
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import embedding_softmax
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers import poolings
from praxis.layers import stochastics
from praxis.layers import transformers
from praxis import py_utils
from praxis import pytypes

LayerTpl = base_hyperparams.Config
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
template_field = base_layer.template_field


def _patch_grid(height: int, width: int, patch_size: int) -> tuple[int, int]:
  if height % patch_size or width % patch_size:
    raise ValueError(
      f"Image height ({height}) and width ({width}) should be multiples of patch_size "
      f"({patch_size}); resize or crop the image, or pick a patch size that divides both."
    )
  return height // patch_size, width // patch_size


def image_to_patch(img: jax.Array, patch_size: int) -> jax.Array:
  """[..., H, W, C] -> [..., (H / P) * (W / P), P * P * C], patches in row-major order."""
  if img.ndim < 4:
    raise ValueError(f"Image should be formatted as 4D [B, H, W, C], got shape {img.shape}.")
  *lead, height, width, channels = img.shape
  rows, cols = _patch_grid(height, width, patch_size)
  x = img.reshape(*lead, rows, patch_size, cols, patch_size, channels)  # [..., m, p, n, q, C]
  k = len(lead)
  x = jnp.moveaxis(x, k + 2, k + 1)  # [..., m, n, p, q, C]
  return x.reshape(*lead, rows * cols, patch_size * patch_size * channels)


def patch_to_image(patches: jax.Array, img_shape: Sequence[int], patch_size: int) -> jax.Array:
  """The inverse of image_to_patch: [..., N, P * P * C] -> an image of `img_shape` [B, H, W, C]."""
  if len(img_shape) != 4:
    raise ValueError(f"Image shape is expected to be [B, H, W, C], got {img_shape}.")
  height, width, channels = img_shape[1:]
  rows, cols = _patch_grid(height, width, patch_size)
  lead = patches.shape[:-2]
  x = patches.reshape(*lead, rows, cols, patch_size, patch_size, channels)  # [..., m, n, p, q, C]
  k = len(lead)
  x = jnp.moveaxis(x, k + 1, k + 2)  # [..., m, p, n, q, C]
  return x.reshape(*lead, height, width, channels)


def interpolate_embedding_2d(
  emb: jax.Array, source_emb_shape: Sequence[int], target_emb_shape: Sequence[int]
) -> jax.Array:
  """Bilinearly resizes a flattened 2-D position table: [1, H1 * W1, D] -> [1, H2 * W2, D]."""
  if emb.ndim > 3 or emb.shape[0] != 1:
    raise ValueError(f"The shape of the embedding should be (1, H * W, D), got {emb.shape}.")
  h1, w1 = source_emb_shape
  h2, w2 = target_emb_shape
  if emb.shape[1] != h1 * w1:
    raise ValueError(
      f"The embedding has {emb.shape[1]} positions but source_emb_shape {tuple(source_emb_shape)} "
      f"has {h1 * w1}; they must agree."
    )
  dims = emb.shape[2]
  grid = emb.reshape(h1, w1, dims)  # [H1, W1, D]
  resized = jax.image.resize(grid, (h2, w2, dims), method="bilinear")  # [H2, W2, D]
  return resized.reshape(1, h2 * w2, dims)


class VitEntryLayers(base_layer.BaseLayer):
  """Patchify, project, add position embeddings, dropout, then add CLS tokens.

  Attributes:
    pos_emb_shapes: (rows, cols) grid of the position table; an image with another patch grid
      gets the table bilinearly resized to its grid.
    patch_size: side P of a square patch.
    input_dims: dims of a patch before projection (P * P * C for images).
    output_dims: dims D of a token.
    pos_emb_dropout_prob: dropout after the position embedding.
    prepend_cls_tokens: number of learned CLS tokens put before the patches.
    append_cls_tokens: number of learned CLS tokens put after the patches.
    cls_emb_init: initialiser of the CLS tokens.
    pos_emb_tpl: the position embedding (None: none).
    input_fc_has_bias: whether the patch projection has a bias.
  """

  pos_emb_shapes: tuple[int, int] = (0, 0)
  patch_size: int = 0
  input_dims: int = 0
  output_dims: int = 0
  pos_emb_dropout_prob: float = 0.0
  prepend_cls_tokens: int = 0
  append_cls_tokens: int = 0
  cls_emb_init: WeightInit = dataclasses.field(default_factory=lambda: WeightInit.Constant(0.0))
  pos_emb_tpl: LayerTpl | None = template_field(embedding_softmax.TrainablePositionalEmbedding)
  input_fc_has_bias: bool = True

  def setup(self) -> None:
    self.create_child(
      "patch_projection",
      pax_fiddle.Config(
        linears.FeedForward,
        input_dims=self.input_dims,
        output_dims=self.output_dims,
        has_bias=self.input_fc_has_bias,
        activation_tpl=pax_fiddle.Config(activations.Identity),
      ),
    )
    if self.pos_emb_tpl:
      self.create_child("pos_emb", self.pos_emb_tpl.clone())
    if self.pos_emb_dropout_prob > 0.0:
      self.create_child(
        "dropout",
        pax_fiddle.Config(stochastics.Dropout, keep_prob=1.0 - self.pos_emb_dropout_prob),
      )
    for where, count in (("prepend", self.prepend_cls_tokens), ("append", self.append_cls_tokens)):
      if count > 0:
        self.create_variable(
          f"{where}_cls_embs",
          WeightHParams(shape=[1, count, self.output_dims], init=self.cls_emb_init),
        )

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """inputs: images [B, H, W, C] or tokens [B, N, input_dims] -> [B, N', D] with the CLS tokens."""
    if inputs.ndim == 4:
      grid = _patch_grid(inputs.shape[1], inputs.shape[2], self.patch_size)
      patches = image_to_patch(inputs, self.patch_size)  # [B, N, P * P * C]
    elif inputs.ndim == 3:
      grid = None
      patches = inputs
    else:
      raise ValueError(
        f"VitEntryLayers takes images [B, H, W, C] or tokens [B, N, D], got shape {inputs.shape}."
      )
    features = self.patch_projection(patches)  # [B, N, D]

    if self.pos_emb_tpl:
      pos_emb = self.pos_emb(seq_length=int(np.prod(self.pos_emb_shapes)))  # [1, N_pos, D]
      # Only an image with a 2-D table gets the table resized to its own patch grid.
      if grid is not None and len(self.pos_emb_shapes) == 2:
        if tuple(self.pos_emb_shapes) != grid:
          pos_emb = interpolate_embedding_2d(pos_emb, self.pos_emb_shapes, grid)
      features = features + pos_emb

    if self.pos_emb_dropout_prob > 0.0:
      features = self.dropout(features)

    batch = inputs.shape[0]
    if self.prepend_cls_tokens > 0:
      cls = jnp.tile(self.theta.prepend_cls_embs, (batch, 1, 1))  # [B, N_pre, D]
      features = jnp.concatenate([cls, features], axis=1)
    if self.append_cls_tokens > 0:
      cls = jnp.tile(self.theta.append_cls_embs, (batch, 1, 1))  # [B, N_app, D]
      features = jnp.concatenate([features, cls], axis=1)
    return features


class VitExitLayers(base_layer.BaseLayer):
  """Layer norm, pooling over tokens, a projection (tanh or linear), dropout.

  Attributes:
    hidden_dim: dims D of the input tokens.
    output_dim: dims of the output.
    output_dropout_prob: dropout on the output.
    pooled: pool over the tokens with `pooling_tpl` ([B, N, D] -> [B, D]).
    pre_ln: start with a layer norm.
    output_fc_tanh: end with a FeedForward with tanh (`fc_tanh`); otherwise a linear
      `output_projection` when output_dim differs from hidden_dim (and is not 0).
    output_fc_has_bias: whether that projection has a bias.
    pooling_tpl: the pooling (it needs pooling_dims, e.g. [1]).
    ln_tpl: the layer norm.
  """

  hidden_dim: int = 0
  output_dim: int = 0
  output_dropout_prob: float = 0.0
  pooled: bool = True
  pre_ln: bool = True
  output_fc_tanh: bool = True
  output_fc_has_bias: bool = True
  pooling_tpl: LayerTpl = template_field(poolings.GlobalPooling)
  ln_tpl: LayerTpl = template_field(normalizations.LayerNorm)

  def _projects(self) -> bool:
    return self.output_dim != 0 and self.hidden_dim != self.output_dim

  def setup(self) -> None:
    if self.pre_ln:
      self.create_child("ln", self.ln_tpl.clone().set(dim=self.hidden_dim))
    if self.pooled:
      self.create_child("pooling", self.pooling_tpl)
    projection = pax_fiddle.Config(
      linears.FeedForward,
      input_dims=self.hidden_dim,
      output_dims=self.output_dim,
      has_bias=self.output_fc_has_bias,
    )
    if self.output_fc_tanh:
      projection.activation_tpl = pax_fiddle.Config(activations.Tanh)
      self.create_child("fc_tanh", projection)
    elif self._projects():
      projection.activation_tpl = pax_fiddle.Config(activations.Identity)
      self.create_child("output_projection", projection)
    if self.output_dropout_prob > 0.0:
      self.create_child(
        "dropout", pax_fiddle.Config(stochastics.Dropout, keep_prob=1.0 - self.output_dropout_prob)
      )

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """inputs [B, N, D] -> [B, output_dim] when pooled, else [B, N, output_dim]."""
    x = inputs
    if self.pre_ln:
      x = self.ln(x)
    if self.pooled:
      x = self.pooling(x)
    if self.output_fc_tanh:
      x = self.fc_tanh(x)
    elif self._projects():
      x = self.output_projection(x)
    if self.output_dropout_prob > 0.0:
      x = self.dropout(x)
    return x


class VisionTransformer(base_layer.BaseLayer):
  """Entry layers, a transformer stack over the tokens, exit layers; each a swappable template.

  Attributes:
    entry_layers_tpl: images or tokens -> tokens [B, N, D] (None: the input is tokens).
    transformer_layers_tpl: the transformer stack (required).
    exit_layers_tpl: tokens -> features (None: return the tokens).
    full_data_parallel_on_entry_exit: shard the batch of the entry and exit activations over
      every mesh axis (cheap data parallelism for the small entry / exit layers).
  """

  entry_layers_tpl: LayerTpl | None = template_field(VitEntryLayers)
  transformer_layers_tpl: LayerTpl = template_field(transformers.StackedTransformer)
  exit_layers_tpl: LayerTpl | None = template_field(VitExitLayers)
  full_data_parallel_on_entry_exit: bool = False

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """network_inputs: mesh split of the tokens between the entry, the stack and the exit."""

    network_inputs: base_layer.SplitDimsMapping = None

  def setup(self) -> None:
    if self.entry_layers_tpl is not None:
      self.create_child("entry_stack", self.entry_layers_tpl)
    if self.transformer_layers_tpl is None:
      raise ValueError("VisionTransformer: transformer_layers_tpl should not be None.")
    self.create_child("transformers_stack", self.transformer_layers_tpl)
    if self.exit_layers_tpl is not None:
      self.create_child("exit_stack", self.exit_layers_tpl)

  def shard_entry_exit(self, x: jax.Array) -> jax.Array:
    """With full_data_parallel_on_entry_exit and a mesh: the batch split over every mesh axis."""
    if self.mesh_axis_names is None or not self.full_data_parallel_on_entry_exit:
      return x
    mapping = [tuple(self.mesh_axis_names)] + [None] * (x.ndim - 1)
    return base_layer.maybe_shard(x, mapping, self.mesh_axis_names)

  def _shard_network_inputs(self, x: jax.Array) -> jax.Array:
    return base_layer.maybe_shard(
      x, self.activation_split_dims_mapping.network_inputs, self.mesh_axis_names
    )

  def __call__(
    self,
    inputs: jax.Array,
    paddings: jax.Array | None = None,
    segment_pos: jax.Array | None = None,
  ) -> jax.Array:
    """inputs: images [B, H, W, C] or tokens [B, N, D]; paddings, segment_pos [B, N] for tokens.

    Returns [B, D] (pooled exit), or [B, N, D].
    """
    features = inputs
    if self.entry_layers_tpl is not None:
      features = self.shard_entry_exit(features)
      features = self.entry_stack(features)  # [B, N, D]
      features = self.shard_entry_exit(features)
      features = self._shard_network_inputs(features)
    if paddings is None:
      paddings = jnp.zeros(features.shape[:-1], features.dtype)  # [B, N]
    features = self.transformers_stack(features, paddings, segment_pos=segment_pos)  # [B, N, D]
    if self.exit_layers_tpl is not None:
      features = self._shard_network_inputs(features)
      features = self.shard_entry_exit(features)
      features = self.exit_stack(features)
      features = self.shard_entry_exit(features)
    return features


def build_vision_transformer_hparams_for_test(
  pos_emb_shapes: tuple[int, int],
  patch_size: int,
  image_channels: int,
  model_dims: int,
  mlp_dims: int,
  num_xformer_layers: int,
  num_heads: int,
) -> pax_fiddle.Config:
  """A small VisionTransformer config (no dropout, no per-dim scale) for tests."""
  pos_emb_tpl = pax_fiddle.Config(
    embedding_softmax.TrainablePositionalEmbedding,
    max_seq_length=int(np.prod(pos_emb_shapes)),
    embedding_dims=model_dims,
    params_init=WeightInit.Gaussian(scale=0.02),
  )
  entry = pax_fiddle.Config(
    VitEntryLayers,
    name="entry",
    pos_emb_shapes=pos_emb_shapes,
    patch_size=patch_size,
    input_dims=patch_size**2 * image_channels,
    output_dims=model_dims,
    pos_emb_tpl=pos_emb_tpl,
  )
  stack = pax_fiddle.Config(
    transformers.StackedTransformer,
    model_dims=model_dims,
    hidden_dims=mlp_dims,
    num_heads=num_heads,
    mask_self_attention=False,
    use_cross_attention=False,
    packed_input=False,
    num_layers=num_xformer_layers,
  )
  stack.transformer_layer_params_tpl.tr_atten_tpl.internal_enable_per_dim_scale = False
  exit_ = pax_fiddle.Config(
    VitExitLayers, name="exit", hidden_dim=model_dims, output_dim=model_dims
  )
  return pax_fiddle.Config(
    VisionTransformer,
    name="vit",
    entry_layers_tpl=entry,
    transformer_layers_tpl=stack,
    exit_layers_tpl=exit_,
  )


# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap
