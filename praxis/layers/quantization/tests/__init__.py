"""Helpers for tests of Pax's quantized layers (Pax's praxis.layers.quantization.tests)."""
