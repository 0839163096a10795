"""pybind_extension: a Python extension module built from C++ with pybind11."""

def pybind_extension(name, srcs, deps = [], visibility = None):
    """Builds the shared object `native/<name>.so` from `srcs` (PYBIND11_MODULE(<name>, m)).

    It sits in `native/` so that Python never imports it by itself under the module's name: the
    package's `<name>.py` loads it (with the dlopen flags it needs) and becomes it; declare that
    py_library with `data = ["native/<name>.so"]`. The module is linked as one shared object with
    its C++ deps inside it (linkstatic), so Python finds no other first-party .so to load; system
    libraries (libprotobuf) stay dynamic.
    """
    native.cc_binary(
        name = "native/" + name + ".so",
        srcs = srcs,
        copts = ["-fvisibility=hidden", "-fexceptions"],
        linkshared = True,
        linkstatic = True,
        deps = deps + [
            "@pypi//:pybind11_headers",
            "@python_interpreter//:headers",
        ],
        visibility = visibility,
    )
