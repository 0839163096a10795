"""pybind_extension: a Python extension module built from C++ with pybind11."""

def pybind_extension(name, srcs, deps = [], visibility = None):
    """Builds `<name>.so` (importable as `name`) and a py_library `name` that carries it.

    The module is linked as one shared object with its C++ deps inside it (linkstatic), so Python
    finds no other first-party .so to load; system libraries (libprotobuf) stay dynamic.
    """
    native.cc_binary(
        name = name + ".so",
        srcs = srcs,
        copts = ["-fvisibility=hidden", "-fexceptions"],
        linkshared = True,
        linkstatic = True,
        deps = deps + [
            "@pypi//:pybind11_headers",
            "@python_interpreter//:headers",
        ],
    )
    native.py_library(
        name = name,
        data = [":" + name + ".so"],
        visibility = visibility,
    )
