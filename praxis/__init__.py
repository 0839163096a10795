"""praxis: layers and models on Flax linen.

Public modules (import them directly; this file imports nothing so that
`import praxis` stays cheap). The Pax modules keep Pax's names and call shapes:
  base_layer: Pax's BaseLayer, WeightHParams, WeightInit, JaxContext, collection names,
    instantiate, maybe_shard; init_boxed (weights with their sharding metadata).
  pax_fiddle: Pax's Config / Partial / instantiate / template_field / instance_field /
    auto_config.
  py_utils: NestedMap and the array helpers Pax's layers use.
  test_utils: Pax's TestCase (assertAllClose, ...), to_np, to_tf_nmap.
  weight_hparams, jax_context: where base_layer's WeightHParams / JaxContext live.
  base_hyperparams: the configs under pax_fiddle, the seed's `Layer.HParams.config(...)`, and
    nested_struct_to_text (model_params.txt).
  base_input: Pax's BaseInput (sizes, multihost sharding, the eval table, input checkpointing)
    and LingvoInputAdaptor (wraps another input's config).
  optimizers: Adam/AdamW, Adafactor, ShardedAdafactor, Sgd (momentum), Lion as configs; build(cfg) -> optax chain
    with global-norm clipping, decoupled weight decay (regex exclusions), lr schedule, EMA.
  pytypes: NestedMap and type aliases.
  gshard_utils: Pax's MoE gating (top2_gating_on_logits with capacity and the load-balancing
    loss, expert choice, compute_gating), used by layers.transformer_moe.
  metric_utils: Pax's top_k_accuracy.
  schedules: learning-rate schedules (Pax's set: Constant, Linear, Exponential, Cosine,
    PiecewiseConstant, LinearRampupExponentialDecay/CosineDecay, Rsqrt, ...) on optax.
  sharding: mesh axes (replica, data, mdl), make_mesh, the Pax v1 logical-axis rules table,
    logical_to_shardings (abstract train state -> NamedShardings), activate (mesh + rules).
"""

__all__ = [
  "base_hyperparams",
  "base_input",
  "base_layer",
  "gshard_utils",
  "jax_context",
  "metric_utils",
  "optimizers",
  "pax_fiddle",
  "py_utils",
  "pytypes",
  "schedules",
  "sharding",
  "test_utils",
  "weight_hparams",
]
