"""Macros for the project's Python targets: one way to declare a package, a module, its test.

    pax_py_package_library(deps = [], test_deps = [], tests = {})
        A package whose modules are one library (praxis, praxis/layers): the py_library named after
        the directory holds its __init__.py and every other .py file but the tests, with `deps`
        (what the modules import from other packages); and a test for each `*_test.py`, with the
        library and `test_deps`. `tests` maps a test's name to its own attributes (size,
        shard_count, cpu_devices, srcs, main, ...); a name with no such file is an error. Use it for
        a package that no package it imports imports back, so one target can hold it whole: its
        modules import each other freely and no BUILD line lists a module of its own.
        `parent_init = False` leaves out the parent package's target, for a subpackage that its
        parent's library imports (praxis/layers/quantization/sparsity): the parent then lists the
        subpackage in its `deps` and the subpackage's tests list the parent in `test_deps`.
    pax_py_package(deps = [])
        A package whose modules are declared one by one (packages that import each other, such as
        paxml and paxml/data, need a target per module). Declares the package's __init__.py as a
        py_library named after its directory (//paxml/data:data), depending on the parent package's
        __init__ target. List in `deps` the package's own modules when __init__.py imports them (a
        re-exporting package); the package's modules then depend on the parent's __init__ instead,
        which avoids a cycle.
    Both also declare the filegroup `sources` (the package's .py, .cc and .h files) that
    //tools:lint_test checks and the wheels in //wheels ship.
    pax_py_library(name, srcs = [name + ".py"], deps = [], test_deps = [], test_<attr> = ..., ...)
        The module, and its test when `<name>_test.py` exists: one declaration per module. The test
        is a pax_py_test named `<name>_test` with deps `test_deps` (what it imports beyond the
        module's own deps) and each `test_<attr>` passed as `<attr>` (test_size, test_cpu_devices,
        test_data, test_shard_count, ...). Declaring that test again is an error.
    pax_py_binary(name, srcs = [name + ".py"], deps = [], ...)
    pax_py_test(name, srcs = [name + ".py"], deps = [], cpu_devices = 0, ...)
        A test that is not one module's own (integration tests in tests/, a second test of a
        module). `cpu_devices = N` runs the test on N fake CPU devices
        (XLA_FLAGS=--xla_force_host_platform_device_count=N).
        Every test's XLA_FLAGS also holds --xla_backend_optimization_level=0: XLA's CPU backend
        then skips LLVM's optimization passes, which take most of the compile time of the small
        programs tests build (attentions_test 43 s -> 35 s, trainer_test 58 s -> 40 s). Compiled
        code runs slower, which no test measures; benchmarks are binaries and keep the default.

Folded into every target, so BUILD files list only what differs:
  - the package's __init__ target: .bazelrc sets --incompatible_default_to_explicit_init_py, so Bazel
    does not invent __init__.py files and a module's package must be a dependency;
  - @pypi//:absl_py (absltest, flags, logging), @pypi//:jax, @pypi//:numpy and @pypi//:flax: the
    stack nearly every module and test imports (a target that does not import them only gets a
    longer runfiles tree, never an import it did not ask for);
  - for a test `<name>_test`, the library `<name>` when it is declared above it in the same file.
Other third-party deps stay real `@pypi//:name` labels in the BUILD files; a label listed twice is
kept once. A library lists every project and third-party module it imports; a test of a library
lists only what it imports beyond that library's own deps (which it gets through the library).
"""

_COMMON = ["@pypi//:absl_py", "@pypi//:flax", "@pypi//:jax", "@pypi//:numpy"]
_TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"  # See pax_py_test in the docstring.
_REEXPORTS_TAG = "pax_package_reexports"

def _parent_init():
    parts = native.package_name().split("/")
    if len(parts) < 2:
        return []
    return ["//" + "/".join(parts[:-1])]

def _package_init():
    """The __init__ target a module of this package depends on."""
    base = native.package_name().split("/")[-1]
    init = native.existing_rule(base)
    if init and _REEXPORTS_TAG in init.get("tags", []):
        return _parent_init()
    return [":" + base]

def _dedup(labels):
    out = []
    for label in labels:
        if label not in out:
            out.append(label)
    return out

def _module_deps(name, deps):
    base = native.package_name().split("/")[-1]
    if name == base:
        return _dedup(deps + _COMMON)
    return _dedup(deps + _package_init() + _COMMON)

def _sources():
    native.filegroup(
        name = "sources",
        srcs = native.glob(["*.py", "*.cc", "*.h"]),
        visibility = ["//tests:__pkg__", "//tools:__pkg__", "//wheels:__pkg__"],  # tests: import_layers_test
    )

def pax_py_package(deps = [], **kwargs):
    """The package's __init__.py; see the file's docstring."""
    name = native.package_name().split("/")[-1]
    tags = kwargs.pop("tags", [])
    if [d for d in deps if d.startswith(":")]:
        tags = tags + [_REEXPORTS_TAG]
    native.py_library(
        name = name,
        srcs = ["__init__.py"],
        deps = _dedup(_parent_init() + deps),
        tags = tags,
        **kwargs
    )
    _sources()

def pax_py_package_library(deps = [], test_deps = [], tests = {}, parent_init = True):
    """The package's modules as one library, and its tests; see the file's docstring."""
    name = native.package_name().split("/")[-1]
    native.py_library(
        name = name,
        srcs = native.glob(["*.py"], exclude = ["*_test.py"]),
        deps = _dedup((_parent_init() if parent_init else []) + deps + _COMMON),
    )
    _sources()
    found = [f[:-len(".py")] for f in native.glob(["*_test.py"])]
    for test in tests:
        if test not in found:
            fail("tests[\"%s\"]: there is no %s.py in %s" % (test, test, native.package_name()))
    for test in found:
        attrs = dict(tests.get(test, {}))
        pax_py_test(name = test, deps = test_deps + attrs.pop("deps", []), **attrs)

def pax_py_library(name, srcs = None, deps = [], test_deps = [], **kwargs):
    """The module `name`.py; and its test `name`_test.py, when that file exists (see the docstring)."""
    test_kwargs = {k[len("test_"):]: kwargs.pop(k) for k in list(kwargs) if k.startswith("test_")}
    native.py_library(
        name = name,
        srcs = srcs if srcs != None else [name + ".py"],
        deps = _module_deps(name, deps),
        **kwargs
    )
    test = name + "_test"
    if native.glob([test + ".py"]):
        if native.existing_rule(test):
            fail("%s is declared twice: pax_py_library(name = \"%s\") declares it; " % (test, name) +
                 "move its deps and attributes there as test_deps / test_<attribute>.")
        pax_py_test(name = test, deps = test_deps, **test_kwargs)
    elif test_deps or test_kwargs:
        fail("pax_py_library(name = \"%s\") has test_ attributes but no %s.py" % (name, test))

def pax_py_binary(name, srcs = None, deps = [], **kwargs):
    native.py_binary(
        name = name,
        srcs = srcs if srcs != None else [name + ".py"],
        deps = _module_deps(name, deps),
        **kwargs
    )

def pax_py_test(name, srcs = None, deps = [], cpu_devices = 0, env = {}, **kwargs):
    """A test that is not one module's own test (those come with pax_py_library)."""
    if native.existing_rule(name):
        fail("%s is declared twice: the pax_py_library above it declares %s.py as its test; " % (name, name) +
             "move this rule's deps and attributes there as test_deps / test_<attribute>.")
    xla_flags = [_TEST_XLA_FLAGS]
    if cpu_devices:
        xla_flags.append("--xla_force_host_platform_device_count=%d" % cpu_devices)
    env = dict(env)
    env["XLA_FLAGS"] = " ".join(xla_flags)
    under_test = []
    if name.endswith("_test") and native.existing_rule(name[:-len("_test")]):
        under_test = [":" + name[:-len("_test")]]
    native.py_test(
        name = name,
        srcs = srcs if srcs != None else [name + ".py"],
        deps = _module_deps(name, deps + under_test),
        env = env,
        **kwargs
    )
