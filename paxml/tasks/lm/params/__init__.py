"""Registered language-model experiments.

Modules (each registers its classes with `experiment_registry` on import):
  demo: `DemoLm`, a small LM on the King James Bible (prepared on first use) that trains in
    about two minutes on CPU; `SyntheticDemoLm`, a tiny LM on synthetic data (seconds).
  seqio_demo: `SeqIODemoLm`, DemoLm on SeqIO tasks over the KJV with SeqIO eval metrics.
  lm_cloud, c4, c4_multislice: every LM experiment of Pax's files of those names, with Pax's
    names, classes and values.
"""

__all__ = ["c4", "c4_multislice", "demo", "lm_cloud", "seqio_demo"]
