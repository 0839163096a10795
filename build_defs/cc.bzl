"""Macros for the PGLE C++ targets (profiling/cc): a module is `<name>.cc` + `<name>.h`, its test
`<name>_test.cc` on gtest.

    pax_cc_library(name, srcs = [name + ".cc"], hdrs = [name + ".h"], deps = [], ...)
    pax_cc_test(name, srcs = [name + ".cc"], deps = [], ...)

Folded in: every module and test depends on errors.h (PgleError, the one error type the Python
binding turns into exceptions); a test also on gtest_main and, when `<name>_test` has a library
`<name>` declared above it in the same BUILD file, on that library.
"""

_ERRORS = "//profiling/cc:errors"
_GTEST_MAIN = "//third_party/cc:gtest_main"

def _dedup(labels):
    out = []
    for label in labels:
        if label not in out:
            out.append(label)
    return out

def pax_cc_library(name, srcs = None, hdrs = None, deps = [], **kwargs):
    native.cc_library(
        name = name,
        srcs = srcs if srcs != None else [name + ".cc"],
        hdrs = hdrs if hdrs != None else [name + ".h"],
        deps = _dedup(deps + [_ERRORS]),
        **kwargs
    )

def pax_cc_test(name, srcs = None, deps = [], **kwargs):
    under_test = []
    if name.endswith("_test") and native.existing_rule(name[:-len("_test")]):
        under_test = [":" + name[:-len("_test")]]
    native.cc_test(
        name = name,
        srcs = srcs if srcs != None else [name + ".cc"],
        deps = _dedup(deps + under_test + [_ERRORS, _GTEST_MAIN]),
        **kwargs
    )
