"""Pax's `paxml.tools.fiddle`: passes over Fiddle configs of Pax models.

remove_sharding     drops (or resets to defaults) the layers' sharding annotations
unshare_sharding    gives every sharding annotation its own copy (no shared sub-objects)
wrap_nested_maps    replaces NestedMap values by configs that build them
"""
