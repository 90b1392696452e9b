"""The NVK+NV device: an NVIDIA GPU driven through the kernel driver's resource manager (nvk.py). NEVER RUN ON NVIDIA HARDWARE:
in CI it runs over the simulated driver (nvk_sim.py, NVK_SIM=<arch>).

Memory: every buffer is one RM memory object mapped for the CPU and the GPU at the same address (nvk.RM.alloc_memory): user
buffers, programs and constant buffers video memory, rings, semaphores and the channels' GPFIFO and USERD host memory.

Channels: COMPUTE:0 and COPY:0 are each a channel group with one GPFIFO channel holding the arch's compute or copy object. Core's
submit program writes methods into the channel's pushbuffer ring and the count of ring dwords into `doorbell` (host memory: no
hardware sees that write), so a host thread per device publishes them, and so does every wait, synchronize and submit nobody waits for (`_kick`): a GPFIFO
entry per new segment of the ring (split where the ring ends), GP_PUT into the channel's USERD memory, then the channel's
work-submit token to the usermode doorbell (NOTIFY_CHANNEL_PENDING). The thread is what lets another device wait on this one's
semaphores without calling into it. Each channel starts with a segment that binds its engine object to its subchannel
(SET_OBJECT).

Memory of other devices (the semaphore of another HCQ device a channel here waits on) is mapped for the GPU on first use
(`addr`, nvk.RM.gpu_address)."""
from __future__ import annotations
import ctypes, struct, threading, time
from typing import Any
from core.device.allocator import BufferSpec, LRUAllocator
from core.device.buffer import Buffer
from core.device.hcq import handle_addr, PerDevice, PerProcess
from core.hcq import HCQError
from core.ir.dtype import dtypes
from core.ir.ops import UOp
from plugin_nv import nvk, pushbuf as pb
from plugin_nv.runtime import NVHCQ

class NVKAllocator(LRUAllocator):
  """RM memory objects as ctypes arrays at their (GPU == host) address; host copies in and out."""
  def __init__(self, device: str, rm: nvk.RM):
    super().__init__(device)
    self.rm = rm
    self._mem: dict[int, nvk.GPUMemory] = {}
  def _alloc(self, size: int, options: BufferSpec) -> Any:
    if options.external_ptr is not None: return (ctypes.c_uint8 * size).from_address(options.external_ptr)
    try: mem = self.rm.alloc_memory(size, vidmem=not (options.host or options.uncached))
    except nvk.RMError as e:
      if "NV_ERR_NO_MEMORY" in str(e): raise MemoryError(str(e)) from e   # the allocator's OutOfMemory path
      raise
    self._mem[mem.va] = mem
    return (ctypes.c_uint8 * size).from_address(mem.va)
  def _free(self, opaque: Any, options: BufferSpec) -> None:
    if (mem := self._mem.pop(ctypes.addressof(opaque), None)) is not None: self.rm.free_memory(mem)
  def _offset(self, opaque: Any, size: int, offset: int) -> Any: return (ctypes.c_uint8 * size).from_buffer(opaque, offset)
  def _as_buffer(self, opaque: Any) -> memoryview: return memoryview(opaque).cast("B")
  def _copyin(self, dest: Any, src: memoryview) -> None: memoryview(dest).cast("B")[:] = src.cast("B")
  def _copyout(self, dest: memoryview, src: Any) -> None: dest.cast("B")[:] = memoryview(src).cast("B")

class NVKChannel:
  """One queue: core's buffers (ring, wptr, doorbell, timeline semaphore) and the RM channel with its GPFIFO ring and USERD."""
  def __init__(self, hcq: NVKHCQ, name: str):
    self.name, self.rm = name, hcq.rm
    engine = "compute" if name.startswith("COMPUTE") else "copy"
    host = BufferSpec(host=True, nolru=True)   # fresh memory: zeroed
    self.buffers = {"ring": Buffer(hcq.device, hcq._ring_size // 4, dtypes.uint32, host).allocate()}
    for k in ("wptr", "doorbell", "timeline_signal"): self.buffers[k] = Buffer(hcq.device, 1, dtypes.uint64, host).allocate()
    self.setup = Buffer(hcq.device, 4, dtypes.uint32, host).allocate()
    self.ring_va, self.ring_dwords = handle_addr(self.buffers["ring"]), hcq._ring_size // 4
    self.doorbell = ctypes.c_uint64.from_address(handle_addr(self.buffers["doorbell"]))
    self.ch = self.rm.channel(engine)
    self.published = 0   # ring dwords turned into GPFIFO entries
    self.put = 0         # GPFIFO entries written
    subch = pb.SUBCH_COMPUTE if engine == "compute" else pb.SUBCH_COPY
    self.setup.copyin(memoryview(bytearray(struct.pack("<2I", *pb.incr(subch, pb.SET_OBJECT, self.ch.engine_class)) + bytes(8))))
    self._entry(handle_addr(self.setup), 2)
    self._commit()

  def _entry(self, addr: int, ndwords: int) -> None:
    e0, e1 = pb.gp_entry(addr, ndwords)
    ctypes.c_uint64.from_address(self.ch.gpfifo.va + 8 * (self.put % self.ch.entries)).value = e0 | e1 << 32
    self.put += 1

  def gp_get(self) -> int: return ctypes.c_uint32.from_address(self.ch.userd.va + pb.USERD_GP_GET).value

  def _commit(self) -> None:
    ctypes.c_uint32.from_address(self.ch.userd.va + pb.USERD_GP_PUT).value = self.put % self.ch.entries
    self.rm.ring_doorbell(self.ch.token)

  def publish(self) -> None:
    """GPFIFO entries for the ring dwords core announced since the last call, GP_PUT, the doorbell."""
    bell = self.doorbell.value
    if bell == self.published: return
    if bell < self.published or bell - self.published > self.ring_dwords:
      raise HCQError(f"{self.name}: doorbell {bell} after {self.published} dwords: not a count of new ring dwords", queue=self.name)
    while self.published < bell:
      deadline = time.monotonic() + 60
      while (self.put - self.gp_get()) % self.ch.entries >= self.ch.entries - 1:   # the GPFIFO ring is full: the GPU drains it
        if time.monotonic() > deadline: raise HCQError(f"{self.name}: the GPFIFO ring stayed full for 60 s ({self.describe()})", queue=self.name)
        time.sleep(1e-4)
      off = self.published % self.ring_dwords
      n = min(bell - self.published, self.ring_dwords - off)
      self._entry(self.ring_va + 4 * off, n)
      self.published += n
    self._commit()

  def busy(self) -> bool: return self.doorbell.value != self.published or self.gp_get() != self.put % self.ch.entries
  def describe(self) -> str:
    return f"{self.name}: ring dwords published {self.published} of {self.doorbell.value}, GP_GET {self.gp_get()} GP_PUT {self.put % self.ch.entries}"

class NVKHCQ(NVHCQ):
  """The HCQDevice of an NVK+NV device (see the module docstring)."""
  kind = "NVK"

  def __init__(self, device: str, rm: nvk.RM, ring_size: int = 1 << 20):
    super().__init__(device, rm.arch, ring_size)
    self.rm, self.simulated = rm, rm.simulated
    if self.simulated: self.faults = rm.os.faults   # type: ignore[attr-defined]  # the simulated GPU reports into one list per driver
    self._seen = {"raised": len(self.faults), "read": len(self.faults)}
    self._channels: dict[str, NVKChannel] = {}
    self._publish = threading.Lock()
    self.closed = False
    self._wake = threading.Event()
    self._publisher: threading.Thread | None = None

  def channel(self, name: str) -> NVKChannel:
    if (c := self._channels.get(name)) is None:
      self._check(name)
      with self._lock:
        if (c := self._channels.get(name)) is None: c = self._channels[name] = NVKChannel(self, name)
    return c

  def queue_buffer(self, kind: str, queue: str) -> Buffer:
    if self._publisher is None or not self._publisher.is_alive():   # started on first use (and again in a forked child)
      with self._lock:
        if self._publisher is None or not self._publisher.is_alive():
          self._publisher = threading.Thread(target=self._publish_loop, name=f"nvk publisher {self.device}", daemon=True)
          self._publisher.start()
    return self.channel(queue).buffers[kind]

  def addr(self, buf: Buffer) -> int: return self.rm.gpu_address(handle_addr(buf), buf.nbytes)

  def publish(self) -> bool:
    """Publishes what core announced on every channel; True when there was something."""
    with self._publish:
      chans = [c for c in list(self._channels.values()) if c.doorbell.value != c.published]
      for c in chans: c.publish()
    return bool(chans)

  def _publish_loop(self) -> None:
    idle = time.monotonic()
    while not self.closed:
      try:
        if self.publish():
          if self.simulated: self.rm.os.kick()   # type: ignore[attr-defined]
          idle = time.monotonic()
      except Exception as e:   # a malformed doorbell: reported by the next wait
        self.faults.append(f"{self.device}: publishing: {e}")
      self._wake.wait(0.0002 if time.monotonic() - idle < 0.5 else 0.01)
      self._wake.clear()

  def _kick(self) -> None:
    # every device instance on this GPU: a channel here may wait on another instance's semaphore, whose work only reaches the
    # GPU once published
    for h in [h for h in _by_device.values() if h.rm is self.rm and not h.closed] or [self]: h.publish()
    if self.simulated: self.rm.os.kick()   # type: ignore[attr-defined]

  def _busy(self) -> list[str]: return [c.describe() for c in list(self._channels.values()) if c.busy()]
  def _describe(self) -> str: return "; ".join(c.describe() for c in self._channels.values())

  def register_program(self, name: str, uops: tuple[UOp, ...], data: Any, image: bytes) -> None:
    # a real GPU runs the cubin's code; the simulated one runs a host build filed under that code
    if self.simulated: self.rm.os.register_program(name, uops, data, image)   # type: ignore[attr-defined]

  def needs_staging(self, other_device: str) -> bool:
    """Other devices' memory is not in this GPU's page tables: copies go through a staging buffer here."""
    if other_device == self.device: return False
    from core.device.registry import Device
    hcq = Device[other_device].hcq
    return not (isinstance(hcq, NVKHCQ) and hcq.rm is self.rm)

  def close(self) -> None:
    self.closed = True
    self._wake.set()
    with self._lock:
      self._channels.clear()
      self._uops.clear()

_driver: PerProcess[nvk.RM] = PerProcess(nvk.RM)   # the process's RM client (an RMError saying what is missing when there is no driver)
_by_device: PerDevice[NVKHCQ] = PerDevice(on_exit=NVKHCQ.close)

def open_device(name: str, arch: str | None) -> tuple[NVKAllocator, NVKHCQ]:
  """The allocator and HCQ object of DEV=NVK+NV[:PTX|CUDA[:ARCH]]: the arch is the GPU's; an ARCH that differs is refused."""
  rm = _driver.get()
  if arch and arch != rm.arch: raise ValueError(f"DEV asks for NVK+NV {arch}, but the GPU behind /dev/nvidiactl is {rm.arch}")
  return NVKAllocator(name, rm), _by_device.get(name, lambda: NVKHCQ(name, rm), keep=lambda h: not h.closed)
