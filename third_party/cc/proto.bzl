"""cc_proto: C++ code for .proto files from the system protoc, as a cc_library.

Native proto_library needs @com_google_protobuf (a download); the system protoc matches the system
libprotobuf exactly, so generated code and runtime agree.
"""

def cc_proto(name, srcs = None, visibility = None):
    """Generates `<file>.pb.{h,cc}` for each of `srcs` and a cc_library `name` that compiles them.

    `srcs` defaults to the one file the name stands for: `xplane_cc_proto` compiles `xplane.proto`.
    """
    if srcs == None:
        srcs = [name[:-len("_cc_proto")] + ".proto"]
    stems = [src[:-len(".proto")] for src in srcs]
    native.genrule(
        name = name + "_protoc",
        srcs = srcs,
        outs = [s + ".pb.h" for s in stems] + [s + ".pb.cc" for s in stems],
        cmd = "protoc --proto_path=. --cpp_out=$(GENDIR) $(SRCS)",
        message = "protoc " + " ".join(srcs),
    )
    native.cc_library(
        name = name,
        srcs = [s + ".pb.cc" for s in stems],
        hdrs = [s + ".pb.h" for s in stems],
        deps = ["//third_party/cc:protobuf"],
        visibility = visibility,
    )
