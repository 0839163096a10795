"""hostenv: what the host process gives every package here, beneath praxis, paxml, profiling and t5.

Named for what it holds and nothing else: facts of the process a program runs in (the directory the
user typed a command in, TensorFlow's start-up noise on file descriptor 2), no model or training code.
Every other package may import it; it imports none of them, so it stays the bottom of the layering
that tests/import_layers_test.py checks.

Modules:
  user_paths: `resolve()`, command-line paths against the directory `bazel run` started in.
  quiet_tensorflow: `import_tensorflow()`, TensorFlow without its start-up notices and with no GPU.
"""

__all__ = ["quiet_tensorflow", "user_paths"]
