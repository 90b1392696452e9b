"""The MOCK+AMD device: host memory as device memory, PM4/SDMA rings run by mock_cp.py's processors on one worker thread per queue.

Memory: every allocation is host memory (ctypes, 256-byte aligned) whose device address is its host address, so core, the
submit program and the processors all use the same numbers. The processors may touch only memory this interface allocated
(a process-wide registry; any other address is a fault naming it): copies from other devices go through a staging buffer
(`needs_staging`), as they would into a real GPU.

Queues: COMPUTE:0 (PM4) and COPY:0 (SDMA), with the hardware's ring layouts (runtime.AMDHCQ.ring_layout: the compute write
pointer counts dwords, the SDMA one bytes, and an SDMA packet never wraps). Core's submit program copies commands into the ring
and stores the new write pointer into the doorbell; each queue's worker thread notices the doorbell change by polling it (it
sleeps between polls and `wait_signal` or a submit nobody waits for wakes it at once, so neither costs a polling delay) and runs the
processor over the new ring bytes. Waits between queues (WAIT_REG_MEM / POLL_REGMEM) block only their own worker.

Dispatches: at pm_prep_program time the device builds each kernel for the host (core.codegen.hostbuild) and files it under its code
bytes (register_program); a DISPATCH_DIRECT finds the program by the code at COMPUTE_PGM_LO/HI (cached by address, re-checked
every time), reads its arguments from the kernarg buffer (address from the user SGPRs) and runs the host build over the
packet's grid.
"""
from __future__ import annotations
import ctypes, threading
from typing import Any
from core.device.allocator import BufferSpec
from core.device.host_memory import HostArrayAllocator, aligned_array
from core.device.buffer import Buffer
from core.device.hcq import handle_addr, PerDevice, WorkerQueuesHCQ
from core.ir.dtype import dtypes
from core.ir.ops import UOp
from plugin_amd.mock_cp import MEMORY, MockActions, PM4Processor, RingWorker, SDMAProcessor, register_program
from plugin_amd.renderer import arch_info
from plugin_amd.runtime import AMDHCQ, timeline_signal_addrs

ALIGN = 256   # COMPUTE_PGM_LO/HI hold address >> 8: program images (and everything else) start 256-byte aligned

class MockAllocator(HostArrayAllocator):
  """Host memory as ctypes arrays, 256-byte aligned, registered as MOCK+AMD device memory (mock_cp.MEMORY)."""
  def _alloc(self, size: int, options: BufferSpec) -> Any:
    if options.external_ptr is not None: return (ctypes.c_uint8 * size).from_address(options.external_ptr)
    buf, raw = aligned_array(size, ALIGN)
    MEMORY.register(ctypes.addressof(buf), size, raw)
    return buf
  def _free(self, opaque: Any, options: BufferSpec) -> None: MEMORY.unregister(ctypes.addressof(opaque))

# *** waits on other devices' timeline signals ***

_foreign: set[int] = set()

def is_foreign_signal(addr: int) -> bool:
  """Whether `addr` is a timeline signal of another opened HCQ device that is not MOCK+AMD (a cross-device dependency makes a
  queue here wait on one: like host-visible signal memory every GPU maps). Looked up again when `addr` is not known yet."""
  if addr in _foreign: return True
  from core.device.registry import Device
  for d in Device.opened():
    if not isinstance(hcq := Device[d].hcq, MockHCQ): _foreign.update(a for a, _ in timeline_signal_addrs(hcq))
  return addr in _foreign

# *** queues ***

class MockHWQueue:
  """One queue: its ring, wptr, doorbell and timeline signal (device buffers), a processor and the worker thread that runs it,
  reading the doorbell in `unit`s (the queue's RingLayout.unit)."""
  def __init__(self, device: str, name: str, arch: str, ring_size: int, unit: int, timeout_s: float, faults: list[str]):
    self.device, self.name, self.ring_size = device, name, ring_size
    opts = BufferSpec(nolru=True)   # fresh memory: it must start zeroed
    self.buffers = {"ring": Buffer(device, ring_size // 4, dtypes.uint32, opts).allocate()}
    for k in ("wptr", "doorbell", "timeline_signal"): self.buffers[k] = Buffer(device, 1, dtypes.uint64, opts).allocate()
    self.actions = MockActions(timeout_s, MEMORY, foreign=is_foreign_signal)
    self.proc = PM4Processor(arch, MEMORY, self.actions) if name.startswith("COMPUTE") else SDMAProcessor(arch, MEMORY, self.actions)
    self.faults = faults   # the device's fault reports (shared by its queues, only appended to)
    self.worker = RingWorker(f"{device} {name}", self.proc, lambda: self.buffers["ring"]._buf, handle_addr(self.buffers["doorbell"]),
                             faults, unit=unit)
    self.doorbell = self.worker.doorbell

  # the worker's state, under the names the HCQ object and the tests use
  @property
  def rptr(self) -> int: return self.worker.rptr
  @property
  def thread(self) -> threading.Thread: return self.worker.thread
  @property
  def kick(self) -> threading.Event: return self.worker.kick
  @property
  def closed(self) -> bool: return self.worker.closed
  def start(self) -> None: self.worker.start()
  def busy(self) -> bool: return self.worker.busy()
  def describe(self) -> str: return f"{self.name} {self.worker.describe()}"
  def close(self) -> None:
    self.actions.stop = True
    self.worker.close()

# *** the HCQ object ***

class MockHCQ(WorkerQueuesHCQ[MockHWQueue], AMDHCQ):
  """The HCQDevice of a MOCK+AMD device (see the module docstring)."""
  kind = "MOCK"

  def new_queue(self, name: str) -> MockHWQueue:
    return MockHWQueue(self.device, name, self.arch, self._ring_size, self.ring_layout(name).unit, self.queue_timeout_s(), self.faults)

  def register_program(self, name: str, uops: tuple[UOp, ...], data: Any, image: bytes) -> None:
    # the software command processor runs a host build of each kernel, found by the code a dispatch points at
    register_program(name, uops, data, image)

  def needs_staging(self, other_device: str) -> bool:
    # the processors reach only MOCK+AMD memory: another device's buffers are copied through a staging buffer here
    from core.device.registry import Device
    return not isinstance(Device[other_device].hcq, MockHCQ)

# closed at exit: the workers stop before the interpreter tears down what a running dispatch may still use
_by_device: PerDevice[MockHCQ] = PerDevice(on_exit=MockHCQ.close)

def device_hcq(device: str, arch: str) -> MockHCQ:
  """One HCQ object per device instance and process (like the hardware queues): reopening the device keeps the queues that
  submissions core cached point at."""
  return _by_device.get(device, lambda: MockHCQ(device, arch), keep=lambda h: h.arch == arch)

def open_device(name: str, arch: str | None) -> tuple[MockAllocator, MockHCQ]:
  """The allocator and HCQ object of DEV=MOCK+AMD[:LLVM[:ARCH]] (runtime.make_device builds the device; default arch gfx1100)."""
  return MockAllocator(name), device_hcq(name, arch_info(arch).name)
