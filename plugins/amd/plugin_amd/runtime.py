"""What the AMD device's interfaces share: the HCQ object's base class (AMDHCQ), the runtime stub for direct calls, and
make_device, which builds the Compiled device of the interface DEV names (iface_kfd.py, iface_mock.py)."""
from __future__ import annotations
import ctypes, threading, time, weakref
from typing import Any
from core.device.allocator import BufferSpec, LRUAllocator
from core.device.buffer import Buffer
from core.device.compiled import Compiled, Program
from core.device.hcq import HCQDevice, RingLayout, handle_addr
from core.device.target import Target
from core.hcq import HCQError
from core.hcq.queue_ir import placeholder
from core.ir.dtype import DType
from core.ir.ops import UOp
from plugin_amd import INTERFACES, sdma

PER_QUEUE = ("ring", "wptr", "doorbell", "timeline_signal")   # placeholder kinds with one buffer per queue

class AMDHCQ(HCQDevice):
  """The HCQ side of an AMD device, what its interfaces share: queue names, ring sizes and layouts, the buffers behind placeholders
  (bufferize.py), scratch, fault reports, host-side waits. An interface's subclass provides `queue_buffer(kind, queue)` (the Buffer
  of a per-queue tag), `_kick()` (make the queues look at their doorbells now), `_busy()` (queues with work left) and, when it runs
  kernels in software, `register_program`."""
  queues: tuple[str, ...] = ("COMPUTE:0", "COPY:0")
  kind = "AMD"     # named in fault reports
  arch: str        # the LLVM arch name, e.g. "gfx1100": which PM4/SDMA encodings lower.py emits

  def __init__(self, device: str, arch: str, ring_size: int = 1 << 20):
    if ring_size < 64 or ring_size & (ring_size - 1): raise ValueError(f"{device}: ring size {ring_size} is not a power of two >= 64")
    self.device, self.arch, self._ring_size = device, arch, ring_size
    self._lock = threading.Lock()
    self._uops: dict[Any, UOp] = {}
    self._owned: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()
    self.faults: list[str] = []
    self._seen = {"raised": 0, "read": 0}   # how many fault reports each reader (wait_signal's raise, error()) has seen
    self.scratch = placeholder("scratch", device, 1 << 16)   # lower.py points COMPUTE_DISPATCH_SCRATCH_BASE here

  def tmpring_size(self, scratch: int) -> int:
    """COMPUTE_TMPRING_SIZE for `scratch` bytes per work-item: WAVES [11:0], WAVESIZE [24:12] in 256-dword units."""
    return 1 | ((scratch * 64 + 1023) // 1024) << 12

  def ring_size(self, queue: str) -> int:
    self._check(queue)
    return self._ring_size

  def ring_layout(self, queue: str) -> RingLayout:
    # a PM4 compute queue's write pointer counts dwords. An SDMA engine's counts bytes, and it does not follow a packet across
    # the ring's end: the tail is filled with one-dword NOPs and the submit starts again at the ring's start
    self._check(queue)
    return RingLayout(unit=4) if queue.startswith("COMPUTE") else RingLayout(unit=1, nop=sdma.NOP_DWORD)

  def _check(self, queue: str) -> None:
    if queue not in self.queues: raise ValueError(f"{self.device} has no queue {queue!r}; its queues are {', '.join(self.queues)}")

  def queue_buffer(self, kind: str, queue: str) -> Buffer: raise NotImplementedError(f"{type(self).__name__} has no queue buffers")
  def timeline_signal(self, queue: str) -> Buffer | None: return self.queue_buffer("timeline_signal", queue)
  def _kick(self) -> None: pass
  def _busy(self) -> list[str]: return []
  def _describe(self) -> str: return ""

  def register_program(self, name: str, uops: tuple[UOp, ...], data: Any, image: bytes) -> None:
    """Called by pm_prep_program for each prepared kernel (`uops`: its linearized uops, `data`: its AMDProgramData, `image`:
    the relocated code object). Real hardware runs the image and needs nothing here; an interface that runs kernels in
    software (MOCK, the simulated KFD driver) files a host build of the kernel under its code."""

  # *** buffers behind placeholders (bufferize.py) ***

  def fresh_buffer(self, tag: Any, dtype: DType, size: int) -> Buffer:
    return Buffer(self.device, max(size, 1), dtype, BufferSpec(nolru=True)).allocate()

  def buffer_uop(self, tag: Any, dtype: DType, size: int) -> UOp:
    """The real BUFFER uop of a placeholder: per-queue buffers exist once, anything else is a fresh allocation."""
    if isinstance(tag, tuple) and len(tag) == 2 and tag[0] in PER_QUEUE:
      if (u := self._uops.get(tag)) is None:
        b = self.queue_buffer(tag[0], tag[1])
        u = self._uops[tag] = UOp.new_buffer(self.device, b.size, b.dtype)
        self._owned[u] = b
      return u
    u = UOp.new_buffer(self.device, max(size, 1), dtype)
    self._owned[u] = self.fresh_buffer(tag, dtype, size)
    return u

  def buffer_of(self, u: UOp) -> Buffer | None: return self._owned.get(u)

  # *** waits and faults ***

  def _faults(self, reader: str) -> list[str]:
    # error() also covers what a wait is about to raise (core reads it to explain the failed wait)
    n = len(self.faults)
    new, self._seen[reader] = self.faults[self._seen[reader]:n], n
    if reader == "read": self._seen["raised"] = n
    return new

  def error(self) -> str | None:
    faults = self._faults("read")
    return "\n".join(faults) if faults else None

  def wait_signal(self, signal: Buffer, value: int, timeout_s: float | None = None) -> None:
    from core.helpers import HCQ_TIMEOUT
    timeout_s = float(HCQ_TIMEOUT.value) if timeout_s is None else timeout_s
    self._kick()
    sig = ctypes.c_uint64.from_address(handle_addr(signal))
    deadline, pause = time.monotonic() + timeout_s, 1e-5
    while sig.value < value:
      if (faults := self._faults("raised")): self._raise(faults)
      if time.monotonic() > deadline:
        raise HCQError(f"{self.device}: timed out after {timeout_s:g} s (HCQ_TIMEOUT) waiting for signal {ctypes.addressof(sig):#x} to "
                       f"reach {value}; it is {sig.value}. Queues: " + self._describe(), device=self.device, seen=sig.value, expected=value)
      time.sleep(pause)
      pause = min(pause * 2, 5e-4)
    if (faults := self._faults("raised")): self._raise(faults)

  def _raise(self, faults: list[str]) -> None:
    raise HCQError(f"{self.device}: the {self.kind} command processor reported a fault:\n  " + "\n  ".join(faults), device=self.device)

  def synchronize(self, timeout_s: float | None = None) -> None:
    """Waits until every started queue ran everything its doorbell announced."""
    from core.helpers import HCQ_TIMEOUT
    deadline = time.monotonic() + (float(HCQ_TIMEOUT.value) if timeout_s is None else timeout_s)
    self._kick()
    while (busy := self._busy()):
      if time.monotonic() > deadline: raise HCQError(f"{self.device}: synchronize timed out: {'; '.join(busy)}", device=self.device)
      time.sleep(1e-4)
    if (faults := self._faults("raised")): self._raise(faults)

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
