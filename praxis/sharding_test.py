"""Tests for praxis.sharding on 8 fake CPU devices (XLA_FLAGS set in BUILD / below)."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import functools

from absl.testing import absltest  # pylint: disable=g-import-not-at-top
from absl.testing import parameterized
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from praxis import base_layer
from praxis import sharding

P = jax.sharding.PartitionSpec
B, T, V, D, F, N, H, L = 8, 4, 16, 16, 32, 4, 4, 2

# Pax's set_sharding_params_v1, written out independently of the rules table: each weight's
# mesh placement (w_vd, w_df, w_dnh, repeat prefix replicated) and each activation's.
EXPECTED_WEIGHTS = {
  "emb": P("mdl", "data"),  # w_vd = [mdl, data]
  "ffn0": P("data", "mdl"),  # w_df = [data, mdl]
  "ffn1": P("mdl", "data"),  # ffn1 is w_df transposed
  "qkv": P("data", "mdl", None),  # w_dnh = [data, mdl, None]
  "stacked": P(None, "data", "mdl"),  # [layers, d, f]: repeat prefix replicated
  "bias": P("mdl"),  # the ffn0 bias follows f
  "scale": P("data"),  # a [d] weight follows d (see module docstring)
}
# The batch is split over replica x data, data-major (see sharding's docstring for why not
# Pax's replica-major order).
BATCH = ("data", "replica")
EXPECTED_ACTIVATIONS = {
  "bld": P(BATCH, None, "mdl"),  # a_bld, training optimised
  "blf": P(BATCH, None, "mdl"),  # a_blf
  "blnh": P(BATCH, None, "mdl", None),  # a_blnh
  "blv": P(BATCH, None, "mdl"),  # a_blv
}


class TinyAnnotated(base_layer.BaseLayer):
  """A transformer-shaped toy that uses every weight layout of the table."""

  def setup(self):
    self.emb = self.create_variable("emb", (V, D), ("vocab", "embed"))
    self.ffn0 = self.create_variable("ffn0", (D, F), ("embed", "mlp"))
    self.ffn1 = self.create_variable("ffn1", (F, D), ("mlp", "embed"))
    self.qkv = self.create_variable("qkv", (D, N, H), ("embed", "heads", "kv"))
    self.stacked = self.create_variable("stacked", (L, D, F), ("layers", "embed", "mlp"))
    self.bias = self.create_variable(
      "bias", (F,), ("mlp",), init=base_layer.WeightInit.Gaussian(0.1)
    )
    self.scale = self.create_variable(
      "scale", (D,), ("embed",), init=base_layer.WeightInit.Gaussian(1.0)
    )

  def __call__(self, ids):
    x = self.maybe_shard(self.emb[ids] * self.scale, ("batch", "length", "embed"))  # [B, T, D]
    q = self.maybe_shard(
      jnp.einsum("btd,dnh->btnh", x, self.qkv), ("batch", "length", "heads", "kv")
    )  # [B, T, N, H]
    h = jnp.einsum("btd,df->btf", x, self.ffn0 + self.stacked.sum(0)) + self.bias
    h = self.maybe_shard(jax.nn.relu(h), ("batch", "length", "mlp"))  # [B, T, F]
    y = self.maybe_shard(
      jnp.einsum("btf,fd->btd", h, self.ffn1) + q.sum((2, 3))[..., None],
      ("batch", "length", "embed"),
    )  # [B, T, D]
    logits = self.maybe_shard(
      jnp.einsum("btd,vd->btv", y, self.emb), ("batch", "length", "vocab")
    )  # [B, T, V]
    return {"bld": y, "blf": h, "blnh": q, "blv": logits}


def _shard_shape(shape, spec, mesh):
  """The per-device block shape, computed by hand from the spec."""
  out = []
  for dim, size in enumerate(shape):
    axes = spec[dim] if dim < len(spec) else None
    axes = () if axes is None else ((axes,) if isinstance(axes, str) else axes)
    out.append(size // int(np.prod([mesh.shape[a] for a in axes])))
  return tuple(out)


class RulesTableTest(absltest.TestCase):
  def test_table_reproduces_pax_v1(self):
    rules = sharding.LOGICAL_AXIS_RULES
    cases = {
      ("vocab", "embed"): EXPECTED_WEIGHTS["emb"],
      ("embed", "mlp"): EXPECTED_WEIGHTS["ffn0"],
      ("mlp", "embed"): EXPECTED_WEIGHTS["ffn1"],
      ("embed", "heads", "kv"): EXPECTED_WEIGHTS["qkv"],
      ("layers", "embed", "heads", "kv"): P(None, "data", "mdl", None),
      ("embed", "vocab"): P("data", "mdl"),  # FullSoftmax w[d, v]
      ("embed", "kv_heads", "kv"): P("data", None, None),
      ("embed", "classes"): P("data", None),
      ("batch", "length", "embed"): EXPECTED_ACTIVATIONS["bld"],
      ("batch", "length", "mlp"): EXPECTED_ACTIVATIONS["blf"],
      ("batch", "length", "heads", "kv"): EXPECTED_ACTIVATIONS["blnh"],
      ("batch", "length", "vocab"): EXPECTED_ACTIVATIONS["blv"],
      ("batch", "embed"): P(BATCH, "mdl"),  # extend_step activations [B, D]
      ("batch", "length"): P(BATCH, None),
    }
    for axes, expected in cases.items():
      self.assertEqual(sharding.logical_to_mesh_spec(axes, rules), expected, axes)

  def test_not_training_optimized_replicates_activation_embed(self):
    rules = sharding.pax_v1_rules(training_optimized=False)
    self.assertEqual(
      sharding.logical_to_mesh_spec(("batch", "length", "embed"), rules), P(BATCH, None, None)
    )
    # Weights are unchanged.
    self.assertEqual(sharding.logical_to_mesh_spec(("vocab", "embed"), rules), P("mdl", "data"))

  def test_pax_exact_batch_order(self):
    rules = sharding.pax_v1_rules(batch_axes=("replica", "data"))
    self.assertEqual(
      sharding.logical_to_mesh_spec(("batch", "length", "embed"), rules),
      P(("replica", "data"), None, "mdl"),
    )
    with self.assertRaisesRegex(ValueError, "must include 'data'"):
      sharding.pax_v1_rules(batch_axes=("replica",))


class MeshTest(absltest.TestCase):
  def test_shape_and_names(self):
    mesh = sharding.make_mesh((1, 4, 2))
    self.assertEqual(dict(mesh.shape), {"replica": 1, "data": 4, "mdl": 2})
    self.assertCountEqual([d.id for d in mesh.devices.flat], range(8))

  def test_wrong_device_count_names_both_shapes(self):
    with self.assertRaises(ValueError) as ctx:
      sharding.make_mesh((1, 4, 1), (2, 1, 2))
    msg = str(ctx.exception)
    self.assertIn("(1, 4, 1)", msg)
    self.assertIn("(2, 1, 2)", msg)
    self.assertIn("16 devices", msg)
    self.assertIn("8 are available", msg)

  def test_wrong_rank(self):
    with self.assertRaisesRegex(ValueError, "one entry per mesh axis"):
      sharding.make_mesh((8,))

  def test_dcn_granules_are_blocks_of_each_axis(self):
    # 4 granules of 2 devices (consecutive ids on fake CPU devices), ICI along `data`.
    mesh = sharding.make_mesh((1, 2, 1), (2, 1, 2))
    ids = np.vectorize(lambda d: d.id)(mesh.devices)  # [replica, data, mdl]
    self.assertEqual(ids.shape, (2, 2, 2))
    for r in range(2):
      for m in range(2):
        granule = ids[r, :, m]
        self.assertEqual(granule[0] // 2, granule[1] // 2, ids)  # same granule along ICI
    self.assertLen({int(ids[r, 0, m]) // 2 for r in range(2) for m in range(2)}, 4)


class ShardingsTest(parameterized.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = TinyAnnotated()
    cls.ids = jax.random.randint(jax.random.PRNGKey(1), (B, T), 0, V)
    cls.rng = jax.random.PRNGKey(0)

    def fwd_and_grad(v, ids):
      outs = cls.model.apply(v, ids)
      loss = lambda v: jnp.mean(jnp.square(cls.model.apply(v, ids)["blv"]))
      return outs, jax.grad(loss)(v)

    cls.fwd_and_grad = staticmethod(fwd_and_grad)
    # The single-device reference, computed once.
    cls.variables = nn.unbox(cls.model.init(cls.rng, cls.ids))
    cls.ref_outs, cls.ref_grads = jax.jit(fwd_and_grad)(cls.variables, cls.ids)

  @parameterized.parameters((1, 8, 1), (1, 4, 2), (2, 2, 2))
  def test_weights_and_activations_follow_table(self, *ici):
    mesh = sharding.make_mesh(ici)
    abstract = jax.eval_shape(
      functools.partial(base_layer.init_boxed, self.model), self.rng, self.ids
    )
    shardings = sharding.logical_to_shardings(abstract, mesh)
    for name, expected in EXPECTED_WEIGHTS.items():
      self.assertEqual(shardings["params"][name].spec, expected, name)

    # Placed with those shardings, each device holds the block the table says.
    variables = jax.device_put(self.variables, shardings)
    for name, expected in EXPECTED_WEIGHTS.items():
      w = variables["params"][name]
      self.assertEqual(w.sharding.shard_shape(w.shape), _shard_shape(w.shape, expected, mesh), name)

    # Forward and gradient: activations constrained as the table says, values as on one device
    # (float32; tolerance 1e-5 for reassociated sums).
    with sharding.activate(mesh):
      outs, grads = jax.jit(self.fwd_and_grad, out_shardings=(None, shardings))(variables, self.ids)
    for name, expected in EXPECTED_ACTIVATIONS.items():
      out = outs[name]
      self.assertTrue(
        out.sharding.is_equivalent_to(jax.sharding.NamedSharding(mesh, expected), out.ndim),
        f"{name}: {out.sharding} != {expected}",
      )
      np.testing.assert_allclose(out, self.ref_outs[name], rtol=1e-5, atol=1e-5, err_msg=name)
    for name in EXPECTED_WEIGHTS:
      np.testing.assert_allclose(
        grads["params"][name], self.ref_grads["params"][name], rtol=1e-5, atol=1e-5, err_msg=name
      )

  def test_without_activate_constraints_are_ignored(self):
    # Same model on one device, no mesh: annotations are no-ops (the single-device path).
    variables = self.model.init(self.rng, self.ids)
    out = self.model.apply(variables, self.ids)["blv"]
    self.assertEqual(out.shape, (B, T, V))
    self.assertLen(out.sharding.device_set, 1)

  def test_optimizer_state_follows_params(self):
    mesh = sharding.make_mesh((1, 4, 2))

    def init_state(r):
      params = base_layer.init_boxed(self.model, r, self.ids)["params"]  # boxed
      return {"params": params, "opt": optax.adam(1e-3).init(params)}

    state_shardings = sharding.logical_to_shardings(jax.eval_shape(init_state, self.rng), mesh)
    adam_state = state_shardings["opt"][0]
    for name, expected in EXPECTED_WEIGHTS.items():
      self.assertEqual(adam_state.mu[name].spec, expected)
      self.assertEqual(adam_state.nu[name].spec, expected)
    self.assertEqual(adam_state.count.spec, P())  # scalar counter: replicated

  def test_specs_and_plain_leaves(self):
    mesh = sharding.make_mesh((2, 2, 2))
    tree = {
      "spec": P("batch", "embed"),
      "plain": jax.ShapeDtypeStruct((3, 5), jnp.float32),
      "none": None,
    }
    out = sharding.logical_to_shardings(tree, mesh)
    self.assertEqual(out["spec"].spec, P(BATCH, "mdl"))
    self.assertEqual(out["plain"].spec, P())
    self.assertIsNone(out["none"])

  def test_box_of_other_rank_is_replicated(self):
    mesh = sharding.make_mesh((1, 4, 2))
    boxed = {
      "v_row": nn.LogicallyPartitioned(jax.ShapeDtypeStruct((8,), jnp.float32), ("embed", "mlp"))
    }
    self.assertEqual(sharding.logical_to_shardings(boxed, mesh)["v_row"].spec, P())

  def test_indivisible_dim_names_the_path(self):
    mesh = sharding.make_mesh((1, 4, 2))
    boxed = {
      "w": nn.LogicallyPartitioned(jax.ShapeDtypeStruct((6, 8), jnp.float32), ("embed", "mlp"))
    }
    with self.assertRaisesRegex(ValueError, r"\['w'\].*size 6.*\('data',\).*4 devices"):
      sharding.logical_to_shardings(boxed, mesh)

  def test_batch_sharding(self):
    mesh = sharding.make_mesh((2, 2, 2))
    self.assertEqual(sharding.batch_sharding(mesh, 2).spec, P(BATCH, None))
    self.assertEqual(sharding.batch_sharding(mesh, 1).spec, P(BATCH))


class StackedPlacementTest(absltest.TestCase):
  def test_put_stacked_puts_slice_i_on_device_i_in_the_given_order(self):
    devices = jax.devices()[::-1]  # Not topology order: make_mesh would reorder these.
    stacked = {"k": np.arange(len(devices) * 2).reshape(len(devices), 2)}  # [D, 2]
    placed = sharding.put_stacked(stacked, devices)["k"]
    self.assertEqual(sharding.device_list_mesh(devices).devices.tolist(), devices)
    for shard in placed.addressable_shards:
      i = devices.index(shard.device)
      np.testing.assert_array_equal(shard.data, stacked["k"][i : i + 1])
    self.assertEqual(jax.pmap(lambda x: x * 2, devices=devices)(placed).shape, (len(devices), 2))


if __name__ == "__main__":
  absltest.main()
