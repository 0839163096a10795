"""praxis: layers and models on Flax linen.

Public modules (import them directly; this file imports nothing so that
`import praxis` stays cheap):
  base_layer: BaseLayer (weights with logical axes, children, summaries, aux losses).
  base_hyperparams: Pax-style HParams on Fiddle (configs, templates, instantiate, text).
  optimizers: Adam/AdamW, Adafactor, Sgd (momentum), Lion as configs; build(cfg) -> optax chain
    with global-norm clipping, decoupled weight decay (regex exclusions), lr schedule, EMA.
  pytypes: NestedMap and type aliases.
  schedules: learning-rate schedules (Pax's set: Constant, Linear, Exponential, Cosine,
    PiecewiseConstant, LinearRampupExponentialDecay/CosineDecay, Rsqrt, ...) on optax.
  sharding: mesh axes (replica, data, mdl), make_mesh, the Pax v1 logical-axis rules table,
    logical_to_shardings (abstract train state -> NamedShardings), activate (mesh + rules).
"""

__all__ = ["base_hyperparams", "base_layer", "optimizers", "pytypes", "schedules", "sharding"]
