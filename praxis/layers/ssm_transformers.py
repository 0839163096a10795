"""Pax's Transformer layers whose self-attention is a state-space model (`ssm.SSM`).

SSMTransformer: a `transformers.Transformer` (same fields, children and call shapes) with the
self-attention replaced by the child `ssm` (an S4D over input_dims channels); the residual,
optional cross-attention and feed-forward (`ff_layer`) are the Transformer's.

SSMGated (Gated State Space, arXiv:2212.10544): no `ff_layer`; with x = norm(inputs):
  v = GELU(gss_ffn_v(x)) [.., 3D];  u = GELU(gss_ffn_u(x)) [.., ssm_dim]
  h = inputs + gss_ffn_uc(ssm(u))  (+ cross-attention)
  out = gss_ffn_o(GELU(gss_ffn_uco(h)) * v)
`extend_step` decodes one position ([B, D]) through the SSM's recurrent state, or several
([B, L, D]) through its parallel form.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis.layers import activations as activations_lib
from praxis.layers import checkpoint_policy
from praxis.layers import linears
from praxis.layers import ssm
from praxis.layers import stats
from praxis.layers import stochastics
from praxis.layers import transformers
from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

template_field = base_hyperparams.template_field
AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType
JTensor = jax.Array


class SSMTransformer(transformers.Transformer):
  """A Transformer layer with an SSM in place of self-attention.

  Attributes:
    ssm_tpl: the SSM (child `ssm`).
    ssm_nheads: SSM state size per channel.
    ssm_dim: SSM channels (must equal input_dims here).
    ssm_l_max: longest sequence.
    ssm_hippo_type: the SSM's A matrix (see ssm.SSM).
    ssm_step_size: the SSM's discretisation step.
    decode_num_samples: decoding samples per example.
  """

  ssm_tpl: base_hyperparams.Config = template_field(ssm.SSM)
  ssm_nheads: int = 0
  ssm_dim: int = 0
  ssm_l_max: int = 0
  ssm_hippo_type: str = "ss4d-1d-legs"
  ssm_step_size: float = 0.1
  decode_num_samples: int = 4

  def _norm(self, name: str):
    self.create_child(name, self.ln_tpl.clone().set(dim=self.input_dims))

  def _setup_norms_dropouts_cross_attention(self):
    """The children SSMTransformer and SSMGated share with a Transformer (all but the mixer)."""
    if self.norm_policy == "primer_hybrid":
      self._norm("pre_layer_norm")
      self._norm("post_layer_norm")
    elif self.norm_policy in ("pre", "post"):
      self._norm("layer_norm")
    else:
      raise ValueError(
        f"norm_policy must be 'pre', 'post' or 'primer_hybrid', got {self.norm_policy!r}."
      )
    self.create_child(
      "residual_dropout", self.dropout_tpl.clone().set(keep_prob=1.0 - self.residual_dropout_prob)
    )
    if self.use_cross_attention:
      if self.norm_policy == "primer_hybrid":
        self._norm("pre_cross_layer_norm")
        self._norm("post_cross_layer_norm")
      else:
        self._norm("cross_layer_norm")
      tpl = self.cross_atten_tpl if self.cross_atten_tpl is not None else self.tr_atten_tpl
      params = tpl.clone().set(
        input_dim=self.input_dims,
        hidden_dim=self.input_dims,
        num_heads=self.num_heads,
        dim_per_head=self.dim_per_head,
        atten_dropout_prob=self.atten_dropout_prob,
      )
      if params.use_rotary_position_emb:
        raise ValueError("Cross-attention cannot use rotary position embeddings.")
      if params.dconv_qkv:
        raise ValueError("Cross-attention cannot use a depth-wise convolution (dconv_qkv).")
      self.create_child("cross_attention", params)
    if self.residual_droppath_prob > 0:
      self.create_child(
        "residual_droppath",
        pax_fiddle.Config(
          stochastics.StochasticResidual, survival_prob=1.0 - self.residual_droppath_prob
        ),
      )

  def _create_ssm(self):
    self.create_child(
      "ssm",
      self.ssm_tpl.clone().set(
        nheads=self.ssm_nheads,
        dim=self.ssm_dim,
        l_max=self.ssm_l_max,
        decode_num_samples=self.decode_num_samples,
        hippo_type=self.ssm_hippo_type,
        step_size=self.ssm_step_size,
      ),
    )

  def setup(self):
    self._setup_norms_dropouts_cross_attention()
    if self.tr_fflayer_tpl:
      self.create_child(
        "ff_layer",
        self.tr_fflayer_tpl.clone().set(
          input_dims=self.input_dims,
          hidden_dims=self.hidden_dims,
          relu_dropout_prob=self.relu_dropout_prob,
          residual_dropout_prob=self.residual_dropout_prob,
          residual_droppath_prob=self.residual_droppath_prob,
          norm_policy=self.norm_policy,
        ),
      )
    if self.ssm_dim != self.input_dims:
      raise ValueError(f"SSMTransformer needs ssm_dim == input_dims, got {self.ssm_dim}.")
    self._create_ssm()

  def decoding_sequence_length(self) -> int:
    return self.ssm_l_max

  # ---- the pieces around the mixer ----

  def _pre_norm(self, inputs: JTensor) -> JTensor:
    if self.norm_policy == "primer_hybrid":
      return self.pre_layer_norm(inputs)
    if self.norm_policy == "pre":
      return self.layer_norm(inputs)
    return inputs

  def _post_norm_and_residual(self, mixed: JTensor, inputs: JTensor, droppath: bool) -> JTensor:
    if self.norm_policy == "primer_hybrid":
      mixed = self.post_layer_norm(mixed)
    elif self.norm_policy == "post":
      mixed = self.layer_norm(mixed)
    mixed = self.residual_dropout(mixed)
    if droppath and self.residual_droppath_prob > 0.0:
      return self.residual_droppath(inputs, mixed)
    return mixed + inputs

  def _cross_attend(self, x: JTensor, attend, droppath: bool) -> JTensor:
    """x + cross-attention of norm(x) (the norms per norm_policy); attend(q) runs the layer."""
    if self.norm_policy == "pre":
      query = self.cross_layer_norm(x)
    elif self.norm_policy == "primer_hybrid":
      query = self.pre_cross_layer_norm(x)
    else:
      query = x
    out = attend(query)
    if self.norm_policy == "post":
      out = self.cross_layer_norm(out)
    elif self.norm_policy == "primer_hybrid":
      out = self.post_cross_layer_norm(out)
    out = self.residual_dropout(out)
    if droppath and self.residual_droppath_prob > 0.0:
      return self.residual_droppath(x, out)
    return x + out

  def _add_input_summaries(self, inputs: JTensor, paddings: JTensor) -> None:
    input_stats = stats.compute_stats(inputs, jnp.expand_dims(paddings, -1))
    self.add_summary("xformer_input_mean", input_stats.mean_v, verbosity=3)
    self.add_summary("xformer_input_std", input_stats.std_v, verbosity=3)
    self.add_summary("xformer_input_abs_max", input_stats.max_v, verbosity=3)

  # ---- the mixer and the output, overridden by SSMGated ----

  def _mix(self, normalized: JTensor, decode: bool) -> tuple[JTensor, JTensor | None]:
    """(mixer output, gate or None); decode: one step through the SSM's state if 2-D."""
    if decode and normalized.ndim == 2:
      return self.ssm.extend_step(normalized), None
    return self.ssm(normalized), None

  def _output(self, x: JTensor, gate: JTensor | None, paddings: JTensor | None) -> JTensor:
    del gate
    if paddings is None:
      return self.ff_layer(x)
    return self.ff_layer(x, paddings=paddings)

  def __call__(
    self,
    inputs: JTensor,
    paddings: JTensor,
    attention_mask: JTensor,
    cross_inputs: JTensor | None = None,
    cross_attention_mask: JTensor | None = None,
    segment_pos: JTensor | None = None,
    segment_ids: JTensor | None = None,
  ) -> tuple[JTensor, None]:
    """inputs [B, T, D], paddings [B, T] -> ([B, T, D], None). attention_mask is unused (the
    SSM is causal); cross_inputs [B, S, D] with cross_attention_mask [B|1, 1, T|1, S]."""
    del attention_mask, segment_pos, segment_ids
    self._add_input_summaries(inputs, paddings)
    mixed, gate = self._mix(self._pre_norm(inputs), decode=False)
    x = self._post_norm_and_residual(mixed, inputs, droppath=True)
    if self.use_cross_attention and (
      not self.allow_skip_cross_attention or cross_inputs is not None
    ):
      if cross_inputs is None or cross_attention_mask is None:
        raise ValueError("use_cross_attention needs cross_inputs and cross_attention_mask.")
      x = self._cross_attend(
        x,
        lambda q: self.cross_attention(
          q, cross_inputs, cross_inputs, atten_mask=cross_attention_mask
        )[0],
        droppath=True,
      )
    return self._output(x, gate, paddings), None

  def extend_step(
    self,
    inputs: JTensor,
    *,
    time_step: JTensor,
    segment_pos: JTensor | None = None,
    attention_mask: JTensor,
    cross_attention_mask: JTensor | None = None,
  ) -> JTensor:
    """inputs [B, D] (one step) or [B, L, D] -> the same shape; cross_attention_mask
    [b|B, 1, 1, S] reads the encoder keys / values cached by `__call__`."""
    del attention_mask
    if inputs.ndim not in (2, 3):
      raise ValueError(f"extend_step takes [B, D] or [B, L, D] inputs, got {inputs.shape}.")
    mixed, gate = self._mix(self._pre_norm(inputs), decode=True)
    x = self._post_norm_and_residual(mixed, inputs, droppath=False)
    if self.use_cross_attention and (
      not self.allow_skip_cross_attention or cross_attention_mask is not None
    ):
      if cross_attention_mask is None:
        raise ValueError("use_cross_attention needs cross_attention_mask when decoding.")
      x = self._cross_attend(
        x,
        lambda q: self.cross_attention.extend_step(
          q,
          atten_mask=jnp.squeeze(cross_attention_mask, 2),
          time_step=time_step,
          segment_pos=segment_pos,
          is_cross_attention=True,
        ),
        droppath=False,
      )
    return self._output(x, gate, None)

  def transform_decode_state(self, transform_fn) -> None:
    """The SSM's state needs no reshaping between decode steps (as Pax: nothing to do)."""
    del transform_fn


class SSMGated(SSMTransformer):
  """The Gated State Space layer (module docstring).

  Attributes:
    gss_fflayer_tpl: template of the five projections gss_ffn_{v, u, uc, uco, o}.
  """

  gss_fflayer_tpl: base_hyperparams.Config = template_field(linears.FeedForward)

  def _ffn(self, name: str, input_dims: int, output_dims: int, activation) -> None:
    self.create_child(
      name,
      self.gss_fflayer_tpl.clone().set(
        input_dims=input_dims,
        output_dims=output_dims,
        activation_tpl=pax_fiddle.Config(activation),
      ),
    )

  def setup(self):
    self._setup_norms_dropouts_cross_attention()
    self._create_ssm()
    d, gelu, identity = self.input_dims, activations_lib.GELU, activations_lib.Identity
    self._ffn("gss_ffn_v", d, 3 * d, gelu)
    self._ffn("gss_ffn_u", d, self.ssm_dim, gelu)
    self._ffn("gss_ffn_uc", self.ssm_dim, d, identity)
    self._ffn("gss_ffn_uco", d, 3 * d, gelu)
    self._ffn("gss_ffn_o", 3 * d, d, identity)

  def _mix(self, normalized: JTensor, decode: bool) -> tuple[JTensor, JTensor | None]:
    gate = self.gss_ffn_v(normalized)
    u = self.gss_ffn_u(normalized)
    y = self.ssm.extend_step(u) if decode and u.ndim == 2 else self.ssm(u)
    return self.gss_ffn_uc(y), gate

  def _output(self, x: JTensor, gate: JTensor | None, paddings: JTensor | None) -> JTensor:
    del paddings
    return self.gss_ffn_o(self.gss_ffn_uco(x) * gate)


# Pax's module-level names for the types and variable collections this module's API uses.
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
NestedJTensor = pytypes.NestedJTensor
NestedMap = py_utils.NestedMap
SplitDimsMapping = pytypes.SplitDimsMapping
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
