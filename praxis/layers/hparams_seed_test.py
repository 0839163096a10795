"""The seed's documented HParams API, on real praxis layers.

What a Pax user writes must work as written: FeedForward with `linear_tpl` and `activation_tpl`
templates, the `input_dimz` typo raising at once, `.partial`, the model config as readable text
(model_params.txt), and one child config shared by two parents giving one set of weights.
"""

import functools

from absl.testing import absltest
import flax.linen as nn
import jax
import numpy as np

from praxis import base_hyperparams
from praxis import base_layer
from praxis.layers import activations
from praxis.layers import linears
from praxis.layers import normalizations


class Tower(base_layer.BaseLayer):
  """A parent that uses a FeedForward it is given (built elsewhere), after its own LayerNorm."""

  dims: int = 0
  ffn: linears.FeedForward | None = None
  norm_tpl: base_hyperparams.Config = base_hyperparams.template_field(normalizations.LayerNorm)

  def setup(self):
    self.norm = self.create_child(self.norm_tpl, dim=self.dims)

  def __call__(self, x):
    return self.ffn(self.norm(x))


class TwoTowers(base_layer.BaseLayer):
  """Two parents; whether they share their FeedForward is decided by the config alone."""

  left: Tower | None = None
  right: Tower | None = None

  def __call__(self, x):
    return self.left(x) + self.right(x)


class HParamsSeedTest(absltest.TestCase):
  def test_feedforward_with_templates_builds_and_runs(self):
    cfg = linears.FeedForward.HParams.config(
      input_dims=3,
      output_dims=5,
      linear_tpl=linears.Linear.HParams(),
      activation_tpl=activations.GELU.HParams(approximate=False),
    )
    # The templates stay configs on the config and on the built layer.
    self.assertIsInstance(cfg.activation_tpl, base_hyperparams.Config)
    cfg.activation_tpl.approximate = True  # reach into a template before building
    layer = cfg.Instantiate()
    self.assertIsInstance(layer, linears.FeedForward)
    self.assertIsInstance(layer.activation_tpl, base_hyperparams.Config)
    x = jax.random.normal(jax.random.key(0), (2, 3))
    variables = nn.unbox(layer.init(jax.random.key(1), x))
    w = np.asarray(variables["params"]["linear"]["w"])
    b = np.asarray(variables["params"]["bias"]["b"])
    z = np.asarray(x) @ w + b
    tanh_gelu = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))
    np.testing.assert_allclose(layer.apply(variables, x), tanh_gelu, rtol=1e-5, atol=1e-6)

  def test_typo_raises_at_once_with_the_valid_names(self):
    cfg = linears.FeedForward.HParams.config(input_dims=1, output_dims=1)
    with self.assertRaisesRegex(AttributeError, r"input_dimz") as ctx:
      cfg.input_dimz = 31337
    for name in ("input_dims", "output_dims", "linear_tpl", "activation_tpl", "has_bias"):
      self.assertIn(name, str(ctx.exception))
    linear = linears.Linear.HParams.config(input_dims=1, output_dims=1)
    with self.assertRaisesRegex(AttributeError, r"input_dimz.*input_dims"):
      linear.input_dimz = 31337

  def test_partial(self):
    part = linears.Linear.HParams.partial(input_dims=1)
    self.assertIsInstance(part, base_hyperparams.Partial)
    make = part.Instantiate()
    self.assertIsInstance(make, functools.partial)
    layer = make(output_dims=4)
    self.assertIsInstance(layer, linears.Linear)
    self.assertEqual((layer.input_dims, layer.output_dims), (1, 4))

  def test_model_config_prints_as_text(self):
    cfg = linears.MLPBlock.HParams.config(
      num_layers=2,
      hidden_dims=16,
      ff_tpl=linears.FeedForward.HParams(
        input_dims=8, output_dims=4, activation_tpl=activations.GELU.HParams(approximate=False)
      ),
    )
    text = base_hyperparams.nested_struct_to_text(cfg)
    lines = text.splitlines()
    # Pax's text format (model_params.txt): `cls : type/<module>/<Class>` per config.
    for line in (
      "cls : type/praxis.layers.linears/MLPBlock",
      "ff_tpl.input_dims : 8",
      "hidden_dims : 16",
      "num_layers : 2",
      "ff_tpl.cls : type/praxis.layers.linears/FeedForward",
      "ff_tpl.activation_tpl.cls : type/praxis.layers.activations/GELU",
      "ff_tpl.activation_tpl.approximate : False",
      "ff_tpl.linear_tpl.cls : type/praxis.layers.linears/Linear",
      "ff_tpl.linear_tpl.weight_axes : ('embed', 'mlp')",
      "ff_tpl.has_bias : True",
      "dtype : type/jax.numpy/float32",
    ):
      self.assertIn(line, lines)
    # One "path : value" line each, no object reprs.
    for line in lines:
      self.assertRegex(line, r"^\S+ : \S")
      self.assertNotIn(" object at 0x", line)

  def test_child_configured_once_and_shared_by_two_parents_has_one_set_of_weights(self):
    x = jax.random.normal(jax.random.key(0), (2, 3))
    shared_ffn = linears.FeedForward.HParams(input_dims=3, output_dims=3)
    shared = TwoTowers.HParams(
      left=Tower.HParams(dims=3, ffn=shared_ffn), right=Tower.HParams(dims=3, ffn=shared_ffn)
    ).Instantiate()
    self.assertIs(shared.left.ffn, shared.right.ffn)
    variables = nn.unbox(shared.init(jax.random.key(1), x))
    ffn_weights = [
      path
      for path, _ in jax.tree_util.tree_flatten_with_path(variables)[0]
      if "linear" in jax.tree_util.keystr(path)
    ]
    self.assertLen(ffn_weights, 1)
    # Each tower still has its own LayerNorm.
    norms = [
      path
      for path, _ in jax.tree_util.tree_flatten_with_path(variables)[0]
      if "norm" in jax.tree_util.keystr(path) and "scale" in jax.tree_util.keystr(path)
    ]
    self.assertLen(norms, 2)

    # The output uses the one weight in both towers: it equals 2 * one tower's output when the
    # norms are equal (they are at init), and the gradient sums both uses.
    params = variables["params"]
    ffn_params = next(iter(v["ffn"] for v in params.values() if "ffn" in v))
    w, b = np.asarray(ffn_params["linear"]["w"]), np.asarray(ffn_params["bias"]["b"])
    xn = np.asarray(x)
    normed = (xn - xn.mean(-1, keepdims=True)) / np.sqrt(xn.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(
      shared.apply(variables, x), 2 * np.maximum(normed @ w + b, 0), rtol=1e-5, atol=1e-5
    )

    unshared = TwoTowers.HParams(
      left=Tower.HParams(dims=3, ffn=linears.FeedForward.HParams(input_dims=3, output_dims=3)),
      right=Tower.HParams(dims=3, ffn=linears.FeedForward.HParams(input_dims=3, output_dims=3)),
    ).Instantiate()
    unshared_vars = unshared.init(jax.random.key(1), x)
    count = [
      path
      for path, _ in jax.tree_util.tree_flatten_with_path(unshared_vars)[0]
      if "linear" in jax.tree_util.keystr(path)
    ]
    self.assertLen(count, 2)


if __name__ == "__main__":
  absltest.main()
