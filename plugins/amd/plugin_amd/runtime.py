"""What the AMD device's interfaces share: the HCQ object's base class (AMDHCQ), the runtime stub for direct calls, and
make_device, which builds the Compiled device of the interface DEV names (iface_kfd.py, iface_mock.py)."""
from __future__ import annotations
from typing import Any
from core.device.allocator import LRUAllocator
from core.device.compiled import Compiled, Program
from core.device.hcq import HCQDevice, RingHCQ, RingLayout, handle_addr
from core.device.target import Target
from core.hcq.queue_ir import placeholder
from core.ir.ops import UOp
from plugin_amd import INTERFACES, sdma

class AMDHCQ(RingHCQ):
  """The HCQ side of an AMD device, what its interfaces share beyond core's RingHCQ: the rings' layouts (PM4 compute queues count
  dwords, SDMA engines bytes), scratch, and the arch lower.py encodes for. An interface's subclass provides `queue_buffer(kind,
  queue)`, `_kick()`, `_busy()` and, when it runs kernels in software, `register_program`."""
  queues: tuple[str, ...] = ("COMPUTE:0", "COPY:0")
  kind = "AMD"     # named in fault reports
  arch: str        # the LLVM arch name, e.g. "gfx1100": which PM4/SDMA encodings lower.py emits

  def __init__(self, device: str, arch: str, ring_size: int = 1 << 20):
    super().__init__(device, ring_size)
    self.arch = arch
    self.scratch = placeholder("scratch", device, 1 << 16)   # lower.py points COMPUTE_DISPATCH_SCRATCH_BASE here

  def tmpring_size(self, scratch: int) -> int:
    """COMPUTE_TMPRING_SIZE for `scratch` bytes per work-item: WAVES [11:0], WAVESIZE [24:12] in 256-dword units."""
    return 1 | ((scratch * 64 + 1023) // 1024) << 12

  def ring_layout(self, queue: str) -> RingLayout:
    # a PM4 compute queue's write pointer counts dwords. An SDMA engine's counts bytes, and it does not follow a packet across
    # the ring's end: the tail is filled with one-dword NOPs and the submit starts again at the ring's start
    self._check(queue)
    return RingLayout(unit=4) if queue.startswith("COMPUTE") else RingLayout(unit=1, nop=sdma.NOP_DWORD)

  def register_program(self, name: str, uops: tuple[UOp, ...], data: Any, image: bytes) -> None:
    """Called by pm_prep_program for each prepared kernel (`uops`: its linearized uops, `data`: its AMDProgramData, `image`:
    the relocated code object). Real hardware runs the image and needs nothing here; an interface that runs kernels in
    software (MOCK, the simulated KFD driver) files a host build of the kernel under its code."""

def timeline_signal_addrs(hcq: HCQDevice | None) -> list[tuple[int, int]]:
  """(address, bytes) of each timeline signal of another HCQ device, for a queue here that waits on it (a cross-device
  dependency); [] for a device without one (not an HCQ device, or signals another device can't reach)."""
  if hcq is None: return []
  return [(handle_addr(b), b.nbytes) for q in hcq.queues if (b := hcq.timeline_signal(q)) is not None]

def no_direct_path(name: str, lib: bytes) -> Program:
  """The Compiled runtime of every AMD interface: kernels run only through the queues (core's HCQ pipeline)."""
  raise NotImplementedError(f"AMD runs kernel {name} only through its command queues (core's HCQ pipeline), not one call at a time")

def make_device(name: str, target: Target | None = None) -> Compiled:
  """The Compiled device for DEV=[KFD|MOCK+]AMD[:LLVM[:ARCH]]: the interface's allocator and HCQ object (KFD: the arch is the
  installed GPU's, an ARCH that differs is refused; MOCK: default gfx1100), the LLVM renderer for that arch."""
  from plugin_amd import make_llvm
  iface = (target.interface if target is not None else None) or INTERFACES[0]
  arch = target.arch if target is not None else None
  allocator: LRUAllocator
  hcq: AMDHCQ
  if iface == "MOCK":
    from plugin_amd.iface_mock import open_device as open_mock
    allocator, hcq = open_mock(name, arch)
  elif iface == "KFD":
    from plugin_amd.iface_kfd import open_device as open_kfd
    allocator, hcq = open_kfd(name, arch)
  else: raise ValueError(f"AMD has no interface {iface!r}; it offers {', '.join(INTERFACES)} (e.g. DEV=MOCK+AMD)")
  renderer, compiler = make_llvm(hcq.arch)
  renderer.device = name
  return Compiled(name, allocator, renderer, compiler, no_direct_path, target, hcq=hcq)
