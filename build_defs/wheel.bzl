"""py_wheel: a pip-installable wheel of first-party Python packages, assembled from Bazel targets.

    py_wheel(
        name = "praxis",
        distribution = "praxis",
        packages = ["praxis"],          # top-level import names this wheel ships
        deps = ["//praxis", "//praxis/layers"],
        wheels = [],                    # project wheels whose packages these targets import
        ...
    )

The wheel holds every runfile of `deps` that lies under `packages` (the modules, and data such as a
compiled extension) and every .py file of `srcs` (the packages' `:sources` globs, build_defs/py.bzl),
minus `exclude`, tests and build leftovers (build_defs/make_wheel.py). Nothing lists the modules
again: a module added to a listed package is in the next wheel. A runfile of the main
repository under no package of this wheel or of `wheels` is an error (it would be missing when
installed). Requires-Dist comes from the graph too: the `@pypi` labels that this wheel's own targets
depend on, at the lock's versions (make_wheel.py says which are kept and the ranges). testonly
targets cannot be deps, so test helpers never reach a wheel.

Output: the directory `<name>/` holding the one `.whl` (its file name carries tags that are known
only when the tool runs: a wheel with an extension is tagged for the interpreter that built it).
The target's runfiles are the `@pypi` distributions its targets depend on, for tests that install
the wheel next to the pinned stack.
"""

PyWheelInfo = provider(
    doc = "A project wheel that other wheels can require.",
    fields = ["distribution", "packages"],
)

_DepsInfo = provider(
    doc = "What the aspect learnt below a target.",
    fields = {
        "self": "for a @pypi target: struct(name, modules), its label name and top-level modules",
        "uses": "depset of struct(package, name, modules): a main-repo target's @pypi deps",
        "pypi_files": "depset of the runfiles of those @pypi deps",
    },
)

def _top_level_modules(target, ctx):
    """Import names a @pypi distribution provides: the first path part under site/ of its data."""
    modules = {}
    for data in getattr(ctx.rule.attr, "data", []):
        for f in data.files.to_list():
            path = f.short_path
            if "/site/" not in path:
                continue  # The RECORD stamp.
            top = path.split("/site/", 1)[1].split("/")[0]
            if top.endswith((".dist-info", ".libs", ".data", ".pth")):
                continue
            modules[top.split(".")[0]] = True
    return struct(name = target.label.name, modules = sorted(modules.keys()))

def _deps_aspect_impl(target, ctx):
    deps = [d for d in getattr(ctx.rule.attr, "deps", []) if _DepsInfo in d]
    uses = []
    pypi_files = []
    if target.label.workspace_name == "":
        for dep in deps:
            if dep[_DepsInfo].self:
                info = dep[_DepsInfo].self
                uses.append(struct(package = target.label.package, name = info.name, modules = info.modules))
                pypi_files.append(dep[DefaultInfo].default_runfiles.files)
    return [_DepsInfo(
        self = _top_level_modules(target, ctx) if target.label.workspace_name == "pypi" else None,
        uses = depset(uses, transitive = [d[_DepsInfo].uses for d in deps]),
        pypi_files = depset(transitive = pypi_files + [d[_DepsInfo].pypi_files for d in deps]),
    )]

_deps_aspect = aspect(
    implementation = _deps_aspect_impl,
    attr_aspects = ["deps"],
)

def _top(short_path):
    return short_path.split("/")[0]

def _py_wheel_impl(ctx):
    own = ctx.attr.packages
    others = {}
    for wheel in ctx.attr.wheels:
        for package in wheel[PyWheelInfo].packages:
            others[package] = wheel[PyWheelInfo].distribution

    files = {}
    for src in ctx.files.srcs:
        if src.short_path.endswith(".py") and _top(src.short_path) in own:
            files[src.short_path] = src
    for dep in ctx.attr.deps:
        # A py_binary's runfiles hold its launcher script, which is no module.
        launcher = dep[DefaultInfo].files_to_run.executable
        for f in dep[DefaultInfo].default_runfiles.files.to_list():
            if f.short_path.startswith("../") or f == launcher:
                continue  # Another repository (@pypi, @corpus): not ours to ship.
            top = _top(f.short_path)
            if top in own:
                files[f.short_path] = f
            elif top not in others:
                fail(("%s reaches %s, which is in no package of this wheel (%s) nor of its `wheels`; " +
                      "add its top-level package to `packages` or the wheel that ships it to `wheels`.") %
                     (ctx.label, f.short_path, own))
    for path in ctx.attr.exclude:
        if path not in files:
            fail("%s: exclude names %s, which the wheel would not hold anyway; drop it." % (ctx.label, path))
        files.pop(path)

    pypi = {}
    for dep in ctx.attr.deps:
        for use in dep[_DepsInfo].uses.to_list():
            if _top(use.package) in own:
                pypi[use.name] = use.modules

    spec = struct(
        distribution = ctx.attr.distribution,
        version = ctx.attr.version,
        summary = ctx.attr.summary,
        license = ctx.attr.license,
        classifiers = ctx.attr.classifiers,
        requires_python = ctx.attr.requires_python,
        readme = ctx.file.readme.path if ctx.file.readme else None,
        license_file = ctx.file.license_file.path if ctx.file.license_file else None,
        packages = own,
        files = [[files[p].path, p] for p in sorted(files)],
        pypi = [struct(name = n, modules = pypi[n]) for n in sorted(pypi)],
        wheels = [struct(distribution = w[PyWheelInfo].distribution) for w in ctx.attr.wheels],
        lock = ctx.file.lock.path,
        entry_points = {"console_scripts": ctx.attr.console_scripts} if ctx.attr.console_scripts else {},
        platform_specific = ctx.attr.platform_specific,
    )
    spec_file = ctx.actions.declare_file(ctx.label.name + ".wheel.json")
    ctx.actions.write(spec_file, spec.to_json())

    out = ctx.actions.declare_directory(ctx.label.name)
    inputs = [spec_file, ctx.file.lock] + files.values()
    inputs += [f for f in [ctx.file.readme, ctx.file.license_file] if f]
    ctx.actions.run(
        executable = ctx.executable._tool,
        arguments = [spec_file.path, out.path],
        inputs = inputs,
        outputs = [out],
        mnemonic = "PyWheel",
        progress_message = "Building the %s wheel" % ctx.attr.distribution,
    )
    pypi_files = depset(transitive = [d[_DepsInfo].pypi_files for d in ctx.attr.deps])
    return [
        # The wheel itself is a runfile too: a target with this in `data` finds it there.
        DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out], transitive_files = pypi_files)),
        PyWheelInfo(distribution = ctx.attr.distribution, packages = own),
    ]

py_wheel = rule(
    implementation = _py_wheel_impl,
    attrs = {
        "distribution": attr.string(mandatory = True, doc = "The name pip knows it by."),
        "version": attr.string(mandatory = True),
        "packages": attr.string_list(mandatory = True, doc = "Top-level import names it ships."),
        "deps": attr.label_list(aspects = [_deps_aspect], doc = "Library targets whose runfiles it ships."),
        "srcs": attr.label_list(
            allow_files = True,
            doc = "Packages' `:sources` globs: their .py files ship even if no target in deps reaches them.",
        ),
        "exclude": attr.string_list(doc = "Paths (as in the wheel) not to ship: testonly helpers among srcs."),
        "wheels": attr.label_list(providers = [PyWheelInfo], doc = "Project wheels it requires."),
        "summary": attr.string(mandatory = True),
        "license": attr.string(default = "Apache-2.0"),
        "classifiers": attr.string_list(),
        "requires_python": attr.string(default = ">=3.11"),
        "readme": attr.label(allow_single_file = [".md"], doc = "The long description."),
        "license_file": attr.label(allow_single_file = True),
        "console_scripts": attr.string_dict(doc = "Command name -> module:function."),
        "platform_specific": attr.bool(doc = "True when it ships a compiled extension."),
        "lock": attr.label(
            default = "//third_party/py:requirements_lock.txt",
            allow_single_file = True,
        ),
        "_tool": attr.label(
            default = "//build_defs:make_wheel",
            executable = True,
            cfg = "exec",
        ),
    },
)

def pax_wheel(name, **kwargs):
    """py_wheel with this repo's license, README and classifiers (wheels/BUILD)."""
    py_wheel(
        name = name,
        classifiers = [
            "License :: OSI Approved :: Apache Software License",
            "Operating System :: POSIX :: Linux",
            "Programming Language :: Python :: 3.11",
            "Topic :: Scientific/Engineering :: Artificial Intelligence",
        ],
        license_file = "//:LICENSE",
        readme = "//:README.md",
        **kwargs
    )
