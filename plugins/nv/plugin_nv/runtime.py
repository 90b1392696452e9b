"""What the NV device's interfaces share: the HCQ object's base class (NVHCQ) and make_device, which builds the Compiled device
of the interface DEV names (iface_mock.py, iface_nvk.py, iface_cuda.py)."""
from __future__ import annotations
import ctypes, threading, time, weakref
from typing import Any
from core.device.allocator import BufferSpec, LRUAllocator
from core.device.buffer import Buffer
from core.device.compiled import Compiled, Program
from core.device.hcq import HCQDevice, RingLayout, handle_addr
from core.device.target import Target
from core.hcq import HCQError
from core.ir.dtype import DType
from core.ir.ops import UOp
from plugin_nv import pushbuf as pb

# placeholder kinds with one buffer per queue: core's pushbuffer ring, its write pointer and doorbell (dwords written since the
# channel was created) and the queue's timeline semaphore
PER_QUEUE = ("ring", "wptr", "doorbell", "timeline_signal")

class NVHCQ(HCQDevice):
  """The HCQ side of an NV device: one GPFIFO channel per queue (COMPUTE:0 runs the compute class, COPY:0 the copy engine).

  Core's submit program writes each submit's methods into the channel's pushbuffer ring (`ring`, dword write pointer, a submit
  never wraps: the ring's tail is filled with NOP headers) and stores the new write pointer into `doorbell`. Turning that into
  GPFIFO entries is the interface's part (`_publish`): an entry per new pushbuffer segment at GP_PUT, GP_PUT in the channel's
  USERD page, then the channel's work-submit token to the usermode doorbell. A subclass provides `queue_buffer(kind, queue)`,
  `_kick()` (publish and make the channels run), `_busy()` and, when it runs kernels in software, `register_program`."""
  queues: tuple[str, ...] = ("COMPUTE:0", "COPY:0")
  kind = "NV"
  arch: str
  timestamp_size = 16   # a TIMESTAMP is a semaphore release with RELEASE_TIMESTAMP: 8 bytes of payload, then the time (ns)

  def __init__(self, device: str, arch: str, ring_size: int = 1 << 20):
    if ring_size < 64 or ring_size & (ring_size - 1): raise ValueError(f"{device}: ring size {ring_size} is not a power of two >= 64")
    self.device, self.arch, self._ring_size = device, arch, ring_size
    self._lock = threading.Lock()
    self._uops: dict[Any, UOp] = {}
    self._owned: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()
    self.faults: list[str] = []
    self._raised = 0   # fault reports already raised by a wait (error() returns the rest)

  def ring_size(self, queue: str) -> int:
    self._check(queue)
    return self._ring_size

  def ring_layout(self, queue: str) -> RingLayout:
    # a GPFIFO entry points at one contiguous segment, so no submit may wrap: the tail is filled with empty method headers
    self._check(queue)
    return RingLayout(unit=4, nop=pb.DMA_NOP)

  def _check(self, queue: str) -> None:
    if queue not in self.queues: raise ValueError(f"{self.device} has no queue {queue!r}; its queues are {', '.join(self.queues)}")

  def queue_buffer(self, kind: str, queue: str) -> Buffer: raise NotImplementedError(f"{type(self).__name__} has no queue buffers")
  def timeline_signal(self, queue: str) -> Buffer | None: return self.queue_buffer("timeline_signal", queue)
  def _kick(self) -> None: pass
  def _busy(self) -> list[str]: return []
  def _describe(self) -> str: return ""

  def register_program(self, name: str, uops: tuple[UOp, ...], data: Any, image: bytes) -> None:
    """Called by pm_prep_program for each prepared kernel. Hardware runs the image; an interface that runs kernels in software
    (MOCK) files a host build of the kernel under its code."""

  # *** buffers behind placeholders (bufferize.py) ***

  def buffer_uop(self, tag: Any, dtype: DType, size: int) -> UOp:
    if isinstance(tag, tuple) and len(tag) == 2 and tag[0] in PER_QUEUE:
      if (u := self._uops.get(tag)) is None:
        b = self.queue_buffer(tag[0], tag[1])
        u = self._uops[tag] = UOp.new_buffer(self.device, b.size, b.dtype)
        self._owned[u] = b
      return u
    u = UOp.new_buffer(self.device, max(size, 1), dtype)
    self._owned[u] = Buffer(self.device, max(size, 1), dtype, BufferSpec(nolru=True)).allocate()
    return u

  def buffer_of(self, u: UOp) -> Buffer | None: return self._owned.get(u)

  # *** waits and faults ***

  def error(self) -> str | None:
    new = self.faults[self._raised:]
    self._raised = len(self.faults)
    return "\n".join(new) if new else None

  def _check_faults(self) -> None:
    if len(self.faults) > self._raised:
      new = self.faults[self._raised:]
      self._raised = len(self.faults)
      raise HCQError(f"{self.device}: the {self.kind} GPU reported a fault:\n  " + "\n  ".join(new), device=self.device)

  def wait_signal(self, signal: Buffer, value: int, timeout_s: float | None = None) -> None:
    from core.helpers import HCQ_TIMEOUT
    timeout_s = float(HCQ_TIMEOUT.value) if timeout_s is None else timeout_s
    self._kick()
    sig = ctypes.c_uint64.from_address(handle_addr(signal))
    deadline, pause = time.monotonic() + timeout_s, 1e-5
    while sig.value < value:
      self._check_faults()
      if time.monotonic() > deadline:
        raise HCQError(f"{self.device}: timed out after {timeout_s:g} s (HCQ_TIMEOUT) waiting for a semaphore to reach {value}; it is "
                       f"{sig.value}. Channels: {self._describe()}", device=self.device, seen=sig.value, expected=value)
      time.sleep(pause)
      pause = min(pause * 2, 5e-4)
    self._check_faults()

  def synchronize(self, timeout_s: float | None = None) -> None:
    from core.helpers import HCQ_TIMEOUT
    deadline = time.monotonic() + (float(HCQ_TIMEOUT.value) if timeout_s is None else timeout_s)
    self._kick()
    while (busy := self._busy()):
      if time.monotonic() > deadline: raise HCQError(f"{self.device}: synchronize timed out: {'; '.join(busy)}", device=self.device)
      time.sleep(1e-4)
    self._check_faults()

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
