"""Registered language-model experiments.

Modules (each registers its classes with `experiment_registry` on import):
  demo: `DemoLm`, a tiny LM on synthetic data that trains in a minute or two.
"""

__all__ = ["demo"]
