"""Integration and end-to-end tests; run from the repository root."""
