"""Language-model experiments; registered experiment classes live in `params/`.

Modules (Pax's paths):
  model_params: Pax's LM base experiments (TransformerLmSpmdAdafactor, ...Pipeline..., PmapAdam,
    c4's TransformerLmSpmdAdam, ClassificationModelAdam), re-exporting the helpers.
  lm_settings: Pax's helpers (set_default_adam, set_default_adafactor,
    set_sharding_annotations_v1, set_adam_and_learning_rate_schedule, num_heads, ...).
  input_generator: Pax's SyntheticLmData.
  progression_lm: small_language_model and ProgressionLm (the demo and test LMs).
  kjv_seqio_tasks: SeqIO tasks over the KJV.
"""
