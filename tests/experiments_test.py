"""Builds every registered experiment abstractly and checks its parameter count by formula.

Nothing is allocated or compiled: `jax.eval_shape` traces the initialisation (and one train
step), so even LmCloudSpmd1024B builds in seconds. The count of the abstract weights must equal
`expected_param_count`, written here from the architecture alone (not from the layers' code), so
a layer that grows a stray bias or drops a LayerNorm fails this test.
"""

import functools
import math

from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
import jax
import jax.numpy as jnp

from paxml import experiment_registry
from paxml import tasks_lib
from paxml import trainer
from paxml.tools import abstract_build

# Every module that registers experiments; add new ones here.
from paxml.tasks.lm.params import c4  # pylint: disable=unused-import
from paxml.tasks.lm.params import c4_multislice  # pylint: disable=unused-import
from paxml.tasks.lm.params import demo  # pylint: disable=unused-import
from paxml.tasks.lm.params import lm_cloud  # pylint: disable=unused-import
from praxis.layers import activations
from praxis.layers import checkpoint_policy
from praxis.layers import embedding_softmax
from praxis.layers import models
from praxis.layers import pipeline
from praxis.layers import transformers

_NAMES = experiment_registry.canonical_names()
# Tracing a train step of the unrolled 32B..1024B models takes minutes on two shared cores; they
# build their state abstractly, and the 2B configurations' steps stand for the family.
_MAX_PARAMS_FOR_STEP = 3_000_000_000


def lm_param_count(
  *,
  vocab: int,
  dims: int,
  layers: int,
  heads: int,
  dims_per_head: int,
  hidden: int,
  attention_bias: bool = False,
  ffn_bias: bool = True,
  gated: bool = False,
  softmax_bias: bool = True,
  tied: bool = True,
  position_table: int = 0,
  per_dim_scale: bool = False,
) -> int:
  """Parameters of a pre-LN decoder-only Transformer LM (praxis TransformerLm).

  embedding + softmax  V*D, once when tied (twice untied), + V for the softmax bias
  per layer            attention 4*D*N*H (Q, K, V, output; combined or not) [+ 3*N*H + D
                       biases]; FFN 2*D*F (3*D*F gated) [+ F (2*F gated) + D biases];
                       two LayerNorms with scale and bias: 4*D
  final LayerNorm      2*D
  positions            a learned [max_seq_len, D] table, else none (sinusoidal)
  per-dim query scale  H per layer (Pax's `internal_enable_per_dim_scale`, on by default)
  """
  v, d, n, h, f = vocab, dims, heads, dims_per_head, hidden
  attention = (
    4 * d * n * h + ((3 * n * h + d) if attention_bias else 0) + (h if per_dim_scale else 0)
  )
  ffn = (3 if gated else 2) * d * f + (((2 if gated else 1) * f + d) if ffn_bias else 0)
  embedding = v * d * (1 if tied else 2) + (v if softmax_bias else 0)
  return embedding + layers * (attention + ffn + 4 * d) + 2 * d + position_table * d


def _lm_formula_args(lm) -> dict:
  """The formula's inputs from a praxis TransformerLm config (not from its built weights)."""
  stack = lm.stacked_transformer_tpl
  layers = 1
  if stack.__fn_or_cls__ is pipeline.PipelinedTransformer:
    layers, stack = stack.num_pipeline_stages * stack.circular_repeat, stack.pipeline_stage
  if stack.__fn_or_cls__ is transformers.StackedTransformerRepeated:
    layers, stack = layers * stack.x_times, stack.block
  layer = stack.transformer_layer_params_tpl
  position = lm.position_emb_tpl
  learned = (
    position is not None
    and position.__fn_or_cls__ is embedding_softmax.TrainablePositionalEmbedding
  )
  return dict(
    vocab=lm.vocab_size,
    dims=lm.model_dims,
    layers=layers * stack.num_layers,
    heads=stack.num_heads,
    dims_per_head=stack.dim_per_head or lm.model_dims // stack.num_heads,
    hidden=stack.hidden_dims,
    attention_bias=layer.tr_atten_tpl.use_bias,
    ffn_bias=layer.tr_fflayer_tpl.has_bias,
    gated=layer.tr_fflayer_tpl.use_gated_activation,
    # Pax's softmax has its bias in the logits FeedForward.
    softmax_bias=lm.softmax_tpl.feed_forward_tpl is not None
    and lm.softmax_tpl.feed_forward_tpl.has_bias,
    tied=lm.separate_embedding_tpl is None,
    position_table=position.max_seq_length if learned else 0,
    per_dim_scale=layer.tr_atten_tpl.internal_enable_per_dim_scale,
  )


def expected_param_count(experiment) -> int:
  """The formula's inputs, read from the built model's architecture fields."""
  model = tasks_lib.to_task_config(experiment.task()).model
  if isinstance(model, models.LanguageModel):
    return lm_param_count(**_lm_formula_args(model.lm_tpl))
  if isinstance(model, models.ClassificationMLPModel):
    # MLP I -> H -> ... -> H -> O with biases, then the tied softmax table [I, V=I] and bias.
    mlp, i = model.mlp_tpl, model.mlp_tpl.ff_tpl.input_dims
    dims = [i] + [mlp.hidden_dims] * (mlp.num_layers - 1) + [mlp.ff_tpl.output_dims]
    layers = sum(a * b + b for a, b in zip(dims, dims[1:]))
    return layers + i * model.softmax_tpl.num_classes + model.softmax_tpl.num_classes
  raise AssertionError(
    f"{type(experiment).__name__}: no parameter formula for a "
    f"{type(model).__name__}; add one to expected_param_count"
  )


def _count(params, *parts: str) -> int:
  """Parameters whose path contains every one of `parts`."""
  return sum(
    int(math.prod(x.shape))
    for path, x in jax.tree_util.tree_flatten_with_path(nn.unbox(params))[0]
    if all(p in jax.tree_util.keystr(path) for p in parts)
  )


class FormulaTest(absltest.TestCase):
  def test_matches_pax_published_sizes(self):
    # pax.md: LmCloudSpmd2B ~ 18*12*3072^2 + 32000*3072 ~ 2.1B.
    n = lm_param_count(vocab=32000, dims=3072, layers=18, heads=24, dims_per_head=128, hidden=12288)
    self.assertAlmostEqual(n / 1e9, 18 * 12 * 3072**2 / 1e9 + 0.098, delta=0.01)

  def test_experiment_fields_reach_the_model_and_optimizer(self):
    task_p = lm_cloud.LmCloudSpmd2B().task()
    self.assertIs(task_p.__fn_or_cls__, tasks_lib.SingleTask)
    task = tasks_lib.to_task_config(task_p)
    model = task.model
    self.assertEqual(jax.numpy.dtype(model.fprop_dtype), jax.numpy.bfloat16)
    lm = model.lm_tpl
    repeated = lm.stacked_transformer_tpl
    self.assertIs(repeated.__fn_or_cls__, transformers.StackedTransformerRepeated)
    self.assertEqual(repeated.x_times, 18)
    self.assertEqual(
      repeated.checkpoint_policy, checkpoint_policy.AutodiffCheckpointType.SAVE_NOTHING
    )
    block = repeated.block
    self.assertEqual(
      (
        block.num_layers,
        block.model_dims,
        block.num_heads,
        block.dim_per_head,
        block.hidden_dims,
        lm.vocab_size,
      ),
      (1, 3072, 24, 128, 12288, 32000),
    )
    layer = block.transformer_layer_params_tpl
    self.assertEqual(
      (
        layer.tr_atten_tpl.combine_qkv,
        layer.tr_atten_tpl.use_bias,
        layer.tr_atten_tpl.atten_logit_cap,
      ),
      (True, False, 50.0),
    )
    self.assertIs(layer.tr_fflayer_tpl.activation_tpl.__fn_or_cls__, activations.GELU)
    self.assertFalse(layer.tr_fflayer_tpl.use_gated_activation)
    self.assertEqual(
      (lm.softmax_tpl.soft_cap_logits, lm.softmax_tpl.scale_sqrt_depth), (30.0, True)
    )
    self.assertIsNone(lm.separate_embedding_tpl)  # Tied.
    self.assertEqual(task.ici_mesh_shape, (1, 4, 1))
    self.assertEqual(task_p.train.learner.loss_name, "total_loss")
    self.assertEqual(task_p.train.learner.repeat_prefix_sep, "_")
    opt = task.optimizer
    self.assertEqual(
      (
        opt.learning_rate,
        opt.beta1,
        opt.beta2,
        opt.epsilon,
        opt.weight_decay,
        opt.clip_gradient_norm_to_value,
      ),
      (2.5e-4, 0.9, 0.99, 1e-6, 1e-3, 5.0),
    )
    sched = opt.lr_schedule
    self.assertEqual(
      (sched.warmup_steps, sched.decay_start, sched.decay_end, sched.min_ratio),
      (4000, 4001, 300000, 0.1),
    )
    # set_default_adam's fields and the loop fields all reach the trainer.
    self.assertEqual(tasks_lib.not_applied(task_p), [])
    self.assertEqual((task.save_interval_steps, task.num_train_steps), (5000, 10_000_000))

  def test_counts_by_hand(self):
    # V=10, D=4, one layer, N=2, H=2, F=8, no biases anywhere:
    # 40 (embedding) + 4*4*2*2=64 (attention) + 2*4*8=64 (FFN) + 16 (LNs) + 8 (final LN).
    self.assertEqual(
      lm_param_count(
        vocab=10,
        dims=4,
        layers=1,
        heads=2,
        dims_per_head=2,
        hidden=8,
        ffn_bias=False,
        softmax_bias=False,
      ),
      40 + 64 + 64 + 16 + 8,
    )
    # Gated FFN with biases: 3*D*F + 2F + D = 96 + 16 + 4.
    self.assertEqual(
      lm_param_count(
        vocab=10,
        dims=4,
        layers=1,
        heads=2,
        dims_per_head=2,
        hidden=8,
        gated=True,
        softmax_bias=False,
      )
      - (40 + 64 + 16 + 8),
      116,
    )

  def test_each_term_against_the_real_param_tree(self):
    # LmCloudSpmdTest: V=32000, D=64, 2 repeated layers, N=8, H=8, F=256.
    experiment = lm_cloud.LmCloudSpmdTest()
    params = abstract_build.build(experiment).boxed_state.mdl_vars["params"]
    v, d, n, h, f, layers = 32000, 64, 8, 8, 256, 2
    self.assertEqual(_count(params, "softmax"), v * d + v)  # Tied table + softmax bias.
    # Q, K, V and output projections, plus Pax's per-dim query scale ([H] per layer).
    self.assertEqual(_count(params, "self_attention"), layers * (4 * d * n * h + h))
    self.assertEqual(_count(params, "per_dim_scale"), layers * h)
    self.assertEqual(_count(params, "combined_qkv"), layers * 3 * d * n * h)
    self.assertEqual(_count(params, "ff_layer", "ffn_layer"), layers * (2 * d * f + f + d))
    self.assertEqual(_count(params, "layer_norm"), layers * 4 * d)
    self.assertEqual(_count(params, "final_ln"), 2 * d)
    self.assertEqual(
      _count(params),
      lm_param_count(
        vocab=v, dims=d, layers=layers, heads=n, dims_per_head=h, hidden=f, per_dim_scale=True
      ),
    )


class AllExperimentsTest(parameterized.TestCase):
  def test_pax_experiments_are_registered(self):
    for name in (
      "lm_cloud.LmCloudSpmd2B",
      "lm_cloud.LmCloudSpmd1024B",
      "lm_cloud.LmCloudTransformerAdamTest",
      "c4.C4Spmd16BAdam32Replicas",
      "lm_cloud.LmCloudSpmdPipeline9B",
      "lm_cloud.LmCloudSpmdPipelineMultislice2BCircular",
    ):
      self.assertIn(f"tasks.lm.params.{name}", _NAMES)

  @parameterized.named_parameters((name, name) for name in _NAMES)
  def test_builds_abstractly_with_formula_param_count(self, name):
    experiment = experiment_registry.get(name)()
    built = abstract_build.build(experiment)
    # A quantized model (int8 PTQ serving) also stores a scale per output channel of each
    # quantized weight (`w_quantized_scale`, `emb_var_quantized_scale`); the formula counts weights.
    scales = _count(built.boxed_state.mdl_vars["params"], "_quantized_")
    self.assertEqual(built.num_params - scales, expected_param_count(experiment))

    if built.num_params > _MAX_PARAMS_FOR_STEP:
      return
    params = jax.tree.leaves(nn.unbox(built.boxed_state.mdl_vars["params"]))
    if any(jnp.issubdtype(x.dtype, jnp.integer) for x in params):
      return  # int8 serving weights (PTQ): evaluated and decoded, never trained
    # One abstract train step: shapes of the new state equal the old, metrics are scalars.
    task = built.task
    step = functools.partial(
      trainer.train_step,
      model=task.model,
      optimizer=built.optimizer,
      num_microbatches=task.num_microbatches,
    )
    state = nn.unbox(built.boxed_state)
    new_state, metrics = jax.eval_shape(step, state, built.batch, jax.random.PRNGKey(0))
    self.assertEqual(jax.tree.structure(new_state), jax.tree.structure(state))
    for old, new in zip(jax.tree.leaves(state), jax.tree.leaves(new_state)):
      self.assertEqual((old.shape, old.dtype), (new.shape, new.dtype))
    for key in ("loss", "Metrics/total_loss", "lr", "learning/raw_grad_norm"):
      self.assertEqual(metrics[key].shape, (), msg=key)


if __name__ == "__main__":
  absltest.main()
