"""Test fixtures shared by the whole tree: use these instead of writing another copy.

tiny_lm (tiny_lm.py): `tiny_language_model()`, a one-layer, 32-wide praxis LanguageModel over
  16 tokens, and `TinyLm`, the experiment that trains it on synthetic progressions in seconds.
event_files (event_files.py): reading TensorBoard event files back: `read_scalars`,
  `read_tensors`, `tags`, `scalars_by_file`.
binaries (binaries.py): `run("paxml/main", ...)` starts a `bazel run` target from a test's
  runfiles, as the docs' commands do; `run_main(...)` runs `python -m paxml.main` with the
  test's own imports (experiments the test registers included).
save_then_exit (save_then_exit.py): `run_child(...)` runs a test's save code in a child process
  that then returns, raises or dies of SIGTERM (`ENDINGS`), for the restore-after-exit tests.
compile_cache (compile_cache.py): `use_for_this_test()` shares compiled XLA programs between the
  runs of one test and its child processes (JAX's persistent compilation cache in TEST_TMPDIR).
kjv_file (kjv_file.py): `write_kjv(path, chapters)`, a small generated corpus in the KJV
  file's format, for the data tests.
"""
