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
  base_input: Pax's BaseInput (sizes, multihost sharding, the eval table, peek_padded and
    input checkpointing), MultiInput, DatasetInputSpecsProvider and LingvoInputAdaptor (wraps
    another input's config).
  optimizers: Pax's optimizers (Adam/AdamW, Adafactor, ShardedAdafactor, Sgd, ShardedSgd, Lion,
    OptaxOptimizer, ShardedStaticAccumulator) with Pax's get_grad_transformation (L1/L2,
    decoupled weight decay, EWC, EMA; sharding specs via optimizer_transforms), and our
    build(cfg) -> one optax chain with clipping and the lr schedule (the trainer's).
  optimizer_transforms: Pax's sharded gradient transformations (sharded_chain, sharded_masked,
    partition_params, apply_*), used by optimizers.
  optimizer_prefix_vectorization: Pax's optimizers vmapped over stacked (repeat_prefix) weights.
  pytypes: NestedMap and type aliases.
  gshard_utils: Pax's MoE gating (top2_gating_on_logits with capacity and the load-balancing
    loss, expert choice, compute_gating), used by layers.transformer_moe.
  metric_utils: Pax's top_k_accuracy.
  schedules: Pax's learning-rate schedules (Constant, Linear, Exponential, Cosine,
    PiecewiseConstant, LinearRampupExponentialDecay/CosineDecay, LinearRampupSqrtDecay, ...):
    `Cls.config(...)`, `value_at(step)`, and `make()` for an optax schedule.
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
  "optimizer_prefix_vectorization",
  "optimizer_transforms",
  "optimizers",
  "pax_fiddle",
  "py_utils",
  "pytypes",
  "schedules",
  "sharding",
  "test_utils",
  "weight_hparams",
]
