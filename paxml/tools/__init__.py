"""Command-line tools that ship with paxml (`bazel run //paxml/tools:<name> -- ...`)."""
