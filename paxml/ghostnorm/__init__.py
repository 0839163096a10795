"""Pax's `paxml.ghostnorm`: layers that report per-example gradient norms (DP-SGD ghost clipping)."""
