"""Experiments, grouped by domain (`lm/`, ...)."""
