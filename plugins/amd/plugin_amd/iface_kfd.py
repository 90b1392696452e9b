"""The KFD+AMD device: a GPU driven through /dev/kfd (kfd.py), as the HCQ object core's pipeline and this plugin's pm_lower /
pm_bufferize drive. NEVER RUN ON AMD HARDWARE: in CI it runs over the simulated driver (kfd_sim.py, AMD_KFD_SIM=<arch>).

Memory: every buffer is one KFD buffer object whose GPU address is its host address (kfd.KFD.alloc); user buffers, programs,
kernargs and command buffers are host-visible VRAM (PUBLIC, so copy-in/out are host copies; on a GPU without a large BAR that
window is small), rings, signals and queue pointers are GTT (host memory, uncached).

Queues: COMPUTE:0 is a PM4 compute queue (AQL off) with its EOP buffer and context save area sized from the topology, COPY:0 an
SDMA queue. Core's submit program writes the ("wptr", q) and ("doorbell", q) buffers in the unit `ring_layout(q).unit` names
(PM4: dwords, SDMA: bytes), so those two buffers are the hardware's own words: the write pointer in the queue's read/write pointer page
and the queue's doorbell; a submit reaches the GPU with no host thread in between.

Waits between devices: a queue here may wait on another HCQ device's timeline signal (a copy from it); before such a copy is
planned (`needs_staging`), that device's signal pages are mapped into this GPU's page tables (USERPTR).
"""
from __future__ import annotations
import ctypes
from typing import Any
from core.device.allocator import BufferSpec, LRUAllocator
from core.device.buffer import Buffer
from core.device.hcq import PerDevice, PerProcess
from core.ir.dtype import dtypes
from core.ir.ops import UOp
from plugin_amd import kfd as K
from plugin_amd.runtime import AMDHCQ, timeline_signal_addrs

VRAM = K.MEM_VRAM | K.MEM_PUBLIC | K.MEM_WRITABLE | K.MEM_EXECUTABLE   # executable: program images are ordinary buffers
GTT = K.MEM_GTT | K.MEM_WRITABLE | K.MEM_COHERENT | K.MEM_UNCACHED

class KFDAllocator(LRUAllocator):
  """KFD buffer objects as ctypes arrays at their (GPU == host) address; host-visible, so copies are host memcpy."""
  def __init__(self, device: str, drv: K.KFD):
    super().__init__(device)
    self.drv = drv
    self._bos: dict[int, K.GPUMemory] = {}   # address -> the driver's buffer object behind it
  def _alloc(self, size: int, options: BufferSpec) -> Any:
    if options.external_ptr is not None: return (ctypes.c_uint8 * size).from_address(options.external_ptr)
    try: mem = self.drv.alloc(size, GTT if options.host or options.uncached else VRAM)
    except K.KFDError as e:
      if e.errno == 12: raise MemoryError(str(e)) from e   # ENOMEM: the allocator's OutOfMemory path
      raise
    self._bos[mem.va] = mem
    return (ctypes.c_uint8 * size).from_address(mem.va)
  def buffer_object(self, buf: Buffer) -> K.GPUMemory:
    """The driver's buffer object behind a Buffer this allocator gave (what a queue's ring is created from)."""
    return self._bos[ctypes.addressof(buf._buf)]
  def _free(self, opaque: Any, options: BufferSpec) -> None:
    # memory this allocator got from the driver goes back to it (external_ptr memory is someone else's)
    if (mem := self._bos.pop(ctypes.addressof(opaque), None)) is not None and self.drv.fd >= 0: self.drv.free(mem)
  def _offset(self, opaque: Any, size: int, offset: int) -> Any: return (ctypes.c_uint8 * size).from_buffer(opaque, offset)
  def _as_buffer(self, opaque: Any) -> memoryview: return memoryview(opaque).cast("B")
  def _copyin(self, dest: Any, src: memoryview) -> None: memoryview(dest).cast("B")[:] = src.cast("B")
  def _copyout(self, dest: memoryview, src: Any) -> None: dest.cast("B")[:] = memoryview(src).cast("B")

class KFDQueue:
  """One hardware queue: its ring, the hardware read/write pointer page (core's wptr buffer is its write pointer word), EOP and
  context save buffers (compute), the timeline signal, and the doorbell (core's doorbell buffer)."""
  def __init__(self, hcq: KFDHCQ, name: str):
    self.name, self.drv = name, hcq.drv
    compute = name.startswith("COMPUTE")
    self.unit = hcq.ring_layout(name).unit   # what the hardware's write pointer counts: PM4 dwords, SDMA bytes
    host = BufferSpec(host=True, nolru=True)   # fresh GTT memory (zeroed): exactly one buffer object each
    self.buffers = {"ring": Buffer(hcq.device, hcq._ring_size // 4, dtypes.uint32, host).allocate(),
                    "timeline_signal": Buffer(hcq.device, 1, dtypes.uint64, host).allocate()}
    self.rw = self.drv.alloc(K.PAGE, GTT)   # read pointer at +0, write pointer at +8: the first page of a one-page buffer object
    self.own = [self.rw]
    eop = cwsr = None
    if compute:
      eop = self.drv.alloc(self.drv.sizes.eop, K.MEM_VRAM | K.MEM_WRITABLE, cpu=False)
      cwsr = self.drv.alloc(self.drv.sizes.cwsr_total, K.MEM_VRAM | K.MEM_WRITABLE, cpu=False)
      self.own += [eop, cwsr]
    ring = self.buffers["ring"].allocator.buffer_object(self.buffers["ring"])
    self.q = self.drv.create_queue(K.QUEUE_TYPE_COMPUTE if compute else K.QUEUE_TYPE_SDMA, ring, self.rw, eop, cwsr)
    for k, addr in (("wptr", self.rw.va + 8), ("doorbell", self.q.doorbell)):
      self.buffers[k] = Buffer(hcq.device, 1, dtypes.uint64, BufferSpec(external_ptr=addr, nolru=True)).allocate()
    self.hw_rptr = ctypes.c_uint64.from_address(self.rw.va)
    self.hw_wptr = ctypes.c_uint64.from_address(self.rw.va + 8)

  def busy(self) -> bool: return self.hw_rptr.value != self.hw_wptr.value
  def describe(self) -> str:
    return f"{self.name} queue {self.q.queue_id}: core wrote {self.hw_wptr.value * self.unit:#x} bytes, engine read {self.hw_rptr.value * self.unit:#x}"

  def close(self) -> None:
    self.drv.destroy_queue(self.q.queue_id)
    for m in self.own: self.drv.free(m)

class KFDHCQ(AMDHCQ):
  """The HCQDevice of a KFD+AMD device (see the module docstring)."""
  kind = "KFD"

  def __init__(self, device: str, drv: K.KFD, ring_size: int = 1 << 20):
    super().__init__(device, drv.arch, ring_size)
    self.drv = drv
    self.simulated = drv.simulated
    # the simulated driver reports its queues' faults in one list per process (the hardware would raise a memory exception event)
    self.faults = drv.os.faults
    self._seen = {"raised": len(self.faults), "read": len(self.faults)}
    self._queues: dict[str, KFDQueue] = {}
    self._host_maps: dict[int, K.GPUMemory] = {}
    self.closed = False

  def queue(self, name: str) -> KFDQueue:
    if (q := self._queues.get(name)) is None:
      self._check(name)
      with self._lock:
        if (q := self._queues.get(name)) is None: q = self._queues[name] = KFDQueue(self, name)
    return q

  def queue_buffer(self, kind: str, queue: str) -> Buffer: return self.queue(queue).buffers[kind]

  def _kick(self) -> None:
    if self.simulated: self.drv.os.kick()
  def _busy(self) -> list[str]: return [q.describe() for q in list(self._queues.values()) if q.busy()]
  def _describe(self) -> str:
    return "; ".join(q.describe() for q in self._queues.values()) + (f" [{self.drv.os.describe()}]" if self.simulated else "")

  def register_program(self, name: str, uops: tuple[UOp, ...], data: Any, image: bytes) -> None:
    # a real GPU runs the code object; the simulated one runs a host build filed under its code (kfd_sim.py)
    if self.simulated: self.drv.os.register_program(name, uops, data, image)

  def needs_staging(self, other_device: str) -> bool:
    """Another device's buffers are not in this GPU's page tables: copies go through a staging buffer here. Its timeline signals
    are mapped in (USERPTR), since a queue here waits on them before copying."""
    if other_device == self.device: return False
    from core.device.registry import Device
    if not isinstance(hcq := Device[other_device].hcq, KFDHCQ):
      for addr, size in timeline_signal_addrs(hcq): self.map_host(addr, size)
    return True

  def map_host(self, addr: int, size: int) -> None:
    """Map host memory (another device's signal) into this GPU's page tables, once per page."""
    with self._lock:
      if any(m.va <= addr and addr + size <= m.va + m.size for m in self._host_maps.values()): return
      m = self.drv.map_host(addr, size)
      self._host_maps[m.va] = m

  def close(self) -> None:
    if self.closed: return
    self.closed = True
    with self._lock:
      for q in self._queues.values(): q.close()
      for m in self._host_maps.values(): self.drv.free(m)
      self._queues.clear()
      self._host_maps.clear()
      self._uops.clear()

# *** one driver per process (the kernel keeps one KFD process per process), one HCQ object per device instance ***

_driver: PerProcess[K.KFD] = PerProcess(K.KFD)   # the /dev/kfd driver (a KFDError saying the fix when there is none or no access)
_by_device: PerDevice[KFDHCQ] = PerDevice(on_exit=KFDHCQ.close)

def open_device(name: str, arch: str | None) -> tuple[KFDAllocator, KFDHCQ]:
  """The allocator and HCQ object of DEV=KFD+AMD[:LLVM[:ARCH]] (runtime.make_device builds the device): the arch is the installed
  GPU's, an ARCH that differs is refused."""
  drv = _driver.get()
  if arch and arch != drv.arch: raise ValueError(f"DEV asks for KFD+AMD {arch}, but the GPU behind /dev/kfd is {drv.arch}")
  return KFDAllocator(name, drv), _by_device.get(name, lambda: KFDHCQ(name, drv), keep=lambda h: not h.closed)
