"""Repository rule: a Bazel repository that a Debian package installs, with a clear error if it is absent."""

def _system_repository_impl(rctx):
    source = rctx.path(rctx.attr.path)
    if not source.exists:
        fail("%s not found: install the Debian package %s (./bazelw does this)." % (
            rctx.attr.path, rctx.attr.debian_package))
    for child in source.readdir():
        rctx.symlink(child, child.basename)

system_repository = repository_rule(
    implementation = _system_repository_impl,
    attrs = {
        "path": attr.string(mandatory = True),
        "debian_package": attr.string(mandatory = True),
    },
    local = True,
)
