"""Repository rule: an English text corpus built from pinned Debian packages.

`debian_corpus` downloads each package with `apt-get download NAME=VERSION` (no root needed),
checks its sha256 against the pinned value, unpacks it with `dpkg-deb -x`, runs `command` in the
unpacked tree to write the text file `output`, checks that file's sha256 too, and exposes it as
`@<name>//:<target>`. Nothing is committed to the repository; the text is built once per output
base and cached by Bazel like any external repository.

The default corpus is the King James Bible (1611; public domain) from Debian's `bible-kjv-text`
(the text in the Bible Retrieval System's compressed format) and `bible-kjv` (the `bible` program
that decompresses it). Why this text: see paxml/data/README.md.
"""

def _run(rctx, args, what, timeout = 600):
    result = rctx.execute(args, timeout = timeout)
    if result.return_code != 0:
        fail("corpus: %s failed (exit %d): %s\n%s%s" % (
            what,
            result.return_code,
            " ".join(args),
            result.stdout,
            result.stderr,
        ))
    return result

def _sha256(rctx, path):
    return _run(rctx, ["sha256sum", str(path)], "hashing %s" % path).stdout.split(" ")[0]

def _debian_corpus_impl(rctx):
    for tool in ["apt-get", "dpkg-deb", "sha256sum"]:
        if rctx.which(tool) == None:
            fail(("corpus: `%s` not found on PATH. The corpus is built from Debian packages " +
                  "and needs Debian's apt-get and dpkg-deb.") % tool)
    for spec, want in rctx.attr.packages.items():
        name, _, version = spec.partition("=")
        result = rctx.execute(["apt-get", "download", spec], timeout = 600)
        if result.return_code != 0:
            fail(("corpus: `apt-get download %s` failed (exit %d):\n%s\n" +
                  "It needs the Debian mirror and current package lists: run `apt-get update` " +
                  "(as root) and try again.") % (spec, result.return_code, result.stderr))
        debs = [f for f in rctx.path(".").readdir() if f.basename.startswith(name + "_" + version + "_") and
                f.basename.endswith(".deb")]
        if len(debs) != 1:
            fail("corpus: expected one %s_%s_*.deb after apt-get download, found %s" % (
                name,
                version,
                [str(d.basename) for d in debs],
            ))
        got = _sha256(rctx, debs[0])
        if got != want:
            fail(("corpus: %s has sha256 %s, expected %s (pinned in WORKSPACE). The mirror " +
                  "served a different file; if Debian rebuilt the package, check it and update " +
                  "the pin.") % (debs[0].basename, got, want))
        _run(rctx, ["dpkg-deb", "-x", str(debs[0]), "root"], "unpacking %s" % debs[0].basename)
        rctx.delete(debs[0])

    result = _run(rctx, rctx.attr.command, "making %s" % rctx.attr.output)
    rctx.file(rctx.attr.output, result.stdout, executable = False)
    got = _sha256(rctx, rctx.path(rctx.attr.output))
    if rctx.attr.output_sha256 and got != rctx.attr.output_sha256:
        fail("corpus: %s has sha256 %s, expected %s: the unpacking command's output changed." % (
            rctx.attr.output,
            got,
            rctx.attr.output_sha256,
        ))
    rctx.delete("root")
    rctx.file("BUILD", """package(default_visibility = ["//visibility:public"])

filegroup(
    name = "{target}",
    srcs = ["{output}"],
)
""".format(target = rctx.attr.target, output = rctx.attr.output))

debian_corpus = repository_rule(
    implementation = _debian_corpus_impl,
    attrs = {
        "packages": attr.string_dict(
            mandatory = True,
            doc = "NAME=VERSION -> sha256 of the .deb that `apt-get download` fetches.",
        ),
        "command": attr.string_list(
            mandatory = True,
            doc = "Run in the repository directory after unpacking into root/; its stdout is the text.",
        ),
        "output": attr.string(mandatory = True, doc = "File name of the text."),
        "output_sha256": attr.string(doc = "Expected sha256 of the text (empty: not checked)."),
        "target": attr.string(mandatory = True, doc = "Name of the filegroup holding the text."),
    },
)
