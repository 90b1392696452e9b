"""The KGSL+QCOM interface: the Adreno kernel driver. What is written: the driver calls (kgsl.py layouts: GPU object alloc and
map, context create, command submission as indirect buffers, timestamps) in `KGSLDriver`. What is not: reading the program
binaries Qualcomm's OpenCL compiler makes (the shader code, register footprint and argument slots prep.py would take from them),
so opening the device says so. Untested on hardware (no Adreno here)."""
from __future__ import annotations
import ctypes, fcntl, mmap, os
from typing import Any
from core.device.compiled import Compiled
from core.device.target import Target
from plugin_qcom import kgsl

NODE = "/dev/kgsl-3d0"

class KGSLDriver:
  """One open /dev/kgsl-3d0 with a draw context: the ioctls core's HCQ pipeline needs (allocate and map memory, submit a range
  of the ring as an indirect buffer, wait for a context timestamp)."""
  def __init__(self, node: str = NODE):
    self.fd = os.open(node, os.O_RDWR | os.O_CLOEXEC)
    req = kgsl.kgsl_drawctxt_create(flags=kgsl.context_flags())
    self.ioctl(kgsl.IOCTL_KGSL_DRAWCTXT_CREATE, req)
    self.context = req.drawctxt_id

  def ioctl(self, nr: int, arg: ctypes.Structure) -> None:
    fcntl.ioctl(self.fd, nr, arg)   # type: ignore[call-overload]

  def alloc(self, size: int) -> tuple[int, int, Any]:
    """(GPU address, object id, host mapping) of a new write-back, CPU-mapped GPU object."""
    req = kgsl.kgsl_gpuobj_alloc(size=size, flags=kgsl.KGSL_MEMFLAGS_USE_CPU_MAP | kgsl.KGSL_CACHEMODE_WRITEBACK << kgsl.KGSL_CACHEMODE_SHIFT)
    self.ioctl(kgsl.IOCTL_KGSL_GPUOBJ_ALLOC, req)
    info = kgsl.kgsl_gpuobj_info(id=req.id)
    self.ioctl(kgsl.IOCTL_KGSL_GPUOBJ_INFO, info)
    # KGSL maps an object at the offset id << 12 of the device file
    m = mmap.mmap(self.fd, req.mmapsize, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=req.id << 12)
    return info.gpuaddr, req.id, m

  def free(self, obj_id: int) -> None: self.ioctl(kgsl.IOCTL_KGSL_GPUOBJ_FREE, kgsl.kgsl_gpuobj_free(id=obj_id))

  def submit(self, ranges: list[tuple[int, int]]) -> int:
    """Submits (GPU address, bytes) ranges of command words as indirect buffers; returns the context timestamp they retire at."""
    cmd, keep = kgsl.gpu_command(self.context, [kgsl.ib_command(a, n) for a, n in ranges])
    self.ioctl(kgsl.IOCTL_KGSL_GPU_COMMAND, cmd)
    del keep
    return cmd.timestamp

  def wait(self, timestamp: int, timeout_ms: int) -> None:
    self.ioctl(kgsl.IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID,
               kgsl.kgsl_device_waittimestamp_ctxtid(context_id=self.context, timestamp=timestamp, timeout=timeout_ms))

def open_device(name: str, target: Target | None) -> Compiled:
  if not os.path.exists(NODE):
    raise RuntimeError(f"{name}: no Adreno kernel driver ({NODE} does not exist). Use DEV=CL+QCOM (any OpenCL driver) or "
                       "DEV=MOCK+QCOM (the software command processor)")
  raise NotImplementedError(f"{name}: KGSL+QCOM is not finished: the driver calls are written (plugin_qcom/iface_kgsl.py, untested on "
                            "hardware) but reading the program binaries of Qualcomm's OpenCL compiler is not. Use DEV=CL+QCOM for now")
