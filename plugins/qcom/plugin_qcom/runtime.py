"""make_device: the Compiled device of the interface DEV names (CL: iface_cl.py, MOCK: iface_mock.py, KGSL: iface_kgsl.py)."""
from __future__ import annotations
import ctypes, threading, time, weakref
from typing import Any
from core.device.compiled import Compiled
from core.device.allocator import BufferSpec
from core.device.buffer import Buffer
from core.device.hcq import HCQDevice, RingLayout, handle_addr
from core.hcq import HCQError
from core.ir.dtype import DType, dtypes
from core.ir.ops import UOp
from core.device.target import Target
from plugin_qcom import INTERFACES

def make_device(name: str, target: Target | None = None) -> Compiled:
  """DEV=[KGSL|CL|MOCK+]QCOM[:CL]: CL runs kernels one by one on the first OpenCL device; MOCK and KGSL run schedules through
  core's HCQ pipeline as Adreno command streams."""
  iface = (target.interface if target is not None else None) or INTERFACES[0]
  if target is not None and target.renderer not in (None, "CL"):
    raise ValueError(f"QCOM has no renderer {target.renderer!r}; it offers CL (OpenCL C)")
  if iface == "CL":
    from plugin_qcom import cl
    from plugin_qcom.compiler import CLCompiler
    from plugin_qcom.iface_cl import CLAllocator, CLProgram, caps_of
    from plugin_qcom.renderer import OpenCLRenderer
    ctx = cl.context(target.indices[0] if target is not None and target.indices else 0)
    return Compiled(name, CLAllocator(name, ctx), OpenCLRenderer(caps_of(ctx), name), CLCompiler(ctx),
                    lambda n, lib: CLProgram(ctx, n, lib), target)
  if iface == "MOCK":
    from plugin_qcom.iface_mock import open_device as open_mock
    return open_mock(name, target)
  if iface == "KGSL":
    from plugin_qcom.iface_kgsl import open_device as open_kgsl
    return open_kgsl(name, target)
  raise ValueError(f"QCOM has no interface {iface!r}; it offers {', '.join(INTERFACES)} (e.g. DEV=CL+QCOM)")

# *** what the HCQ interfaces (MOCK, KGSL) share ***


PER_QUEUE = ("ring", "wptr", "doorbell", "timeline_signal")   # placeholder kinds with one buffer per queue

class QCOMHCQ(HCQDevice):
  """The HCQ side of a QCOM device: one COMPUTE queue (Adreno's CP runs kernels and copies in one ring) whose write pointer
  counts dwords, the buffers behind placeholders (bufferize.py) and host-side waits. An interface's subclass provides
  `_drain()` (let the command processor run what the doorbells announced; False when nothing could move) and `_describe()`."""
  queues: tuple[str, ...] = ("COMPUTE:0",)
  kind = "QCOM"

  def __init__(self, device: str, ring_size: int = 1 << 20):
    self.device, self._ring_size = device, ring_size
    self._lock = threading.RLock()
    self._uops: dict[Any, UOp] = {}
    self._owned: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()
    self._queue_bufs: dict[tuple[str, str], Buffer] = {}
    self.faults: list[str] = []
    self._reported = 0

  def ring_size(self, queue: str) -> int:
    self._check(queue)
    return self._ring_size
  def ring_layout(self, queue: str) -> RingLayout:
    self._check(queue)
    return RingLayout(unit=4)   # the CP's read and write pointers count dwords
  def _check(self, queue: str) -> None:
    if queue not in self.queues: raise ValueError(f"{self.device} has no queue {queue!r}; its queues are {', '.join(self.queues)}")

  def queue_buffer(self, kind: str, queue: str) -> Buffer:
    """The one ring/wptr/doorbell/timeline_signal buffer of a queue (fresh memory starts zeroed)."""
    self._check(queue)
    with self._lock:
      if (b := self._queue_bufs.get((kind, queue))) is None:
        b = Buffer(self.device, self._ring_size // 4, dtypes.uint32, BufferSpec(nolru=True)) if kind == "ring" else \
          Buffer(self.device, 1, dtypes.uint64, BufferSpec(nolru=True))
        b.allocate()
        if b.host_view() is not None: b.host_view()[:] = bytes(b.nbytes)   # type: ignore[index]
        self._queue_bufs[(kind, queue)] = b
    return b
  def timeline_signal(self, queue: str) -> Buffer | None: return self.queue_buffer("timeline_signal", queue)

  def buffer_uop(self, tag: Any, dtype: DType, size: int) -> UOp:
    """The real BUFFER uop of a placeholder: per-queue buffers exist once, anything else is a fresh allocation."""
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

  def _drain(self) -> bool: return False
  def _describe(self) -> str: return ""

  def _raise_faults(self) -> None:
    if len(self.faults) > self._reported:
      new, self._reported = self.faults[self._reported:], len(self.faults)
      raise HCQError(f"{self.device}: the {self.kind} command processor reported a fault:\n  " + "\n  ".join(new), device=self.device)

  def error(self) -> str | None:
    new, self._reported = self.faults[self._reported:], len(self.faults)
    return "\n".join(new) if new else None

  def wait_signal(self, signal: Buffer, value: int, timeout_s: float | None = None) -> None:
    from core.helpers import HCQ_TIMEOUT
    timeout_s = float(HCQ_TIMEOUT.value) if timeout_s is None else timeout_s
    sig = ctypes.c_uint64.from_address(handle_addr(signal))
    deadline, pause = time.monotonic() + timeout_s, 1e-5
    while True:
      moved = self._drain()
      self._raise_faults()
      if sig.value >= value: return
      if time.monotonic() > deadline:
        raise HCQError(f"{self.device}: timed out after {timeout_s:g} s (HCQ_TIMEOUT) waiting for signal {ctypes.addressof(sig):#x} to "
                       f"reach {value}; it is {sig.value}. {self._describe()}", device=self.device, seen=sig.value, expected=value)
      if not moved:
        time.sleep(pause)
        pause = min(pause * 2, 5e-4)

  def synchronize(self) -> None:
    while self._drain(): pass
    self._raise_faults()

def no_direct_path(name: str, lib: bytes) -> Any:
  """The Compiled runtime of the HCQ interfaces: kernels run only through the command stream (core's HCQ pipeline)."""
  raise NotImplementedError(f"QCOM's MOCK and KGSL interfaces run kernel {name} only through the command stream (core's HCQ pipeline); "
                            "DEV=CL+QCOM runs kernels one by one")
