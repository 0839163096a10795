"""Finds the Python interpreter that every repository rule and test in this repo uses."""

_PROBE = """
import os, sys, sysconfig
print(os.path.realpath(sys.executable))
print(sysconfig.get_paths()["include"])
print("%d.%d" % sys.version_info[:2])
"""

def find_python(rctx):
    """Returns struct(exe, include, version) for `$PYTHON_BIN_PATH` or the first `python3` on PATH.

    The executable is resolved through symlinks and version-manager shims (pyenv's `python3` is a shell
    script), because the py_binary stub is started with this exact path as its shebang.
    """
    candidate = rctx.os.environ.get("PYTHON_BIN_PATH") or rctx.which("python3")
    if not candidate:
        fail("No python3 found on PATH. Install Python 3.11+ or set PYTHON_BIN_PATH to an interpreter.")
    result = rctx.execute([candidate, "-c", _PROBE])
    if result.return_code != 0:
        fail("Could not run %s to inspect it:\n%s" % (candidate, result.stderr))
    exe, include, version = result.stdout.strip().split("\n")
    return struct(exe = exe, include = include, version = version)
