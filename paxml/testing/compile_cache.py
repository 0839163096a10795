"""One XLA compilation cache per test run, shared by the test process and its children.

Tests that train the same tiny model several times (a run, then a resume, an eval job, a
damaged copy trained again, `python -m paxml.main` children) compile the same programs again
each time: a new `jax.jit` of a new `functools.partial` misses JAX's in-memory caches. JAX's
persistent compilation cache is keyed by the program and the compile options, so the second
compile of an identical program is a read from disk; a program that differs in anything
compiles as before. What a test checks does not change: every run still traces, lowers and
executes its programs.

`use_for_this_test()` at the top of a test module, before anything compiles (JAX decides
whether to use the cache at its first compile): the cache lives in the test's TEST_TMPDIR (a
new directory outside Bazel), so no test run reads another's entries, and the environment
carries it to every child process the test starts.
"""

import os
import sys
import tempfile


def use_for_this_test() -> str:
  """Turns on the persistent compilation cache for this process and its children; returns its
  directory."""
  test_tmpdir = os.environ.get("TEST_TMPDIR")
  directory = (
    os.path.join(test_tmpdir, "jax_compilation_cache") if test_tmpdir else tempfile.mkdtemp()
  )
  settings = {
    "jax_compilation_cache_dir": directory,
    # Every program, however quick its compile: the tests' tiny programs compile in well under
    # the default threshold of 1 s, and together they are most of a run.
    "jax_persistent_cache_min_compile_time_secs": 0.0,
  }
  for name, value in settings.items():
    # JAX reads its settings from the environment when it is imported: this process, if it has
    # not imported JAX yet, and every child process.
    os.environ[name.upper()] = str(value)
    if "jax" in sys.modules:
      sys.modules["jax"].config.update(name, value)
  return directory
