"""The MOCK+NV device: host memory mapped at GPU virtual addresses, one GPFIFO channel per queue served by the software GPU
(mock_gpu.py) on a worker thread.

Memory: every allocation is host pages below 2**39 (LowMemory) mapped into one GPU virtual address space (mock_gpu.VASpace) at
their own address; `addr(buffer)` is that VA, which command words and kernel parameters carry. Memory of other devices that a
channel must reach (another device's timeline semaphore a WAIT polls) gets an alias VA on first use, as a driver maps host
memory for the GPU.
Copies from other devices go through a staging buffer here (`needs_staging`).

Channels: core's submit program writes methods into the channel's pushbuffer ring and the dword count into `doorbell`. The
channel's worker plays both sides of a real submission: as the driver it turns the new ring dwords into GPFIFO entries (split
where the ring ends), writes GP_PUT into the USERD page and notifies the channel (the work-submit token's doorbell); as the
GPU it fetches entries from GP_GET to GP_PUT, decodes each pushbuffer segment and writes GP_GET back. Each channel starts with
a setup segment that binds its engine object with SET_OBJECT (compute class on subchannel 1, copy class on subchannel 4)."""
from __future__ import annotations
import ctypes, struct, threading, time
from typing import Any
from core.device.allocator import BufferSpec
from core.device.host_memory import HostArrayAllocator
from core.device.buffer import Buffer
from core.device.hcq import handle_addr, PerDevice, WorkerQueuesHCQ
from core.ir.dtype import dtypes
from core.ir.ops import UOp
from plugin_nv import pushbuf as pb
from plugin_nv.mock_gpu import PROGRAMS, Channel, Launch, MockFault, VASpace, run_launch
from plugin_nv.qmd import arch_info
from plugin_nv.runtime import NVHCQ

MEMORY = VASpace()   # the GPU virtual address space of every MOCK+NV instance in this process
PAGE = 4096

class LowMemory:
  """Anonymous host pages below 2**39, so that a buffer's host address is its GPU virtual address (core caches per-run patches
  by host address: a VA that differed from it would go stale when memory is reused). Hints go upwards from 2**36 and are never
  reused; the kernel honours a hint when the range is free."""
  PROT_RW, MAP_PRIVATE_ANON = 0x3, 0x22
  def __init__(self) -> None:
    self.libc = ctypes.CDLL(None, use_errno=True)
    self.libc.mmap.restype, self.libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    self.libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    self.hint, self.lock = 1 << 36, threading.Lock()
  def alloc(self, size: int) -> int:
    n = (max(size, 1) + PAGE - 1) // PAGE * PAGE
    with self.lock:
      hint = self.hint
      self.hint += n + PAGE   # a guard page between allocations
    addr = self.libc.mmap(hint, n, self.PROT_RW, self.MAP_PRIVATE_ANON, -1, 0)
    if addr in (None, ctypes.c_void_p(-1).value): raise MemoryError(f"MOCK+NV: mmap of {n} bytes failed (errno {ctypes.get_errno()})")
    if addr + n > VASpace.ALIAS_BASE:
      self.libc.munmap(addr, n)
      raise MemoryError(f"MOCK+NV: the kernel placed {n} bytes at {addr:#x}, above the GPU's identity-mapped range")
    return addr
  def free(self, addr: int, size: int) -> None: self.libc.munmap(addr, (max(size, 1) + PAGE - 1) // PAGE * PAGE)

LOW = LowMemory()

class MockAllocator(HostArrayAllocator):
  """Host pages below 2**39 (LowMemory), mapped into MEMORY at their own address."""
  def _alloc(self, size: int, options: BufferSpec) -> Any:
    if options.external_ptr is not None:
      buf = (ctypes.c_uint8 * size).from_address(options.external_ptr)
      if MEMORY.va_of(options.external_ptr) is None: MEMORY.map(options.external_ptr, size)
      return buf
    addr = LOW.alloc(size)
    MEMORY.map(addr, size, None, identity=True)
    return (ctypes.c_uint8 * size).from_address(addr)
  def _free(self, opaque: Any, options: BufferSpec) -> None:
    if options.external_ptr is None:
      addr = ctypes.addressof(opaque)
      MEMORY.unmap(addr)
      LOW.free(addr, len(opaque))

GPFIFO_ENTRIES = 1024

class MockChannel:
  """One queue: core's buffers (pushbuffer ring, wptr, doorbell, timeline semaphore), the channel's GPFIFO ring and USERD page,
  the software GPU's Channel and the worker thread that runs them."""
  def __init__(self, device: str, queue: str, arch: str, ring_size: int, timeout_s: float, faults: list[str]):
    self.device, self.queue, self.faults = device, queue, faults
    opts = BufferSpec(nolru=True)   # fresh memory: it starts zeroed
    self.buffers = {"ring": Buffer(device, ring_size // 4, dtypes.uint32, opts).allocate()}
    for k in ("wptr", "doorbell", "timeline_signal"): self.buffers[k] = Buffer(device, 1, dtypes.uint64, opts).allocate()
    self.gpfifo = Buffer(device, GPFIFO_ENTRIES, dtypes.uint64, opts).allocate()
    self.userd = Buffer(device, pb.USERD_SIZE, dtypes.uint8, opts).allocate()
    self.setup = Buffer(device, 4, dtypes.uint32, opts).allocate()
    self.ring_va, self.ring_dwords = va(self.buffers["ring"]), ring_size // 4
    self.doorbell = ctypes.c_uint64.from_address(handle_addr(self.buffers["doorbell"]))
    engine = "compute" if queue.startswith("COMPUTE") else "copy"
    self.closed = False
    self.gpu = Channel(f"{device} {queue}", arch, engine, MEMORY, on_launch=self._launch, timeout_s=timeout_s, stop=lambda: self.closed)
    self.published = 0   # ring dwords turned into GPFIFO entries
    self.put = 0         # GPFIFO entries written (GP_PUT is this modulo the ring)
    self.get = 0         # GPFIFO entries the GPU fetched
    self.state = "idle"
    # the setup segment: SET_OBJECT of the channel's engine class on its subchannel
    info = arch_info(arch)
    subch, cls = (pb.SUBCH_COMPUTE, info.compute_class) if engine == "compute" else (pb.SUBCH_COPY, info.copy_class)
    self.setup.copyin(memoryview(bytearray(struct.pack("<2I", *pb.incr(subch, pb.SET_OBJECT, cls)) + bytes(8))))
    self._entry(va(self.setup), 2)
    self._set_gp_put()
    self.kick = threading.Event()
    self.start()

  def _launch(self, launch: Launch) -> None: run_launch(launch, MEMORY)

  # *** the driver's side ***

  def _entry(self, addr: int, ndwords: int) -> None:
    e0, e1 = pb.gp_entry(addr, ndwords)
    ctypes.c_uint64.from_address(handle_addr(self.gpfifo) + 8 * (self.put % GPFIFO_ENTRIES)).value = e0 | e1 << 32
    self.put += 1

  def _set_gp_put(self) -> None:
    ctypes.c_uint32.from_address(handle_addr(self.userd) + pb.USERD_GP_PUT).value = self.put % GPFIFO_ENTRIES

  def publish(self) -> None:
    """GPFIFO entries for the ring dwords core announced since the last call, then GP_PUT."""
    bell = self.doorbell.value
    if bell == self.published: return
    if bell < self.published or bell - self.published > self.ring_dwords:
      raise MockFault(f"{self.device} {self.queue}: doorbell {bell} after {self.published} dwords: not a count of new ring dwords")
    while self.published < bell:
      if self.put - self.get >= GPFIFO_ENTRIES: raise MockFault(f"{self.device} {self.queue}: the GPFIFO ring is full")
      off = self.published % self.ring_dwords
      n = min(bell - self.published, self.ring_dwords - off)
      self._entry(self.ring_va + 4 * off, n)
      self.published += n
    self._set_gp_put()

  # *** the GPU's side ***

  def run(self) -> None:
    """Fetch and execute GPFIFO entries from GP_GET up to USERD's GP_PUT."""
    userd = handle_addr(self.userd)
    gp_put = ctypes.c_uint32.from_address(userd + pb.USERD_GP_PUT).value
    if gp_put >= GPFIFO_ENTRIES: raise MockFault(f"{self.gpu.name}: GP_PUT {gp_put} is past the {GPFIFO_ENTRIES}-entry GPFIFO")
    while self.get % GPFIFO_ENTRIES != gp_put:
      raw = ctypes.c_uint64.from_address(handle_addr(self.gpfifo) + 8 * (self.get % GPFIFO_ENTRIES)).value
      addr, ndwords, level, _ = pb.gp_decode(raw & 0xFFFFFFFF, raw >> 32)
      if ndwords == 0: pass   # a control entry (NOP, CRC checks): nothing to fetch
      elif level: raise MockFault(f"{self.gpu.name}: GPFIFO entry {self.get} is a subroutine entry, which the MOCK does not implement")
      else: self.gpu.segment(addr, ndwords)
      self.get += 1
      ctypes.c_uint32.from_address(userd + pb.USERD_GP_GET).value = self.get % GPFIFO_ENTRIES

  # *** the worker ***

  def start(self) -> None:
    self.thread = threading.Thread(target=self._loop, name=f"mock {self.device} {self.queue}", daemon=True)
    self.thread.start()

  def _loop(self) -> None:
    idle_since = time.monotonic()
    while not self.closed:
      if self.doorbell.value != self.published or self.get != self.put:
        self.state = f"running (ring dwords {self.published} of {self.doorbell.value}, GPFIFO entries {self.get} of {self.put})"
        try:
          self.publish()
          self.run()
        except Exception as e:   # a fault: report it, drop what is left of the submission, keep serving later ones
          self.faults.append(f"{self.device} {self.queue}: {type(e).__name__}: {e}")
          self.published, self.get = self.doorbell.value, self.put
        self.state = "idle"
        idle_since = time.monotonic()
        continue
      self.kick.wait(0.001 if time.monotonic() - idle_since < 0.5 else 0.02)
      self.kick.clear()

  def busy(self) -> bool: return self.doorbell.value != self.published or self.get != self.put
  def describe(self) -> str: return f"{self.queue} {self.state}"
  def close(self) -> None:
    self.closed = True
    self.kick.set()
    self.thread.join(timeout=5)

def va(buf: Buffer) -> int:
  """The GPU virtual address of an allocated MOCK+NV buffer (or of host memory mapped for it)."""
  host = handle_addr(buf)
  if (a := MEMORY.va_of(host)) is None: a = MEMORY.map(host, buf.nbytes, buf)
  return a

class MockHCQ(WorkerQueuesHCQ[MockChannel], NVHCQ):
  """The HCQDevice of a MOCK+NV device (see the module docstring)."""
  kind = "MOCK"

  def __init__(self, device: str, arch: str, ring_size: int = 1 << 20):
    arch_info(arch)   # refuse an arch the launches can't be encoded for now, not at the first launch
    super().__init__(device, arch, ring_size)

  def new_queue(self, name: str) -> MockChannel:
    return MockChannel(self.device, name, self.arch, self._ring_size, self.queue_timeout_s(), self.faults)

  def addr(self, buf: Buffer) -> int: return va(buf)

  def register_program(self, name: str, uops: tuple[UOp, ...], data: Any, image: bytes) -> None:
    from plugin_nv.hostrun import build_kernel
    PROGRAMS.add(image[data.code_offset:data.code_offset + data.code_size], data, build_kernel(name, uops))

  def needs_staging(self, other_device: str) -> bool:
    from core.device.registry import Device
    return not isinstance(Device[other_device].hcq, MockHCQ)

_by_device: PerDevice[MockHCQ] = PerDevice(on_exit=MockHCQ.close)

def device_hcq(device: str, arch: str) -> MockHCQ:
  """One HCQ object per device instance and process: reopening the device keeps the channels core's cached submissions use."""
  return _by_device.get(device, lambda: MockHCQ(device, arch), keep=lambda h: h.arch == arch)

def open_device(name: str, arch: str) -> tuple[MockAllocator, MockHCQ]:
  """The allocator and HCQ object of DEV=MOCK+NV[:PTX|CUDA[:ARCH]] (runtime.make_device builds the device)."""
  return MockAllocator(name), device_hcq(name, arch)
