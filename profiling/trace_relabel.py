"""Test helper: makes a CPU trace readable by jaxlib's converter, which reads only device planes.

XLA's CPU thunks record the same hlo_op / hlo_module stats on /host:CPU events as GPU kernels do on
/device:GPU:N, so renaming the plane gives jaxlib's converter (and ours in its default mode) a real
trace of a real compiled module to read.
"""

from __future__ import annotations

from tensorflow.compiler.xla.service import hlo_pb2
from tensorflow.tsl.profiler.protobuf import xplane_pb2

HOST_PLANE_NAME = "/host:CPU"
_METADATA_PLANE_NAME = "/host:metadata"


def relabel(
  xspace_bytes: bytes,
  plane_name: str,
  fingerprint: str | None = None,
  module_substring: str = "train_step",
) -> bytes:
  """Renames the /host:CPU plane `plane_name`; with `fingerprint`, tags the module as XLA's GPU scheduler would.

  The fingerprint goes into the entry root's `fingerprint_before_lhs` frontend attribute of each
  HloProto in /host:metadata whose module name contains `module_substring`, so that converters
  name its instructions `<fingerprint>::<instruction>`.
  """
  space = xplane_pb2.XSpace.FromString(xspace_bytes)
  for plane in space.planes:
    if plane.name == HOST_PLANE_NAME:
      plane.name = plane_name
    if plane.name == _METADATA_PLANE_NAME and fingerprint:
      for metadata in plane.event_metadata.values():
        for stat in metadata.stats:
          if stat.WhichOneof("value") != "bytes_value":
            continue
          hlo = hlo_pb2.HloProto.FromString(stat.bytes_value)
          if module_substring not in hlo.hlo_module.name:
            continue
          (entry,) = [
            c for c in hlo.hlo_module.computations if c.id == hlo.hlo_module.entry_computation_id
          ]
          (root,) = [i for i in entry.instructions if i.id == entry.root_id]
          root.frontend_attributes.map["fingerprint_before_lhs"] = fingerprint
          stat.bytes_value = hlo.SerializeToString()
  return space.SerializeToString()
