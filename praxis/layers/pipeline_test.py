"""Pipelined = unpipelined: the same layers give the same outputs, gradients and training steps.

Runs on 8 fake CPU devices: a mesh (stage=4, data=2), the stage weights sharded over `stage` and
the batch over `data`, against the same S stages applied one after another on one device.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import sharding
from praxis import py_utils
from praxis.layers import pipeline
from praxis.layers import transformer_models
from praxis.layers import transformers

_STAGES, _BATCH, _LEN, _DIMS = 4, 8, 6, 8
# Every other logical axis stays replicated: the test is about the stage and batch split.
_RULES = (("stage", "stage"), ("batch", "data"))


def _body():
  return pax_fiddle.Config(
    transformers.StackedTransformer,
    num_layers=2,
    model_dims=_DIMS,
    hidden_dims=2 * _DIMS,
    num_heads=2,
  )


def _pipeline(circular_repeat=1, **fields):
  if circular_repeat > 1:
    cls, fields = (
      pipeline.CircularLayerwiseShardablePipelined,
      {
        **fields,
        "circular_repeat": circular_repeat,
      },
    )
  else:
    cls = pipeline.LayerwiseShardablePipelined
  cfg = pax_fiddle.Config(
    cls, name="pipeline", num_stages=_STAGES, single_stage_body=_body(), **fields
  )
  return base_layer.instantiate(cfg)


def _inputs():
  x = jax.random.normal(jax.random.PRNGKey(1), (_BATCH, _LEN, _DIMS))
  paddings = jnp.zeros((_BATCH, _LEN)).at[:, -2:].set(1.0).at[0, 2:].set(1.0)
  return x, paddings


def _sequential(params, x, paddings, repeats):
  """The unpipelined model: stage (r, s) weights applied in order r * S + s on one device."""
  layer = base_layer.instantiate(_body().set(name="stage"))
  for r in range(repeats):
    for s in range(_STAGES):
      index = (r, s) if repeats > 1 else (s,)
      weights = jax.tree.map(lambda w, i=index: w[i], params["body"])
      x = layer.apply({"params": weights}, x, paddings)
  return x


def _loss(y):
  return jnp.mean(jnp.sin(y) * y)


class PipelineTest(parameterized.TestCase):
  def setUp(self):
    super().setUp()
    devices = np.array(jax.devices()[:8]).reshape(_STAGES, 2)
    self.mesh = jax.sharding.Mesh(devices, ("stage", "data"))

  def _sharded(self, layer, *args):
    """Variables initialised and placed by their logical axes; the weights' stage dim on `stage`."""
    boxed = jax.eval_shape(lambda: base_layer.init_boxed(layer, jax.random.PRNGKey(0), *args))
    shardings = sharding.logical_to_shardings(boxed, self.mesh, _RULES)
    variables = jax.jit(lambda: layer.init(jax.random.PRNGKey(0), *args), out_shardings=shardings)()
    return variables, shardings

  @parameterized.named_parameters(
    ("two_microbatches", 1, {"num_microbatches": 2}),
    ("four_microbatches", 1, {"num_microbatches": 4}),
    ("circular", 2, {"microbatch_size": 2}),
    ("nan_bubbles", 1, {"num_microbatches": 2, "polluting_bubbles_with_nan": True}),
  )
  def test_outputs_and_gradients_match_unpipelined(self, repeats, fields):
    layer = _pipeline(repeats, **fields)
    x, paddings = _inputs()
    variables, shardings = self._sharded(layer, x, paddings)
    prefix = (repeats, _STAGES) if repeats > 1 else (_STAGES,)
    for w, placement in zip(
      jax.tree.leaves(variables["params"]), jax.tree.leaves(shardings["params"])
    ):
      self.assertEqual(w.shape[: len(prefix)], prefix)
      self.assertEqual(placement.spec[len(prefix) - 1], "stage")

    with sharding.activate(self.mesh, _RULES):
      got, got_grads = jax.jit(
        jax.value_and_grad(lambda p: _loss(layer.apply({"params": p}, x, paddings)))
      )(variables["params"])
    host_params = jax.device_get(variables["params"])
    want, want_grads = jax.value_and_grad(lambda p: _loss(_sequential(p, x, paddings, repeats)))(
      host_params
    )
    np.testing.assert_allclose(got, want, rtol=1e-5)
    jax.tree.map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), got_grads, want_grads
    )

  def test_training_steps_match_unpipelined(self):
    layer = _pipeline(num_microbatches=4)
    x, paddings = _inputs()
    variables, _ = self._sharded(layer, x, paddings)

    def sgd(loss_fn):
      @jax.jit
      def step(params):
        loss, grads = jax.value_and_grad(loss_fn)(params)
        return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads), loss

      return step

    pipelined = sgd(lambda p: _loss(layer.apply({"params": p}, x, paddings)))
    sequential = sgd(lambda p: _loss(_sequential(p, x, paddings, 1)))
    params, reference = variables["params"], jax.device_get(variables["params"])
    for _ in range(3):
      with sharding.activate(self.mesh, _RULES):
        params, loss = pipelined(params)
      reference, want = sequential(reference)
      # float32 sums over a sharded batch and over one device differ in their last bits.
      np.testing.assert_allclose(loss, want, rtol=1e-4)
    jax.tree.map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
      jax.device_get(params),
      reference,
    )

  def test_bubbles_are_the_only_extra_work(self):
    """XLA's cost analysis: the pipelined step's flops over the unpipelined step's.

    The analysis counts the loop body (all S stages on one microbatch) once, so the pipelined
    total is that times the M + S - 1 iterations; over the unpipelined flops this should be the
    bubble factor (M + S - 1) / M, plus what the schedule itself costs (shifts, masks,
    gathers: 2.2% of it on this layer with jax 0.10.2 on CPU).
    """
    num_mb = 4
    layer = _pipeline(num_microbatches=num_mb)
    x, paddings = _inputs()
    # Shapes are all the compiler needs.
    params = jax.eval_shape(layer.init, jax.random.PRNGKey(0), x, paddings)["params"]

    def flops(loss_fn):
      compiled = jax.jit(jax.value_and_grad(loss_fn)).lower(params).compile()
      analysis = compiled.cost_analysis()
      return (analysis[0] if isinstance(analysis, list) else analysis)["flops"]

    per_iteration = flops(lambda p: _loss(layer.apply({"params": p}, x, paddings)))
    unpipelined = flops(lambda p: _loss(_sequential(p, x, paddings, 1)))
    iterations = num_mb + _STAGES - 1
    overhead = per_iteration * iterations / unpipelined
    bubble = iterations / num_mb
    print(f"pipelined/unpipelined flops {overhead:.3f}, bubble factor {bubble:.3f}")
    self.assertBetween(overhead, bubble, bubble * 1.05)

  @parameterized.named_parameters(("gpipe", 1, 2), ("circular", 2, 4))
  def test_language_model_matches_unpipelined(self, repeats, num_mb):
    """A TransformerLm whose stack is pipelined = the same LM with all layers in one stack."""
    vocab, layers_per_stage = 16, 2
    num_layers = layers_per_stage * _STAGES * repeats

    def lm(stack):
      cfg = pax_fiddle.Config(
        transformer_models.TransformerLm,
        name="lm",
        model_dims=_DIMS,
        vocab_size=vocab,
        stacked_transformer_tpl=stack,
      )
      return base_layer.instantiate(cfg)

    stage = _body()  # 2 layers
    pipelined = lm(
      pax_fiddle.Config(
        pipeline.PipelinedTransformer,
        pipeline_stage=stage,
        num_pipeline_stages=_STAGES,
        circular_repeat=repeats,
        num_pipeline_microbatches=num_mb,
      )
    )
    flat = lm(_body().set(num_layers=num_layers))
    ids = jax.random.randint(jax.random.PRNGKey(4), (_BATCH, _LEN), 0, vocab)
    paddings = jnp.zeros((_BATCH, _LEN)).at[:, -1:].set(1.0)
    labels = py_utils.NestedMap(class_ids=jnp.roll(ids, -1, axis=1), class_weights=1.0 - paddings)
    variables, _ = self._sharded(pipelined, ids, paddings, labels)
    params = jax.device_get(variables["params"])
    stages = params["transformer"]["pipeline"]["body"]
    prefix = (repeats, _STAGES) if repeats > 1 else (_STAGES,)
    self.assertEqual(jax.tree.leaves(stages)[0].shape[: len(prefix)], prefix)
    flat_params = {
      **{k: v for k, v in params.items() if k != "transformer"},
      "transformer": pipeline.unstack_stages(stages, layers_per_stage, repeats),
    }
    # The unpipelined model has exactly these weights: same names and shapes.
    want_shapes = jax.tree.map(
      jnp.shape, flat.init(jax.random.PRNGKey(0), ids, paddings, labels)["params"]
    )
    self.assertEqual(jax.tree.map(jnp.shape, flat_params), want_shapes)

    def loss(model):
      return lambda p: model.apply({"params": p}, ids, paddings, labels).avg_xent

    with sharding.activate(self.mesh, _RULES):
      got, got_grads = jax.jit(jax.value_and_grad(loss(pipelined)))(variables["params"])
    want, want_grads = jax.value_and_grad(loss(flat))(flat_params)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    got_grads = jax.device_get(got_grads)
    got_grads["transformer"] = pipeline.unstack_stages(
      got_grads["transformer"]["pipeline"]["body"], layers_per_stage, repeats
    )
    jax.tree.map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), got_grads, want_grads
    )

  def test_static_arguments_reach_every_stage(self):
    # Dropout acts only with deterministic=False.
    body = pax_fiddle.Config(
      transformers.TransformerFeedForward, input_dims=4, hidden_dims=8, relu_dropout_prob=0.5
    )
    layer = base_layer.instantiate(
      pax_fiddle.Config(
        pipeline.LayerwiseShardablePipelined,
        name="pipe",
        num_stages=2,
        num_microbatches=2,
        single_stage_body=body,
      )
    )
    x = jax.random.normal(jax.random.PRNGKey(2), (4, 3, 4))
    variables = layer.init(jax.random.PRNGKey(0), x, deterministic=True)
    a = layer.apply(variables, x, deterministic=True)
    b = layer.apply(variables, x, deterministic=True)
    c = layer.apply(variables, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(3)})
    np.testing.assert_array_equal(a, b)
    self.assertGreater(float(jnp.max(jnp.abs(a - c))), 1e-3)

  def test_errors_name_the_problem(self):
    x, paddings = _inputs()

    def run(layer):
      # Shapes only: the errors come from tracing, so nothing needs computing.
      variables = jax.eval_shape(layer.init, jax.random.PRNGKey(0), x[:1], paddings[:1])
      return jax.eval_shape(layer.apply, variables, x, paddings)

    with self.assertRaisesRegex(ValueError, "does not split into 3 microbatches"):
      run(_pipeline(num_microbatches=3))
    with self.assertRaisesRegex(ValueError, "at least as many microbatches as stages"):
      run(_pipeline(2, num_microbatches=2))


if __name__ == "__main__":
  absltest.main()
