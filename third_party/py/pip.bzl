"""Repository rule: installs the hashed lock with pip and exposes one py_library per distribution."""

load("//third_party/py:interpreter.bzl", "find_python")

def _pip_repository_impl(rctx):
    python = find_python(rctx)
    lock = rctx.path(rctx.attr.requirements_lock)
    count = len([l for l in rctx.read(lock).split("\n") if l and l[0].isalnum()])
    rctx.report_progress("pip: installing %d pinned packages from %s" % (count, rctx.attr.requirements_lock.name))

    # --require-hashes makes pip refuse any file whose sha256 is not in the lock, and --no-deps keeps it
    # from resolving anything on its own: what gets installed is exactly the lock, or the fetch fails.
    result = rctx.execute(
        [
            python.exe, "-m", "pip", "install",
            "--no-deps", "--require-hashes", "--only-binary=:all:",
            # promise (tensorflow-datasets needs it, seqio needs tensorflow-datasets) is published
            # only as an sdist; pip builds that one pure-Python package, hash-checked like the rest.
            "--no-binary=promise",
            "--no-input", "--disable-pip-version-check", "--quiet",
            "--target", "site",
            "-r", str(lock),
        ],
        timeout = 3600,
    )
    if result.return_code != 0:
        # pip warns once per package about unusable find-links/index entries of the local pip config;
        # keep them out of the way of the error that matters (a hash mismatch, a missing wheel).
        errors = [l for l in result.stderr.split("\n") if not l.startswith("WARNING: Location ")]
        fail("pip install of %s failed (exit %d):\n%s" % (
            rctx.attr.requirements_lock, result.return_code, "\n".join(errors)))

    rctx.report_progress("pip: generating BUILD targets")
    result = rctx.execute([python.exe, rctx.path(rctx.attr._generator), "site"])
    if result.return_code != 0:
        fail("Generating @%s BUILD failed:\n%s%s" % (rctx.name, result.stdout, result.stderr))

pip_repository = repository_rule(
    implementation = _pip_repository_impl,
    attrs = {
        "requirements_lock": attr.label(allow_single_file = True, mandatory = True),
        "_generator": attr.label(default = "//third_party/py:generate_build.py", allow_single_file = True),
    },
    environ = ["PYTHON_BIN_PATH"],
)
