"""Repository rule: the local Python interpreter as a Bazel toolchain, plus its C headers."""

load("//third_party/py:interpreter.bzl", "find_python")

_BUILD = """\
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

# The stub shebang names the interpreter: the default `#!/usr/bin/env python3` is not found under
# --incompatible_strict_action_env, whose PATH does not include version managers' shims.
py_runtime(
    name = "py3_runtime",
    interpreter_path = "{exe}",
    python_version = "PY3",
    stub_shebang = "#!{exe}",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":py3_runtime",
)

toolchain(
    name = "toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)

# Python.h and friends, for pybind11 extensions built against this interpreter.
cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
)
"""

def _python_interpreter_impl(rctx):
    python = find_python(rctx)
    rctx.symlink(python.include, "include")
    rctx.file("BUILD.bazel", _BUILD.format(exe = python.exe))
    rctx.file("version.txt", python.version + "\n")

python_interpreter = repository_rule(
    implementation = _python_interpreter_impl,
    environ = ["PYTHON_BIN_PATH", "PATH"],
    local = True,
)
