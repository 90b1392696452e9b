"""The MOCK+AMD device: host memory as device memory, PM4/SDMA rings run by mock.py's processors on one worker thread per queue.

Memory: every allocation is host memory (ctypes, 256-byte aligned) whose device address is its host address, so core, the
submit program and the processors all use the same numbers. The processors may touch only memory this interface allocated
(a process-wide registry; any other address is a fault naming it): copies from other devices go through a staging buffer
(`needs_staging`), as they would into a real GPU.

Queues: COMPUTE:0 (PM4) and COPY:0 (SDMA). Core's submit program copies commands into the ring and stores the new write
pointer into the doorbell; each queue's worker thread notices the doorbell change by polling it (it sleeps between polls and
`wait_signal` wakes it at once, so a submit followed by a wait costs no polling delay) and runs the processor over the new
ring bytes. Waits between queues (WAIT_REG_MEM / POLL_REGMEM) block only their own worker.

Dispatches: at pm_prep_program time the device builds each kernel for the host (hostbuild.py) and files it under its code
bytes; a DISPATCH_DIRECT finds the program by the code at COMPUTE_PGM_LO/HI (cached by address, re-checked every time),
reads its arguments from the kernarg buffer (address from the user SGPRs) and runs the host build over the packet's grid.
"""
from __future__ import annotations
import atexit, bisect, collections, ctypes, struct, threading, time, weakref
from dataclasses import dataclass
from typing import Any
from core.device.allocator import BufferSpec, LRUAllocator
from core.device.buffer import Buffer
from core.device.compiled import Compiled
from core.hcq import HCQError
from core.hcq.queue_ir import placeholder
from core.ir.dtype import DType, dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from plugin_amd.mock import AddressSpace, Actions, COMPARE, Dispatch, MockError, PM4Processor, SDMAProcessor
from plugin_amd.hostbuild import HostBuild, host_build

ALIGN = 256   # COMPUTE_PGM_LO/HI hold address >> 8: program images (and everything else) start 256-byte aligned

# *** memory: host allocations, registered so the processors can check every address they are given ***

class HostMemory(AddressSpace):
  """The device address space of every MOCK+AMD instance in this process: host memory this interface allocated. (The simulated
  KFD driver, kfd_sim.py, keeps one more: what its GPU's page tables map.)"""
  def __init__(self, what: str = "MOCK+AMD memory") -> None:
    super().__init__()
    self.what = what   # named in faults: "... is not <what>"
    self.starts: list[int] = []
    self.sizes: dict[int, int] = {}
    self.owners: dict[int, Any] = {}
  def register(self, addr: int, size: int, owner: Any) -> None:
    """`owner` (what holds the memory) is kept alive until `unregister`: registration follows explicit frees, never the
    garbage collector (a weakref callback fires before a `__del__` that hands the memory to the LRU cache, which reuses it)."""
    with self.lock:
      bisect.insort(self.starts, addr)
      self.sizes[addr], self.owners[addr] = size, owner
  def unregister(self, addr: int) -> None:
    with self.lock:
      if self.sizes.pop(addr, None) is not None:
        del self.starts[bisect.bisect_left(self.starts, addr)]
        del self.owners[addr]
  def contains(self, addr: int, n: int) -> bool:
    with self.lock:
      i = bisect.bisect_right(self.starts, addr) - 1
      return i >= 0 and addr + n <= self.starts[i] + self.sizes[self.starts[i]]
  def view(self, addr: int, n: int) -> memoryview:
    if n == 0: return memoryview(b"")
    if not self.contains(addr, n): raise MockError(f"device address range [{addr:#x}, {addr + n:#x}) is not {self.what}")
    return memoryview((ctypes.c_uint8 * n).from_address(addr)).cast("B")
  def copy(self, dst: int, src: int, n: int) -> None:
    self.view(dst, n), self.view(src, n)   # both checked before anything is written
    ctypes.memmove(dst, src, n)

MEMORY = HostMemory()

class MockAllocator(LRUAllocator):
  """Host memory as ctypes arrays, 256-byte aligned, registered as MOCK+AMD device memory."""
  def _alloc(self, size: int, options: BufferSpec) -> Any:
    if options.external_ptr is not None: return (ctypes.c_uint8 * size).from_address(options.external_ptr)
    raw = (ctypes.c_uint8 * (size + ALIGN - 1))()
    buf = (ctypes.c_uint8 * size).from_buffer(raw, -ctypes.addressof(raw) % ALIGN)
    MEMORY.register(ctypes.addressof(buf), size, raw)
    return buf
  def _free(self, opaque: Any, options: BufferSpec) -> None: MEMORY.unregister(ctypes.addressof(opaque))
  def _offset(self, opaque: Any, size: int, offset: int) -> Any: return (ctypes.c_uint8 * size).from_buffer(opaque, offset)
  def _as_buffer(self, opaque: Any) -> memoryview: return memoryview(opaque).cast("B")
  def _copyin(self, dest: Any, src: memoryview) -> None: memoryview(dest).cast("B")[:] = src.cast("B")
  def _copyout(self, dest: memoryview, src: Any) -> None: dest.cast("B")[:] = memoryview(src).cast("B")

def _addr(b: Buffer) -> int:
  if not b.is_allocated(): b.allocate()
  return ctypes.addressof(b._buf)

# *** programs: host builds filed under their code bytes ***

@dataclass(frozen=True)
class MockProgram:
  code: bytes          # image[entry_offset:]: what must be in memory at the dispatched program address
  data: Any            # AMDProgramData
  build: HostBuild

class ProgramTable:
  """Prepared programs by their code, and the addresses dispatches found them at."""
  KEY = 32   # programs are indexed by their first KEY code bytes (shorter ones are kept in one list)
  def __init__(self) -> None:
    self.by_head: dict[bytes, list[MockProgram]] = {}
    self.short: list[MockProgram] = []
    self.at: dict[int, MockProgram] = {}
    self.lock = threading.Lock()
  def add(self, image: bytes, data: Any, build: HostBuild) -> None:
    p = MockProgram(bytes(image[data.entry_offset:]), data, build)
    with self.lock:
      lst = self.by_head.setdefault(p.code[:self.KEY], []) if len(p.code) >= self.KEY else self.short
      if not any(q.code == p.code for q in lst): lst.append(p)
  def find(self, addr: int, mem: HostMemory | None = None) -> MockProgram:
    """The program whose code is at `addr` now (memory is re-read: a program buffer may have been reused for another one)."""
    mem = MEMORY if mem is None else mem
    def there(p: MockProgram) -> bool: return mem.contains(addr, len(p.code)) and ctypes.string_at(addr, len(p.code)) == p.code
    with self.lock: hit = self.at.get(addr)
    if hit is not None and there(hit): return hit
    head = mem.read(addr, self.KEY) if mem.contains(addr, self.KEY) else None
    with self.lock: cands = list(self.by_head.get(head, ())) + self.short if head is not None else list(self.short)
    for p in cands:
      if there(p):
        with self.lock: self.at[addr] = p
        return p
    raise MockError(f"no prepared program's code is at {addr:#x} (COMPUTE_PGM_LO/HI): nothing was prepared for this device at that "
                    f"address, or its image was overwritten")

PROGRAMS = ProgramTable()

# *** what the processors do ***

class MockActions(Actions):
  """Copies, signals and waits on host memory; dispatches run the host build of the program at the dispatched address."""
  def __init__(self, timeout_s: float, mem: HostMemory | None = None, foreign: bool = True):
    # mem: the address space the processors may touch; foreign: whether a wait may also poll another HCQ device's timeline signal
    self.hmem = MEMORY if mem is None else mem
    super().__init__(self.hmem, timeout_s=timeout_s)
    self.foreign = foreign
    self.log: Any = collections.deque(maxlen=256)   # the base class logs every action: keep the recent ones only
    self.stop = False
  def copy(self, dst: int, src: int, n: int) -> None:
    self.log.append(("copy", (dst, src, n)))
    self.hmem.copy(dst, src, n)
  def wait(self, addr: int, ref: int, mask: int, func: int) -> None:
    self.log.append(("wait", (addr, ref, mask, func)))
    name, cmp = COMPARE[func]
    ok = self.hmem.contains(addr, 4) or (self.foreign and addr in foreign_signals(addr))
    word = ctypes.c_uint32.from_address(addr) if ok else None
    if word is None:
      raise MockError(f"wait address {addr:#x} is neither {self.hmem.what}" + (" nor another HCQ device's timeline signal" if self.foreign else ""))
    deadline, pause = time.monotonic() + self.timeout_s, 2e-5
    while not cmp(word.value & mask, ref):
      if self.stop: raise MockError("the queue was closed during a wait")
      if time.monotonic() > deadline:
        raise MockError(f"wait timed out after {self.timeout_s:g} s: *{addr:#x} & {mask:#x} = {word.value & mask:#x}, needs {name} {ref:#x}")
      time.sleep(pause)
      pause = min(pause * 2, 1e-3)
  def dispatch(self, d: Dispatch) -> None:
    self.log.append(("dispatch", d.pgm_addr))
    try: run_dispatch(d, self.hmem)
    except MockError: raise
    except Exception as e: raise MockError(f"{type(e).__name__}: {e}") from e   # the processor adds the packet's offset

_foreign: set[int] = set()

def foreign_signals(addr: int) -> set[int]:
  """Addresses of the timeline signals of the other opened HCQ devices (a cross-device dependency makes a queue here wait on
  one: like host-visible signal memory every GPU maps). Looked up again when `addr` is not among them yet."""
  if addr in _foreign: return _foreign
  from core.device.registry import Device
  for d in Device.opened():
    hcq = getattr(Device[d], "hcq", None)
    if hcq is None or isinstance(hcq, MockHCQ) or not hasattr(hcq, "queue"): continue
    for q in hcq.queues:
      b = getattr(hcq.queue(q), "buffers", {}).get("timeline_signal")   # the CPU plugin's queues keep their buffers like ours
      if b is not None: _foreign.add(_addr(b))
  return _foreign

def run_dispatch(d: Dispatch, mem: HostMemory | None = None) -> None:
  """Execute one decoded DISPATCH_DIRECT with the host build of the program at its address (`mem`: the address space it may use)."""
  mem = MEMORY if mem is None else mem
  p = PROGRAMS.find(d.pgm_addr, mem)
  data, build = p.data, p.build
  for reg, want in (("COMPUTE_PGM_RSRC1", data.rsrc1), ("COMPUTE_PGM_RSRC2", data.rsrc2)):
    if d.registers.get(reg) != want: raise MockError(f"{data.name}: {reg} is {d.registers.get(reg, 0):#x}, its kernel descriptor says {want:#x}")
  if d.wave32 != data.wave32: raise MockError(f"{data.name}: dispatched as wave{32 if d.wave32 else 64}, built for wave{data.wave_size}")
  if d.block != build.local_size:
    raise MockError(f"{data.name}: workgroup size {d.block}, but the kernel was built for {build.local_size} work-items per workgroup")
  sgprs = {name: (first, n) for name, first, n in data.user_sgprs}
  if "kernarg_segment_ptr" not in sgprs: raise MockError(f"{data.name}: the kernel takes no kernarg segment pointer")
  k = sgprs["kernarg_segment_ptr"][0]
  kernargs = d.user_data[k] | d.user_data[k + 1] << 32
  if not mem.contains(kernargs, max(data.kernarg_size, 1)):
    raise MockError(f"{data.name}: kernarg buffer {kernargs:#x} ({data.kernarg_size} bytes) is not {mem.what}")
  nargs = build.nbufs + build.nvars
  if len(data.arg_offsets) < nargs: raise MockError(f"{data.name}: {len(data.arg_offsets)} argument offsets for {nargs} arguments")
  args = []
  for i, off in enumerate(data.arg_offsets[:nargs]):
    if i < build.nbufs:
      a = mem.u64(kernargs + off)
      if not mem.contains(a, 1): raise MockError(f"{data.name}: buffer argument {i} is {a:#x}, not {mem.what}")
    else: a = struct.unpack("<i", mem.view(kernargs + off, 4))[0]
    args.append(a)
  build.run(args, d.grid, d.block)

# *** queues ***

class RingWorker:
  """The command processor of one ring: a thread that polls a doorbell and runs `proc` over the ring bytes it announces.
  `unit`: bytes per doorbell count (1: byte counts, core's protocol and the SDMA engine's; 4: dwords, what a PM4 compute queue's
  write pointer counts). `rptr_addr`: where to report the read pointer (in units) after each batch, as the hardware does; the
  MOCK queues have none. Shared by the MOCK queues and the simulated KFD driver's queues (kfd_sim.py)."""
  def __init__(self, label: str, proc: Any, ring: Any, doorbell_addr: int, faults: list[str], unit: int = 1, rptr_addr: int | None = None):
    self.label, self.proc, self.ring, self.unit, self.faults = label, proc, ring, unit, faults
    self.doorbell = ctypes.c_uint64.from_address(doorbell_addr)
    self.rptr_word = ctypes.c_uint64.from_address(rptr_addr) if rptr_addr is not None else None
    self.rptr = 0   # in bytes
    self.state = "idle"
    self.closed = False
    self.start()

  def start(self) -> None:
    """Start the thread (again, in a forked child, which has none of the parent's threads; the ring and rptr carry over)."""
    self.kick = threading.Event()
    self.thread = threading.Thread(target=self._loop, name=f"mock {self.label}", daemon=True)
    self.thread.start()

  def announced(self) -> int: return self.doorbell.value * self.unit   # bytes the doorbell announces

  def _loop(self) -> None:
    idle_since = time.monotonic()
    while not self.closed:
      bell = self.announced()
      if bell != self.rptr:
        self._run(bell)
        idle_since = time.monotonic()
        continue
      # poll the doorbell: often right after work, rarely when idle for a while; wait_signal's kick wakes us at once
      self.kick.wait(0.001 if time.monotonic() - idle_since < 0.5 else 0.02)
      self.kick.clear()

  def _run(self, bell: int) -> None:
    self.state = f"running ring bytes [{self.rptr:#x}, {bell:#x})"
    ring = self.ring() if callable(self.ring) else self.ring
    try: self.rptr = self.proc.run(ring, self.rptr, bell)
    except Exception as e:   # a fault: report it, drop what is left of this submission, keep serving later ones
      self.faults.append(f"{self.label}: {type(e).__name__}: {e}")
      self.rptr = bell
    finally:
      del self.proc.packets[:-64]
      if self.rptr_word is not None: self.rptr_word.value = self.rptr // self.unit
      self.state = "idle"

  def describe(self) -> str: return f"read {self.rptr:#x} of {self.announced():#x} ({self.state})"
  def close(self) -> None:
    self.closed = True
    if hasattr(self.proc.actions, "stop"): self.proc.actions.stop = True   # releases a WAIT in progress
    self.kick.set()
    self.thread.join(timeout=5)

class MockHWQueue:
  """One queue: its ring, wptr, doorbell and timeline signal (device buffers), a processor and the worker thread that runs it."""
  def __init__(self, device: str, name: str, arch: str, ring_size: int, timeout_s: float, faults: list[str]):
    self.device, self.name, self.ring_size = device, name, ring_size
    opts = BufferSpec(nolru=True)   # fresh memory: it must start zeroed
    self.buffers = {"ring": Buffer(device, ring_size // 4, dtypes.uint32, opts).allocate()}
    for k in ("wptr", "doorbell", "timeline_signal"): self.buffers[k] = Buffer(device, 1, dtypes.uint64, opts).allocate()
    self.actions = MockActions(timeout_s)
    self.proc = PM4Processor(arch, MEMORY, self.actions) if name.startswith("COMPUTE") else SDMAProcessor(arch, MEMORY, self.actions)
    self.faults = faults   # the device's fault reports (shared by its queues, only appended to)
    self.worker = RingWorker(f"{device} {name}", self.proc, lambda: self.buffers["ring"]._buf, _addr(self.buffers["doorbell"]), faults)
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
  def describe(self) -> str: return f"{self.name} {self.worker.describe()}"
  def close(self) -> None:
    self.actions.stop = True
    self.worker.close()

# *** the HCQ object ***

_PER_QUEUE = ("ring", "wptr", "doorbell", "timeline_signal")

class AMDHCQBase:
  """What the MOCK+AMD and KFD+AMD HCQ objects share: queue names and ring sizes, the buffers behind placeholders
  (bufferize.py), scratch, host builds, fault reports, host-side waits. A subclass provides `queue_buffer(kind, queue)` (the
  Buffer of a per-queue tag), `_kick()` (make the queues look at their doorbells now) and `_busy()` (queues with work left)."""
  queues = ("COMPUTE:0", "COPY:0")
  kind = "AMD"   # named in fault reports

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
    # COMPUTE_TMPRING_SIZE: WAVES [11:0], WAVESIZE [24:12] in 256-dword units
    return 1 | ((scratch * 64 + 1023) // 1024) << 12

  def ring_size(self, queue: str) -> int:
    self._check(queue)
    return self._ring_size

  def _check(self, queue: str) -> None:
    if queue not in self.queues: raise ValueError(f"{self.device} has no queue {queue!r}; its queues are {', '.join(self.queues)}")

  def queue_buffer(self, kind: str, queue: str) -> Buffer: raise NotImplementedError
  def _kick(self) -> None: pass
  def _busy(self) -> list[str]: return []
  def _describe(self) -> str: return ""

  # *** buffers behind placeholders (bufferize.py) ***

  def fresh_buffer(self, tag: Any, dtype: DType, size: int) -> Buffer:
    return Buffer(self.device, max(size, 1), dtype, BufferSpec(nolru=True)).allocate()

  def buffer_uop(self, tag: Any, dtype: DType, size: int) -> UOp:
    """The real BUFFER uop of a placeholder: per-queue buffers exist once, anything else is a fresh allocation."""
    if isinstance(tag, tuple) and len(tag) == 2 and tag[0] in _PER_QUEUE:
      if (u := self._uops.get(tag)) is None:
        b = self.queue_buffer(tag[0], tag[1])
        u = self._uops[tag] = UOp.new_buffer(self.device, b.size, b.dtype)
        self._owned[u] = b
      return u
    u = UOp.new_buffer(self.device, max(size, 1), dtype)
    self._owned[u] = self.fresh_buffer(tag, dtype, size)
    return u

  def buffer_of(self, u: UOp) -> Buffer | None: return self._owned.get(u)

  def register_program(self, spec: Any, data: Any, image: bytes) -> None:
    """pm_prep_program: build the kernel for the host and file it under its code (the software command processors run it)."""
    PROGRAMS.add(image, data, host_build(spec.name, spec.uops))

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

  def wait_signal(self, signal_buf: Buffer, value: int, timeout_s: float | None = None) -> None:
    from core.helpers import HCQ_TIMEOUT
    timeout_s = float(HCQ_TIMEOUT.value) if timeout_s is None else timeout_s
    self._kick()
    sig = ctypes.c_uint64.from_address(_addr(signal_buf))
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

class MockHCQ(AMDHCQBase):
  """`Compiled.hcq` of a MOCK+AMD device (see the module docstring)."""
  kind = "MOCK"

  def __init__(self, device: str, arch: str, ring_size: int = 1 << 20):
    super().__init__(device, arch, ring_size)
    self._queues: dict[str, MockHWQueue] = {}

  def queue(self, name: str) -> MockHWQueue:
    if (q := self._queues.get(name)) is not None:
      if not q.thread.is_alive() and not q.closed:
        with self._lock:
          if not q.thread.is_alive(): q.start()
      return q
    self._check(name)
    from core.helpers import HCQ_TIMEOUT
    with self._lock:
      if (q := self._queues.get(name)) is None:
        # a queue's own WAIT gives up later than the host's wait, which reports a timeout (and releases the WAIT) first
        q = self._queues[name] = MockHWQueue(self.device, name, self.arch, self._ring_size, 3 * float(HCQ_TIMEOUT.value), self.faults)
    return q

  def queue_buffer(self, kind: str, queue: str) -> Buffer: return self.queue(queue).buffers[kind]
  def _kick(self) -> None:
    for name in self.queues: self.queue(name).kick.set()
  def _busy(self) -> list[str]:
    busy = []
    for q in list(self._queues.values()):
      q.kick.set()
      if q.rptr != q.doorbell.value: busy.append(q.describe())
    return busy
  def _describe(self) -> str: return "; ".join(q.describe() for q in self._queues.values())

  def needs_staging(self, other: str) -> bool:
    # the processors reach only MOCK+AMD memory: another device's buffers are copied through a staging buffer here
    from core.device.registry import Device
    return not isinstance(getattr(Device[other], "hcq", None), MockHCQ)

  def close(self) -> None:
    with self._lock:
      for q in self._queues.values(): q.close()
      self._queues.clear()
      self._uops.clear()

_by_device: dict[str, MockHCQ] = {}
_hcq_lock = threading.Lock()

def _close_all() -> None:
  # stop the workers before the interpreter tears down what a running dispatch may still use
  for h in list(_by_device.values()): h.close()
atexit.register(_close_all)

def device_hcq(device: str, arch: str) -> MockHCQ:
  """One HCQ object per device instance and process (like the hardware queues): reopening the device keeps the queues that
  submissions core cached point at."""
  with _hcq_lock:
    if (h := _by_device.get(device)) is None or h.arch != arch: h = _by_device[device] = MockHCQ(device, arch)
  return h

class _NoDirectPath:
  """MOCK+AMD runs kernels only through its queues (core's HCQ pipeline)."""
  def __init__(self, name: str, lib: bytes):
    raise NotImplementedError(f"MOCK+AMD runs kernel {name} only through its command queues (core's HCQ pipeline), not one call at a time")

def make_mock_device(name: str, target: Any) -> Compiled:
  """The Compiled device for DEV=MOCK+AMD[:LLVM[:ARCH]] (default arch gfx1100)."""
  from plugin_amd import make_llvm
  from plugin_amd.renderer import arch_info
  arch = arch_info(getattr(target, "arch", None)).name
  renderer, compiler = make_llvm(arch)
  renderer.device = name
  dev = Compiled(name, MockAllocator(name), renderer, compiler, _NoDirectPath, target)
  hcq = device_hcq(name, arch)
  dev.hcq = hcq  # type: ignore[attr-defined]
  dev.synchronize = hcq.synchronize  # type: ignore[method-assign]
  return dev

# *** pm_prep_program for MOCK+AMD: the plugin's own preparation, plus the host build filed under the program's code ***

def _prep(ctx: Any, prog: UOp) -> UOp | None:
  from plugin_amd.prep import pm_prep_program as amd_prep
  out = amd_prep.rewrite(prog, ctx)
  if out is None: return None
  # the HCQ object files the host build when it runs kernels in software (MOCK, the simulated KFD driver)
  if (register := getattr(ctx, "register_program", None)) is not None: register(prog.arg, out.arg, out.src[1].arg)
  return out

def _unprepared(p: UOp) -> bool:
  from plugin_amd.prep import _is_unprepared
  return _is_unprepared(p)

pm_prep_program = PatternMatcher([
  (UPat(Ops.PROGRAM, src=(UPat(Ops.DEVICE), UPat(Ops.BINARY)), name="prog", custom=_unprepared), _prep),
], name="mock amd prep program")

# *** pm_lower for MOCK+AMD: lower.py's rules, plus barriers on a queue nobody names ***

def _mock_barrier(ctx: Any, cmd: UOp) -> UOp | None:
  # Core's encode stage rewrites one command at a time and does not say which queue it is for; a BARRIER carries no hint either
  # (lower.py encodes it when ctx.queue is set). The MOCK processors finish every packet (a dispatch runs to its end, a copy is
  # done) before decoding the next, so on this device a barrier needs no packet: it is encoded as no words at all.
  from plugin_amd.lower import queue_of
  return None if queue_of(ctx, cmd) is not None else UOp(Ops.INS, dtypes.void, (), (b"", ()))

def _pm_lower() -> PatternMatcher:
  from plugin_amd.lower import pm_lower_amd
  return PatternMatcher([(UPat(Ops.BARRIER, src=(), name="cmd"), _mock_barrier)]) + pm_lower_amd

pm_lower = _pm_lower()
