"""What the NV device's interfaces share: the HCQ object's base class (NVHCQ) and make_device, which builds the Compiled device
of the interface DEV names (iface_mock.py, iface_nvk.py, iface_cuda.py)."""
from __future__ import annotations
from typing import Any
from core.device.allocator import LRUAllocator
from core.device.compiled import Compiled, Program
from core.device.hcq import RingHCQ, RingLayout
from core.device.target import Target
from core.ir.ops import UOp
from plugin_nv import pushbuf as pb

class NVHCQ(RingHCQ):
  """The HCQ side of an NV device: one GPFIFO channel per queue (COMPUTE:0 runs the compute class, COPY:0 the copy engine).

  Core's submit program writes each submit's methods into the channel's pushbuffer ring (`ring`, dword write pointer, a submit
  never wraps: the ring's tail is filled with NOP headers) and stores the new write pointer into `doorbell` (dwords written
  since the channel was created). Turning that into GPFIFO entries is the interface's part (`_publish`): an entry per new
  pushbuffer segment at GP_PUT, GP_PUT in the channel's USERD page, then the channel's work-submit token to the usermode
  doorbell. A subclass provides `queue_buffer(kind, queue)`, `_kick()` (publish and make the channels run), `_busy()` and,
  when it runs kernels in software, `register_program`."""
  queues: tuple[str, ...] = ("COMPUTE:0", "COPY:0")
  kind = "NV"
  arch: str
  timestamp_size = 16   # a TIMESTAMP is a semaphore release with RELEASE_TIMESTAMP: 8 bytes of payload, then the time (ns)

  def __init__(self, device: str, arch: str, ring_size: int = 1 << 20):
    super().__init__(device, ring_size)
    self.arch = arch

  def ring_layout(self, queue: str) -> RingLayout:
    # a GPFIFO entry points at one contiguous segment, so no submit may wrap: the tail is filled with empty method headers
    self._check(queue)
    return RingLayout(unit=4, nop=pb.DMA_NOP)

  def register_program(self, name: str, uops: tuple[UOp, ...], data: Any, image: bytes) -> None:
    """Called by pm_prep_program for each prepared kernel. Hardware runs the image; an interface that runs kernels in software
    (MOCK) files a host build of the kernel under its code."""

def no_direct_path(name: str, lib: bytes) -> Program:
  """The Compiled runtime of every NV interface here: kernels run only through the channels (core's HCQ pipeline)."""
  raise NotImplementedError(f"NV runs kernel {name} only through its GPFIFO channels (core's HCQ pipeline), not one call at a time")

DEFAULT_MOCK_ARCH = "sm_90"

def make_device(name: str, target: Target | None = None) -> Compiled:
  """The Compiled device for DEV=MOCK+NV[:PTX|CUDA[:ARCH]] (default sm_90), NVK+NV[...] (NV means NVK; the arch is the GPU's) or
  CUDA+NV[...]: the interface's allocator and HCQ object (CUDA: its direct runtime), the renderer the DEV string names."""
  from plugin_nv import INTERFACES, make_cuda, make_ptx
  # DEV=NV names no interface: that means the hardware (NVK), never silently the software GPU
  iface = (target.interface if target is not None else None) or "NVK"
  arch = target.arch if target is not None else None
  rname = (target.renderer if target is not None else None) or "PTX"
  if iface not in INTERFACES: raise ValueError(f"NV has no interface {iface!r}; it offers {', '.join(INTERFACES)} (e.g. DEV=MOCK+NV)")
  if rname not in ("PTX", "CUDA"): raise ValueError(f"NV has no renderer {rname!r}; it offers PTX and CUDA")
  if iface == "CUDA":
    from plugin_nv.iface_cuda import make_cuda_device
    return make_cuda_device(name, target, rname, arch)
  allocator: LRUAllocator
  hcq: NVHCQ
  if iface == "MOCK":
    from plugin_nv.iface_mock import open_device
    allocator, hcq = open_device(name, arch or DEFAULT_MOCK_ARCH)
  else:
    from plugin_nv.iface_nvk import open_device as open_nvk
    allocator, hcq = open_nvk(name, arch)
  renderer, compiler = (make_ptx if rname == "PTX" else make_cuda)(hcq.arch)
  renderer.device = name
  return Compiled(name, allocator, renderer, compiler, no_direct_path, target, hcq=hcq)
