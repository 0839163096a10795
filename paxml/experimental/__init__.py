"""Pax's `paxml.experimental`: nested_map_config_helper (NestedMaps built from plain dicts in
Fiddle configs)."""
