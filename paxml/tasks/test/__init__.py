"""Pax's `paxml.tasks.test`: experiments registered for tests (synthetic.py)."""
