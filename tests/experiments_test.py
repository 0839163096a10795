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

from paxml import experiment_registry
from paxml import trainer
from paxml.tools import abstract_build
# Every module that registers experiments; add new ones here.
from paxml.tasks.lm.params import c4  # pylint: disable=unused-import
from paxml.tasks.lm.params import demo  # pylint: disable=unused-import
from paxml.tasks.lm.params import lm_cloud  # pylint: disable=unused-import
from praxis import transformer_lm
from praxis.layers import models

_NAMES = experiment_registry.canonical_names()
# Tracing a train step of the unrolled 32B..1024B models takes minutes on two shared cores; they
# build their state abstractly, and the 2B configurations' steps stand for the family.
_MAX_PARAMS_FOR_STEP = 3_000_000_000


def lm_param_count(*, vocab: int, dims: int, layers: int, heads: int, dims_per_head: int,
                   hidden: int, attention_bias: bool = False, ffn_bias: bool = True,
                   gated: bool = False, softmax_bias: bool = False, tied: bool = True,
                   position_table: int = 0) -> int:
  """Parameters of a pre-LN decoder-only Transformer LM.

    embedding + softmax  V*D, once when tied (twice untied), + V for a softmax bias
    per layer            attention 4*D*N*H (Q, K, V, output) [+ 3*N*H + D biases]
                         FFN 2*D*F (3*D*F gated) [+ F (2*F gated) + D biases]
                         two LayerNorms with scale and bias: 4*D
    final LayerNorm      2*D
    positions            a learned [max_seq_len, D] table, else none (sinusoidal)
  """
  v, d, n, h, f = vocab, dims, heads, dims_per_head, hidden
  attention = 4 * d * n * h + ((3 * n * h + d) if attention_bias else 0)
  ffn = (3 if gated else 2) * d * f + (((2 if gated else 1) * f + d) if ffn_bias else 0)
  embedding = v * d * (1 if tied else 2) + (v if softmax_bias else 0)
  return embedding + layers * (attention + ffn + 4 * d) + 2 * d + position_table * d


def expected_param_count(experiment) -> int:
  """The formula's inputs, read from the built model's architecture fields."""
  model = experiment.task().model
  if isinstance(model, transformer_lm.LmModel):
    # praxis.transformer_lm: no attention biases, biased MLP, tied softmax without a bias.
    lm = model.lm
    learned = lm.position_embedding is transformer_lm.PositionEmbedding.LEARNED
    return lm_param_count(vocab=lm.vocab_size, dims=lm.model_dims, layers=lm.num_layers,
                          heads=lm.num_heads, dims_per_head=lm.model_dims // lm.num_heads,
                          hidden=lm.hidden_dims, position_table=lm.max_seq_len if learned else 0)
  if isinstance(model, models.LanguageModel):
    # praxis.layers defaults: biased Q/K/V/post projections and MLP, a tied softmax with a
    # bias, sinusoidal positions (a learned table is not counted here).
    lm = model.lm_tpl
    stack = lm.stacked_transformer_tpl
    return lm_param_count(vocab=lm.vocab_size, dims=lm.model_dims, layers=stack.num_layers,
                          heads=stack.num_heads, dims_per_head=stack.dim_per_head,
                          hidden=stack.hidden_dims, attention_bias=True, softmax_bias=True)
  raise AssertionError(f"{type(experiment).__name__}: no parameter formula for a "
                       f"{type(model).__name__}; add one to expected_param_count")


class FormulaTest(absltest.TestCase):

  def test_matches_pax_published_sizes(self):
    # pax.md: LmCloudSpmd2B ~ 18*12*3072^2 + 32000*3072 ~ 2.1B.
    n = lm_param_count(vocab=32000, dims=3072, layers=18, heads=24, dims_per_head=128,
                       hidden=12288)
    self.assertAlmostEqual(n / 1e9, 18 * 12 * 3072**2 / 1e9 + 0.098, delta=0.01)

  def test_experiment_fields_reach_the_model(self):
    # The count follows the Pax fields: LmCloudSpmd2B's heads come from DIMS_PER_HEAD=128.
    lm = lm_cloud.LmCloudSpmd2B().task().model.lm
    self.assertEqual((lm.num_layers, lm.model_dims, lm.num_heads, lm.hidden_dims, lm.vocab_size),
                     (18, 3072, 24, 12288, 32000))
    self.assertEqual(math.prod(lm_cloud.LmCloudSpmd2B.ICI_MESH_SHAPE), 4)

  def test_counts_by_hand(self):
    # V=10, D=4, one layer, N=2, H=2, F=8, no biases anywhere:
    # 40 (embedding) + 4*4*2*2=64 (attention) + 2*4*8=64 (FFN) + 16 (LNs) + 8 (final LN).
    self.assertEqual(lm_param_count(vocab=10, dims=4, layers=1, heads=2, dims_per_head=2,
                                    hidden=8, ffn_bias=False), 40 + 64 + 64 + 16 + 8)
    # Gated FFN with biases: 3*D*F + 2F + D = 96 + 16 + 4.
    self.assertEqual(lm_param_count(vocab=10, dims=4, layers=1, heads=2, dims_per_head=2,
                                    hidden=8, gated=True) - (40 + 64 + 16 + 8), 116)


class AllExperimentsTest(parameterized.TestCase):

  def test_pax_experiments_are_registered(self):
    for name in ("lm_cloud.LmCloudSpmd2B", "lm_cloud.LmCloudSpmd1024B",
                 "lm_cloud.LmCloudTransformerAdamTest", "c4.C4Spmd16BAdam32Replicas"):
      self.assertIn(f"tasks.lm.params.{name}", _NAMES)

  @parameterized.named_parameters((name, name) for name in _NAMES)
  def test_builds_abstractly_with_formula_param_count(self, name):
    experiment = experiment_registry.get(name)()
    built = abstract_build.build(experiment)
    self.assertEqual(built.num_params, expected_param_count(experiment))

    if built.num_params > _MAX_PARAMS_FOR_STEP:
      return
    # One abstract train step: shapes of the new state equal the old, metrics are scalars.
    task = built.task
    step = functools.partial(
        trainer.train_step, model=task.model, optimizer=built.optimizer, schedule=built.schedule,
        clip_gradient_norm_to_value=task.clip_gradient_norm_to_value,
        num_microbatches=task.num_microbatches)
    state = nn.unbox(built.boxed_state)
    new_state, metrics = jax.eval_shape(step, state, built.batch, jax.random.PRNGKey(0))
    self.assertEqual(jax.tree.structure(new_state), jax.tree.structure(state))
    for old, new in zip(jax.tree.leaves(state), jax.tree.leaves(new_state)):
      self.assertEqual((old.shape, old.dtype), (new.shape, new.dtype))
    for key in ("loss", "Metrics/total_loss", "lr", "learning/raw_grad_norm"):
      self.assertEqual(metrics[key].shape, (), msg=key)


if __name__ == "__main__":
  absltest.main()
