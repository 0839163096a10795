"""Transformer layers: TransformerFeedForward, Transformer, StackedTransformer(Repeated).

    stack = StackedTransformer.HParams(num_layers=2, model_dims=64, hidden_dims=256, num_heads=4,
                                       dim_per_head=16).Instantiate()
    variables = stack.init(key, x, paddings)                   # x [B, T, D], paddings [B, T]
    y = stack.apply(variables, x, paddings)                    # [B, T, D], causal by default

    # Decoding: a prefill stores every layer's keys/values (cache length T), then one step at a
    # time writes position t and attends to positions <= t.
    _, cache = stack.apply(variables, x, paddings, mutable=["decoder_cache"])
    y_t, cache = stack.apply({**variables, **cache}, x_t, time_step=t,
                             method=stack.extend_step, mutable=["decoder_cache"])

Dropout (attention probabilities, FFN hidden activations, residual branches) runs only when
called with `deterministic=False`, which needs a "dropout" rng; the default is deterministic.

Norm policies (as Pax's `norm_policy`): "pre" normalises each sub-layer's input
(x + f(ln(x))), "post" its residual sum (ln(x + f(x))), "primer_hybrid" both the input and the
sub-layer output before the residual (x + ln2(f(ln(x)))).

Remat names (see checkpoint_policy): the FFN hidden activation is "ffn1", its output "ffn2",
a layer's output "transformer_layer_out"; attentions adds its projections' names.

Einsum letters: B batch, T positions (S for keys in the cache), D model dims, F FFN hidden dims.
"""

from __future__ import annotations

import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis.layers import activations
from praxis.layers import attentions
from praxis.layers import checkpoint_policy
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers import pipeline
from praxis.layers import repeats
from praxis.layers import stochastics

Config = base_hyperparams.Config
template_field = base_hyperparams.template_field

_NORM_POLICIES = ("pre", "post", "primer_hybrid")


def _check_norm_policy(layer: str, policy: str) -> None:
  if policy not in _NORM_POLICIES:
    raise ValueError(f"{layer}: norm_policy {policy!r} is not one of {_NORM_POLICIES}.")


class TransformerFeedForward(base_layer.BaseLayer):
  """The Transformer's position-wise MLP with its norm and residual connection.

  y = x + dropout(W2 · dropout(act(W1 · ln(x))))  for norm_policy "pre"; with
  `use_gated_activation`, act(W1 · ln(x)) becomes act(W1 · ln(x)) * (W1g · ln(x)) (GLU variants
  such as SwiGLU / GeGLU). Hidden activations at padded positions are set to zero.

  Children: `layer_norm` (and `post_layer_norm` for primer_hybrid), `ffn_layer1`
  (w[D, F], b[F]), `ffn_layer1_gate` when gated, `ffn_layer2` (w[F, D], b[D]).

  Attributes:
    input_dims: model dims D.
    hidden_dims: hidden dims F.
    output_dims: output dims; 0 means input_dims (needed for the residual).
    has_bias: the projections have biases.
    activation_tpl: activation of the hidden layer (ReLU by default, as in Pax).
    use_gated_activation: multiply the activation by a second, linear projection.
    norm_policy: "pre", "post" or "primer_hybrid" (see the module docstring).
    ln_tpl: template of the norm (LayerNorm; RmsNorm also fits).
    residual_dropout_prob: dropout on the output before the residual add.
    relu_dropout_prob: dropout on the hidden activations.
    add_skip_connection: add the input to the output.
    residual_weight: the output is x + residual_weight * f(x).
    dropout_tpl: template of the dropouts (keep_prob set from the probabilities above).
  """

  input_dims: int = 0
  hidden_dims: int = 0
  output_dims: int = 0
  has_bias: bool = True
  activation_tpl: Config = template_field(activations.ReLU)
  use_gated_activation: bool = False
  norm_policy: str = "pre"
  ln_tpl: Config = template_field(normalizations.LayerNorm)
  residual_dropout_prob: float = 0.0
  relu_dropout_prob: float = 0.0
  add_skip_connection: bool = True
  residual_weight: float = 1.0
  dropout_tpl: Config = template_field(stochastics.Dropout)

  @property
  def out_dims(self) -> int:
    return self.output_dims or self.input_dims

  def setup(self):
    _check_norm_policy("TransformerFeedForward", self.norm_policy)
    if self.add_skip_connection and self.out_dims != self.input_dims:
      raise ValueError(
        f"TransformerFeedForward: a skip connection needs output_dims == "
        f"input_dims, got {self.out_dims} and {self.input_dims}."
      )
    # Pre-norm normalises the input, post-norm the residual sum: both have D features.
    self.layer_norm = self.create_child(self.ln_tpl, dim=self.input_dims)
    if self.norm_policy == "primer_hybrid":
      self.post_layer_norm = self.create_child(self.ln_tpl, dim=self.out_dims)
    identity = activations.Identity.HParams()
    self.ffn_layer1 = self.create_child(
      linears.FeedForward.HParams(activation_tpl=self.activation_tpl),
      input_dims=self.input_dims,
      output_dims=self.hidden_dims,
      has_bias=self.has_bias,
      weight_axes=("embed", "mlp"),
    )
    if self.use_gated_activation:
      self.ffn_layer1_gate = self.create_child(
        linears.FeedForward.HParams(activation_tpl=identity),
        input_dims=self.input_dims,
        output_dims=self.hidden_dims,
        has_bias=self.has_bias,
        weight_axes=("embed", "mlp"),
      )
    self.ffn_layer2 = self.create_child(
      linears.FeedForward.HParams(activation_tpl=identity),
      input_dims=self.hidden_dims,
      output_dims=self.out_dims,
      has_bias=self.has_bias,
      weight_axes=("mlp", "embed"),
    )
    self.relu_dropout = self.create_child(self.dropout_tpl, keep_prob=1.0 - self.relu_dropout_prob)
    self.residual_dropout = self.create_child(
      self.dropout_tpl, keep_prob=1.0 - self.residual_dropout_prob
    )

  def __call__(
    self, inputs: jax.Array, paddings: jax.Array | None = None, deterministic: bool = True
  ) -> jax.Array:
    """inputs [B, T, D] (or [B, D] in a decoding step), paddings [B, T] (1 = padded)."""
    x = self.layer_norm(inputs) if self.norm_policy in ("pre", "primer_hybrid") else inputs
    hidden = self.ffn_layer1(x)  # [B, T, F]
    if self.use_gated_activation:
      hidden = hidden * self.ffn_layer1_gate(x)  # [B, T, F]
    if paddings is not None:
      hidden = hidden * (1.0 - paddings[..., None]).astype(hidden.dtype)
    hidden = checkpoint_name(hidden, "ffn1")
    hidden = self.maybe_shard(hidden, ("batch", "length", "mlp")[-hidden.ndim :])
    hidden = self.relu_dropout(hidden, deterministic=deterministic)
    out = checkpoint_name(self.ffn_layer2(hidden), "ffn2")  # [B, T, D]
    if self.norm_policy == "primer_hybrid":
      out = self.post_layer_norm(out)
    out = self.residual_dropout(out, deterministic=deterministic)
    if self.add_skip_connection:
      out = inputs.astype(out.dtype) + self.residual_weight * out
    if self.norm_policy == "post":
      out = self.layer_norm(out)
    return out


class Transformer(base_layer.BaseLayer):
  """One Transformer layer: self-attention then TransformerFeedForward, each with a residual.

  Children: `layer_norm` (and `post_layer_norm` for primer_hybrid), `self_attention`
  (DotProductAttention), `ff_layer` (TransformerFeedForward, same norm_policy).

  Attributes:
    input_dims: model dims D.
    hidden_dims: FFN hidden dims F.
    num_heads: attention heads N.
    dim_per_head: dims per head H; default input_dims // num_heads.
    num_kv_heads: key/value heads (None = num_heads; 1 = multi-query; else grouped-query).
    atten_dropout_prob: dropout on the attention probabilities.
    residual_dropout_prob: dropout on each sub-layer's output before the residual add.
    relu_dropout_prob: dropout on the FFN hidden activations.
    norm_policy: "pre", "post" or "primer_hybrid".
    ln_tpl: template of the norms.
    tr_atten_tpl: template of the self-attention (its sizes are set here; the rest, e.g.
      use_rotary_position_emb or atten_logit_cap, is kept).
    tr_fflayer_tpl: template of the feed-forward layer (activation, gating, ... kept).
    dropout_tpl: template of the residual dropout.
  """

  input_dims: int = 0
  hidden_dims: int = 0
  num_heads: int = 1
  dim_per_head: int | None = None
  num_kv_heads: int | None = None
  atten_dropout_prob: float = 0.0
  residual_dropout_prob: float = 0.0
  relu_dropout_prob: float = 0.0
  norm_policy: str = "pre"
  ln_tpl: Config = template_field(normalizations.LayerNorm)
  tr_atten_tpl: Config = template_field(attentions.DotProductAttention)
  tr_fflayer_tpl: Config = template_field(TransformerFeedForward)
  dropout_tpl: Config = template_field(stochastics.Dropout)

  def setup(self):
    _check_norm_policy("Transformer", self.norm_policy)
    dim_per_head = self.dim_per_head or self.input_dims // self.num_heads
    self.layer_norm = self.create_child(self.ln_tpl, dim=self.input_dims)
    if self.norm_policy == "primer_hybrid":
      self.post_layer_norm = self.create_child(self.ln_tpl, dim=self.input_dims)
    self.self_attention = self.create_child(
      self.tr_atten_tpl,
      input_dim=self.input_dims,
      hidden_dim=self.num_heads * dim_per_head,
      num_heads=self.num_heads,
      dim_per_head=dim_per_head,
      num_kv_heads=self.num_kv_heads,
      atten_dropout_prob=self.atten_dropout_prob,
    )
    self.residual_dropout = self.create_child(
      self.dropout_tpl, keep_prob=1.0 - self.residual_dropout_prob
    )
    self.ff_layer = self.create_child(
      self.tr_fflayer_tpl,
      input_dims=self.input_dims,
      hidden_dims=self.hidden_dims,
      output_dims=self.input_dims,
      norm_policy=self.norm_policy,
      ln_tpl=self.ln_tpl,
      residual_dropout_prob=self.residual_dropout_prob,
      relu_dropout_prob=self.relu_dropout_prob,
    )

  def _attention_residual(self, inputs, attend):
    """inputs + attention sub-layer under the norm policy; `attend(x)` runs the attention."""
    x = self.layer_norm(inputs) if self.norm_policy in ("pre", "primer_hybrid") else inputs
    out, probs = attend(x)
    if self.norm_policy == "primer_hybrid":
      out = self.post_layer_norm(out)
    return out, probs

  def __call__(
    self,
    inputs: jax.Array,
    paddings: jax.Array,
    attention_mask: jax.Array,
    segment_pos: jax.Array | None = None,
    deterministic: bool = True,
  ) -> tuple[jax.Array, jax.Array]:
    """inputs [B, T, D], paddings [B, T], attention_mask [B|1, 1|N, T, T] additive.

    Returns (outputs [B, T, D], attention probabilities [B, N, T, T]).
    """
    out, probs = self._attention_residual(
      inputs,
      lambda x: self.self_attention(
        x,
        x,
        x,
        attention_mask,
        query_segment_pos=segment_pos,
        key_segment_pos=segment_pos,
        deterministic=deterministic,
      ),
    )
    out = inputs + self.residual_dropout(out, deterministic=deterministic)  # [B, T, D]
    if self.norm_policy == "post":
      out = self.layer_norm(out)
    out = self.ff_layer(out, paddings, deterministic=deterministic)
    return checkpoint_name(out, "transformer_layer_out"), probs

  def extend_step(
    self,
    inputs: jax.Array,
    *,
    time_step: jax.Array,
    attention_mask: jax.Array,
    segment_pos: jax.Array | None = None,
  ) -> jax.Array:
    """One decoding step: inputs [B, D] at time_step, attention_mask [B|1, 1|N, S] -> [B, D]."""
    out, _ = self._attention_residual(
      inputs,
      lambda x: (
        self.self_attention.extend_step(
          x, atten_mask=attention_mask, time_step=time_step, segment_pos=segment_pos
        ),
        None,
      ),
    )
    out = inputs + out
    if self.norm_policy == "post":
      out = self.layer_norm(out)
    return self.ff_layer(out)


class StackedTransformer(base_layer.BaseLayer):
  """`num_layers` Transformer layers (children `x_layers_0`, `x_layers_1`, ...) and their masks.

  The attention mask is built here from `paddings` (padded keys are hidden), `segment_ids`
  (packed inputs: a token sees only its own segment) and `mask_self_attention` (causal).
  `segment_pos` gives the positions for rotary attention (restarting in each segment).

  Decoding: applied with mutable=["decoder_cache"], the call also caches `paddings` (so
  extend_step keeps hiding padded prefix positions) and every layer caches its keys/values.

  Attributes:
    num_layers: number of layers.
    model_dims: D.
    hidden_dims: FFN hidden dims F.
    num_heads: attention heads N.
    dim_per_head: dims per head H; default model_dims // num_heads.
    num_kv_heads: key/value heads (None = num_heads; 1 = multi-query; else grouped-query).
    dropout_prob: default of the three dropout probabilities below.
    atten_dropout_prob: dropout on attention probabilities; None = dropout_prob.
    residual_dropout_prob: dropout before each residual add; None = dropout_prob.
    relu_dropout_prob: dropout on FFN hidden activations; None = dropout_prob.
    input_dropout_prob: dropout on the stack's input.
    mask_self_attention: causal attention (a decoder); False for an encoder.
    packed_input: rows hold several segments; the call then needs segment_ids.
    transformer_layer_params_tpl: template of each layer (norm policy, attention options, ...);
      its sizes and dropout probabilities are set from the fields above.
    dropout_tpl: template of the input dropout.
  """

  num_layers: int = 0
  model_dims: int = 0
  hidden_dims: int = 0
  num_heads: int = 0
  dim_per_head: int | None = None
  num_kv_heads: int | None = None
  dropout_prob: float = 0.0
  atten_dropout_prob: float | None = None
  residual_dropout_prob: float | None = None
  relu_dropout_prob: float | None = None
  input_dropout_prob: float = 0.0
  mask_self_attention: bool = True
  packed_input: bool = False
  transformer_layer_params_tpl: Config = template_field(Transformer)
  dropout_tpl: Config = template_field(stochastics.Dropout)

  def setup(self):
    if self.num_layers <= 0 or self.model_dims <= 0 or self.num_heads <= 0:
      raise ValueError(
        f"StackedTransformer needs positive num_layers, model_dims and num_heads, "
        f"got {self.num_layers}, {self.model_dims}, {self.num_heads}."
      )

    def prob(value):
      return self.dropout_prob if value is None else value

    self.x_layers = [
      self.create_child(
        self.transformer_layer_params_tpl,
        input_dims=self.model_dims,
        hidden_dims=self.hidden_dims,
        num_heads=self.num_heads,
        dim_per_head=self.dim_per_head,
        num_kv_heads=self.num_kv_heads,
        atten_dropout_prob=prob(self.atten_dropout_prob),
        residual_dropout_prob=prob(self.residual_dropout_prob),
        relu_dropout_prob=prob(self.relu_dropout_prob),
      )
      for _ in range(self.num_layers)
    ]
    self.input_dropout = self.create_child(
      self.dropout_tpl, keep_prob=1.0 - self.input_dropout_prob
    )

  def attention_mask(self, paddings: jax.Array, segment_ids: jax.Array | None = None) -> jax.Array:
    """[B, 1, T, T] additive mask from paddings [B, T] and segment_ids [B, T]."""
    mask = attentions.convert_paddings_to_mask(paddings, jnp.float32)  # [B, 1, 1, T]
    if segment_ids is not None:
      seg_mask = (
        attentions.causal_segment_mask(segment_ids, jnp.float32)
        if self.mask_self_attention
        else attentions.segment_mask(segment_ids)
      )
      mask = attentions.merge_masks(mask, seg_mask)
    elif self.mask_self_attention:
      mask = attentions.merge_masks(mask, attentions.causal_mask(paddings, jnp.float32))
    return mask

  def __call__(
    self,
    inputs: jax.Array,
    paddings: jax.Array,
    segment_ids: jax.Array | None = None,
    segment_pos: jax.Array | None = None,
    deterministic: bool = True,
  ) -> jax.Array:
    """inputs [B, T, D], paddings [B, T] (1 = padded) -> [B, T, D].

    Args:
      inputs: [B, T, D].
      paddings: [B, T], 1.0 at padded positions.
      segment_ids: [B, T] segment of each token; required when packed_input.
      segment_pos: [B, T] position in its segment (rotary attention); default 0..T-1.
      deterministic: False enables dropout (needs a "dropout" rng).
    """
    if self.packed_input and segment_ids is None:
      raise ValueError(
        "StackedTransformer(packed_input=True) needs segment_ids [B, T]; pass "
        "them or set packed_input=False."
      )
    if (
      self.is_mutable_collection(attentions.DECODER_CACHE) and not self.is_initializing()
    ):  # init creates weights, not a cache
      self.put_variable(attentions.DECODER_CACHE, "paddings", paddings.astype(jnp.float32))
    mask = self.attention_mask(paddings, segment_ids)
    x = self.input_dropout(inputs, deterministic=deterministic)
    x = self.maybe_shard(x, ("batch", "length", "embed"))
    for layer in self.x_layers:
      x, _ = layer(x, paddings, mask, segment_pos=segment_pos, deterministic=deterministic)
    return x

  def extend_step(
    self, step_inputs: jax.Array, *, time_step: jax.Array, segment_pos: jax.Array | None = None
  ) -> jax.Array:
    """One decoding step (apply with mutable=["decoder_cache"] after a prefill).

    Args:
      step_inputs: [B, D], the input at position time_step.
      time_step: int scalar; this step attends to the cached positions <= time_step (except
        those the prefill marked as padding) and writes its keys/values at time_step.
      segment_pos: [B] rotary position of this step; default time_step.

    Returns:
      [B, D], what __call__ gives at position time_step.
    """
    if not self.mask_self_attention:
      raise ValueError(
        "StackedTransformer.extend_step needs causal attention "
        "(mask_self_attention=True): a bidirectional stack cannot decode."
      )
    if not self.has_variable(attentions.DECODER_CACHE, "paddings"):
      raise ValueError(
        "StackedTransformer.extend_step found no decoder_cache: first apply the "
        "stack to the [B, S, D] prefix (S = cache length) with "
        "mutable=['decoder_cache']."
      )
    paddings = self.get_variable(attentions.DECODER_CACHE, "paddings")  # [B, S]
    # This step's position is real input from now on.
    paddings = jax.lax.dynamic_update_slice_in_dim(
      paddings, jnp.zeros((paddings.shape[0], 1), paddings.dtype), time_step, axis=1
    )
    self.put_variable(attentions.DECODER_CACHE, "paddings", paddings)
    mask = attentions.merge_masks(
      attentions.extend_step_causal_mask(time_step, paddings.shape[1], jnp.float32),
      attentions.convert_paddings_to_mask(paddings, jnp.float32)[:, :, 0, :],
    )  # [B, 1, S]
    x = step_inputs
    for layer in self.x_layers:
      x = layer.extend_step(x, time_step=time_step, attention_mask=mask, segment_pos=segment_pos)
    return x


class StackedTransformerRepeated(base_layer.BaseLayer):
  """`block` (a StackedTransformer) repeated `x_times` with nn.scan, each iteration rematted.

  Weights have a leading [x_times] dim with the logical axis name "layers"
  (`repeat.sub.x_layers_0.self_attention.query.w` is [x_times, D, N, H]). The same model as a
  StackedTransformer of x_times * block.num_layers layers, compiled once per block instead of
  once per layer; `checkpoint_policy` chooses which activations the backward pass keeps.

  Attributes:
    block: template of the repeated StackedTransformer.
    x_times: number of repetitions.
    checkpoint_policy: what each iteration saves for the backward pass.
  """

  block: Config = template_field(StackedTransformer)
  x_times: int = 0
  checkpoint_policy: checkpoint_policy.AutodiffCheckpointType = (
    checkpoint_policy.AutodiffCheckpointType.SAVE_NOTHING
  )

  def setup(self):
    self.repeat = self.create_child(
      repeats.Repeat.HParams(
        sub_tpl=self.block, x_times=self.x_times, checkpoint_policy=self.checkpoint_policy
      )
    )

  def __call__(
    self,
    inputs: jax.Array,
    paddings: jax.Array,
    segment_ids: jax.Array | None = None,
    segment_pos: jax.Array | None = None,
    deterministic: bool = True,
  ) -> jax.Array:
    """As StackedTransformer.__call__."""
    return self.repeat(inputs, paddings, segment_ids, segment_pos, deterministic=deterministic)

  def extend_step(
    self, step_inputs: jax.Array, *, time_step: jax.Array, segment_pos: jax.Array | None = None
  ) -> jax.Array:
    """As StackedTransformer.extend_step."""
    return self.repeat.extend_step(step_inputs, time_step=time_step, segment_pos=segment_pos)


# Pax keeps it in this module; it lives in pipeline.py with the pipeline layers.
PipelinedTransformer = pipeline.PipelinedTransformer
