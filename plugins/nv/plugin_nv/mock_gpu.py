"""The software GPU behind MOCK+NV: GPU virtual memory over host memory, GPFIFO channels that fetch entries and decode the
pushbuffer methods of the host, compute and copy classes (pushbuf.py), semaphores, copies, and QMD launches run as host builds
of the same kernels (hostrun.py). Anything malformed is refused with where it is (channel, segment address, dword offset) and
what is wrong; the channel's worker reports it as a fault and the host's wait raises it."""
from __future__ import annotations
import bisect, ctypes, struct, threading, time
from dataclasses import dataclass
from math import prod
from typing import Any, Callable
from plugin_nv import pushbuf as pb
from plugin_nv.qmd import QMD, ArchInfo, address_slot, arch_info, cbuf_fields, program_fields

class MockFault(RuntimeError):
  """A fault of the software GPU: an unmapped address, a malformed method or QMD, a semaphore wait that timed out."""

class MethodError(MockFault):
  def __init__(self, where: str, offset: int, reason: str):
    self.where, self.offset, self.reason = where, offset, reason
    super().__init__(f"{where}, byte offset {offset:#x}: {reason}")

# *** GPU virtual memory ***

class VASpace:
  """GPU virtual addresses of host memory, all below 2**40 (a GPFIFO entry and Ampere's semaphore methods carry 40-bit addresses).
  MOCK+NV's own memory is mapped where it lies (`map(host, size, owner, identity=True)`: the VA is the host address, which its
  allocator keeps below 2**39); other memory (another device's semaphore) gets an alias VA in [2**39, 2**40), handed out
  upwards and never reused."""
  ALIAS_BASE, LIMIT, ALIGN = 1 << 39, 1 << 40, 1 << 12

  def __init__(self) -> None:
    self.lock = threading.Lock()
    self.vas: list[int] = []                          # sorted VA starts
    self.maps: dict[int, tuple[int, int, Any]] = {}   # VA -> (host address, size, owner kept alive)
    self.hosts: list[int] = []                        # sorted host starts
    self.host_va: dict[int, int] = {}                 # host start -> VA
    self.next = self.ALIAS_BASE

  def map(self, host: int, size: int, owner: Any = None, identity: bool = False) -> int:
    with self.lock:
      if identity:
        if host + size > self.ALIAS_BASE: raise MockFault(f"host memory at {host:#x} is above the identity-mapped range (2**39)")
        va = host
      else:
        va = (self.next + self.ALIGN - 1) // self.ALIGN * self.ALIGN
        if va + size > self.LIMIT: raise MockFault(f"GPU virtual address space exhausted mapping {size} bytes")
        self.next = va + max(size, 1)
      bisect.insort(self.vas, va)
      bisect.insort(self.hosts, host)
      self.maps[va], self.host_va[host] = (host, size, owner), va
      return va

  def unmap(self, va: int) -> None:
    with self.lock:
      if (m := self.maps.pop(va, None)) is None: return
      del self.vas[bisect.bisect_left(self.vas, va)]
      del self.hosts[bisect.bisect_left(self.hosts, m[0])]
      self.host_va.pop(m[0], None)

  def va_of(self, host: int) -> int | None:
    """The VA of a host address inside a mapping, None when no mapping holds it."""
    with self.lock:
      i = bisect.bisect_right(self.hosts, host) - 1
      if i < 0: return None
      start = self.hosts[i]
      va = self.host_va[start]
      return va + host - start if host < start + max(self.maps[va][1], 1) else None

  def host(self, va: int, n: int) -> int:
    """The host address of VA range [va, va + n), which must lie in one mapping."""
    with self.lock:
      i = bisect.bisect_right(self.vas, va) - 1
      if i >= 0:
        start = self.vas[i]
        h, size, _ = self.maps[start]
        if va + n <= start + size: return h + va - start
    raise MockFault(f"GPU virtual address range [{va:#x}, {va + n:#x}) is not mapped")

  def host_span(self, va: int) -> tuple[int, int]:
    """The host range [start, end) of the mapping holding `va` (a kernel's buffer argument may touch only that)."""
    with self.lock:
      i = bisect.bisect_right(self.vas, va) - 1
      if i >= 0:
        h, size, _ = self.maps[self.vas[i]]
        if va < self.vas[i] + size: return h, h + size
    raise MockFault(f"GPU virtual address {va:#x} is not mapped")

  def read(self, va: int, n: int) -> bytes: return ctypes.string_at(self.host(va, n), n) if n else b""
  def write(self, va: int, data: bytes) -> None:
    if data: ctypes.memmove(self.host(va, len(data)), data, len(data))
  def u32(self, va: int) -> int: return ctypes.c_uint32.from_address(self.host(va, 4)).value
  def u64(self, va: int) -> int: return ctypes.c_uint64.from_address(self.host(va, 8)).value
  def copy(self, dst: int, src: int, n: int) -> None:
    d, s = self.host(dst, n), self.host(src, n)   # both checked before anything is written
    ctypes.memmove(d, s, n)

# *** programs: host builds filed by their code ***

@dataclass(frozen=True)
class MockProgram:
  code: bytes
  data: Any       # NVProgramData
  build: Any      # hostrun.HostKernel

class ProgramTable:
  """Prepared kernels by their code bytes; a launch finds its kernel by the code at the QMD's program address."""
  def __init__(self) -> None:
    self.lock = threading.Lock()
    self.by_code: dict[bytes, MockProgram] = {}
    self.at: dict[int, MockProgram] = {}

  def add(self, code: bytes, data: Any, build: Any) -> None:
    with self.lock: self.by_code.setdefault(bytes(code), MockProgram(bytes(code), data, build))

  def find(self, va: int, mem: VASpace) -> MockProgram:
    with self.lock: hit = self.at.get(va)
    if hit is not None and mem.read(va, len(hit.code)) == hit.code: return hit
    with self.lock: progs = list(self.by_code.values())
    for p in progs:
      try: found = mem.read(va, len(p.code)) == p.code
      except MockFault: found = False
      if found:
        with self.lock: self.at[va] = p
        return p
    raise MockFault(f"no prepared kernel's code is at the QMD's program address {va:#x}")

PROGRAMS = ProgramTable()

# *** a channel's pushbuffer processor ***

I2M_LAUNCH_PITCH = 1
SCHEDULING_PCAS2 = {2, 3, 9, 0xA, 0xB}     # PCAS_ACTION values that schedule the QMD (SCHEDULE, INVALIDATE_COPY_SCHEDULE, ...)
QUIET_PCAS2 = {0, 1, 8}                   # NOP, INVALIDATE, PREFETCH
COMPUTE_NAMES = {pb.C_NO_OPERATION: "NO_OPERATION", pb.C_WAIT_FOR_IDLE: "WAIT_FOR_IDLE", pb.C_LINE_LENGTH_IN: "LINE_LENGTH_IN",
                 pb.C_LINE_COUNT: "LINE_COUNT", pb.C_OFFSET_OUT_UPPER: "OFFSET_OUT_UPPER", pb.C_OFFSET_OUT: "OFFSET_OUT",
                 pb.C_LAUNCH_DMA: "LAUNCH_DMA", pb.C_LOAD_INLINE_DATA: "LOAD_INLINE_DATA",
                 pb.C_INVALIDATE_SHADER_CACHES: "INVALIDATE_SHADER_CACHES", pb.C_SEND_PCAS_A: "SEND_PCAS_A",
                 pb.C_SEND_SIGNALING_PCAS_B: "SEND_SIGNALING_PCAS_B", pb.C_SEND_SIGNALING_PCAS2_B: "SEND_SIGNALING_PCAS2_B"}
COPY_NAMES = {pb.D_NOP: "NOP", pb.D_LAUNCH_DMA: "LAUNCH_DMA", pb.D_OFFSET_IN_UPPER: "OFFSET_IN_UPPER", pb.D_OFFSET_IN_LOWER: "OFFSET_IN_LOWER",
              pb.D_OFFSET_OUT_UPPER: "OFFSET_OUT_UPPER", pb.D_OFFSET_OUT_LOWER: "OFFSET_OUT_LOWER", pb.D_LINE_LENGTH_IN: "LINE_LENGTH_IN",
              pb.D_LINE_COUNT: "LINE_COUNT"}
HOST_NAMES = {pb.SET_OBJECT: "SET_OBJECT", pb.NOP: "NOP", pb.SEM_ADDR_LO: "SEM_ADDR_LO", pb.SEM_ADDR_HI: "SEM_ADDR_HI",
              pb.SEM_PAYLOAD_LO: "SEM_PAYLOAD_LO", pb.SEM_PAYLOAD_HI: "SEM_PAYLOAD_HI", pb.SEM_EXECUTE: "SEM_EXECUTE", pb.WFI: "WFI"}

@dataclass(frozen=True)
class Launch:
  """One decoded QMD: what a host build needs (addresses are VAs)."""
  qmd_addr: int
  program: int
  grid: tuple[int, int, int]
  block: tuple[int, int, int]
  regs: int
  shared: int
  cbufs: dict[int, tuple[int, int]]   # bank -> (VA, bytes)

class Channel:
  """One GPFIFO channel's engine side: methods of the host class and of the object bound to each subchannel (`engine`: the
  compute or the copy class of `arch`, the only one this channel may bind). `on_launch` runs a decoded QMD."""
  def __init__(self, name: str, arch: str, engine: str, mem: VASpace, on_launch: Callable[[Launch], None] | None = None,
               timeout_s: float = 10.0, stop: Callable[[], bool] = lambda: False):
    self.name, self.info, self.engine, self.mem = name, arch_info(arch), engine, mem
    self.engine_class = self.info.compute_class if engine == "compute" else self.info.copy_class
    self.on_launch, self.timeout_s, self.stop = on_launch, timeout_s, stop
    self.bound: dict[int, int] = {}
    self.regs: dict[int, int] = {}   # last value of each method (per engine: host methods below 0x100 share it)
    self.i2m: list[int] | None = None   # inline data still expected: [destination VA, bytes left, bytes so far...]
    self.i2m_data = bytearray()
    self.log: list[tuple[str, Any]] = []
    self.upper_bits = 17 if self.info.qmd.major == 3 else 25   # OFFSET_*_UPPER width

  # *** segments ***

  def segment(self, va: int, ndwords: int) -> None:
    """Decode and execute one pushbuffer segment of `ndwords` dwords at `va`."""
    where = f"{self.name} pushbuffer segment at {va:#x} ({ndwords} dwords)"
    try: words = struct.unpack(f"<{ndwords}I", self.mem.read(va, 4 * ndwords))
    except MockFault as e: raise MethodError(where, 0, str(e)) from None
    i = 0
    while i < ndwords:
      hdr, at = words[i], 4 * i
      op, count, subch, method = hdr >> 29, (hdr >> 16) & pb.MAX_COUNT, (hdr >> 13) & 7, (hdr & 0xFFF) << 2
      if hdr == pb.DMA_NOP:
        i += 1
        continue
      if op == pb.SEC_OP_END_PB_SEGMENT: return
      if op == pb.SEC_OP_IMMD_DATA_METHOD:
        self._method(where, at, subch, method, count)
        i += 1
        continue
      if op not in (pb.SEC_OP_INC_METHOD, pb.SEC_OP_NON_INC_METHOD, pb.SEC_OP_ONE_INC):
        raise MethodError(where, at, f"method header {hdr:#010x}: SEC_OP {op} (subdevice masks, reserved) is not implemented")
      if count == 0: raise MethodError(where, at, f"method header {hdr:#010x} has count 0")
      if i + 1 + count > ndwords:
        raise MethodError(where, at, f"method header {hdr:#010x} announces {count} data dwords, the segment has {ndwords - i - 1} left")
      for k in range(count):
        m = method + 4 * k if op == pb.SEC_OP_INC_METHOD else method + 4 * min(k, 1) if op == pb.SEC_OP_ONE_INC else method
        self._method(where, at + 4 * (1 + k), subch, m, words[i + 1 + k])
      i += 1 + count
    if self.i2m is not None: raise MethodError(where, 4 * ndwords, f"the segment ends with {self.i2m[1]} bytes of inline data still due")

  def _method(self, where: str, at: int, subch: int, method: int, value: int) -> None:
    try:
      if method < 0x100: self._host(subch, method, value)
      else:
        if subch not in self.bound: raise MockFault(f"method {method:#06x} on subchannel {subch}, which has no object (SET_OBJECT binds one)")
        if self.i2m is not None and method != pb.C_LOAD_INLINE_DATA:
          raise MockFault(f"method {method:#06x} while {self.i2m[1]} bytes of inline data (LOAD_INLINE_DATA) are still due")
        (self._compute if self.engine == "compute" else self._copy)(method, value)
    except MethodError: raise
    except MockFault as e: raise MethodError(where, at, str(e)) from None

  # *** host class ***

  def _host(self, subch: int, method: int, value: int) -> None:
    if method not in HOST_NAMES: raise MockFault(f"host method {method:#06x} is not one the MOCK implements ({', '.join(HOST_NAMES.values())})")
    self.regs[method] = value
    if method == pb.SET_OBJECT:
      cls = value & 0xFFFF
      if cls != self.engine_class:
        raise MockFault(f"SET_OBJECT class {cls:#06x} on subchannel {subch}: this {self.engine} channel runs class {self.engine_class:#06x} (sm_{self.info.sm})")
      self.bound[subch] = cls
    elif method == pb.SEM_EXECUTE: self._semaphore(value)

  def _semaphore(self, v: int) -> None:
    op, wide, stamp = v & 7, (v >> 24) & 1, (v >> 25) & 1
    hi_bits = 8 if self.info.qmd.major == 3 else 25   # SEM_ADDR_HI_OFFSET 7:0 (Ampere), 24:0 (Hopper on)
    hi = self.regs.get(pb.SEM_ADDR_HI, 0)
    if hi >> hi_bits: raise MockFault(f"SEM_ADDR_HI {hi:#x} has bits above {hi_bits}")
    addr = hi << 32 | (self.regs.get(pb.SEM_ADDR_LO, 0) & 0xFFFFFFFC)
    payload = self.regs.get(pb.SEM_PAYLOAD_LO, 0) | (self.regs.get(pb.SEM_PAYLOAD_HI, 0) << 32 if wide else 0)
    if addr % (16 if stamp else 8 if wide else 4): raise MockFault(f"semaphore address {addr:#x} is misaligned for its payload size")
    if op == pb.SEM_OP_RELEASE:
      self.log.append(("release", (addr, payload)))
      if stamp: self.mem.write(addr, struct.pack("<QQ", payload, time.perf_counter_ns()))
      else: self.mem.write(addr, struct.pack("<Q" if wide else "<I", payload))
    elif op in (pb.SEM_OP_ACQUIRE, pb.SEM_OP_ACQ_STRICT_GEQ, pb.SEM_OP_ACQ_CIRC_GEQ):
      self.log.append(("acquire", (addr, payload, op)))
      bits = 64 if wide else 32
      def ok(x: int) -> bool:
        if op == pb.SEM_OP_ACQUIRE: return x == payload
        if op == pb.SEM_OP_ACQ_STRICT_GEQ: return x >= payload
        return (x - payload) & (1 << (bits - 1)) == 0   # circular: x - payload as a signed number is >= 0
      read = self.mem.u64 if wide else self.mem.u32
      deadline, pause = time.monotonic() + self.timeout_s, 2e-5
      while not ok(read(addr)):
        if self.stop(): raise MockFault("the channel was closed during a semaphore acquire")
        if time.monotonic() > deadline:
          raise MockFault(f"semaphore acquire timed out after {self.timeout_s:g} s: *{addr:#x} = {read(addr)}, needs {payload} (operation {op})")
        time.sleep(pause)
        pause = min(2 * pause, 1e-3)
    else: raise MockFault(f"SEM_EXECUTE operation {op} (acquire-and, acquire-nor, reduction) is not implemented")

  # *** compute class ***

  def _compute(self, method: int, v: int) -> None:
    if method not in COMPUTE_NAMES: raise MockFault(f"compute class method {method:#06x} is not one the MOCK implements")
    self.regs[method] = v
    if method in (pb.C_OFFSET_OUT_UPPER,) and v >> self.upper_bits: raise MockFault(f"OFFSET_OUT_UPPER {v:#x} has bits above {self.upper_bits}")
    if method == pb.C_LAUNCH_DMA:
      if not v & I2M_LAUNCH_PITCH: raise MockFault(f"LAUNCH_DMA {v:#x}: block-linear destinations are not implemented (DST_MEMORY_LAYOUT must be PITCH)")
      if (v >> 4) & 3 == 2 or v & 2: raise MockFault(f"LAUNCH_DMA {v:#x}: semaphore completion and reductions are not implemented")
      n, lines = self.regs.get(pb.C_LINE_LENGTH_IN, 0), self.regs.get(pb.C_LINE_COUNT, 0)
      if lines != 1 or n == 0 or n % 4: raise MockFault(f"inline-to-memory of {lines} lines of {n} bytes: the MOCK takes one line of whole dwords")
      dst = self.regs.get(pb.C_OFFSET_OUT_UPPER, 0) << 32 | self.regs.get(pb.C_OFFSET_OUT, 0)
      self.mem.host(dst, n)   # the destination must be mapped before any data comes
      self.i2m, self.i2m_data = [dst, n], bytearray()
    elif method == pb.C_LOAD_INLINE_DATA:
      if self.i2m is None: raise MockFault("LOAD_INLINE_DATA without a LAUNCH_DMA announcing inline data")
      self.i2m_data += struct.pack("<I", v)
      self.i2m[1] -= 4
      if self.i2m[1] == 0:
        self.mem.write(self.i2m[0], bytes(self.i2m_data))
        self.log.append(("i2m", (self.i2m[0], len(self.i2m_data))))
        self.i2m = None
    elif method == pb.C_SEND_SIGNALING_PCAS_B:
      if v & ~3: raise MockFault(f"SEND_SIGNALING_PCAS_B {v:#x} has bits above SCHEDULE")
      if v & 2: self._launch()
    elif method == pb.C_SEND_SIGNALING_PCAS2_B:
      action = v & 0xF
      if action in SCHEDULING_PCAS2: self._launch()
      elif action not in QUIET_PCAS2: raise MockFault(f"SEND_SIGNALING_PCAS2_B action {action:#x} is not implemented")

  def _launch(self) -> None:
    qaddr = self.regs.get(pb.C_SEND_PCAS_A, 0) << 8
    if pb.C_SEND_PCAS_A not in self.regs: raise MockFault("a PCAS schedule before SEND_PCAS_A named a QMD")
    launch = decode_qmd(self.info, self.mem.read(qaddr, self.info.qmd.size), qaddr)
    self.log.append(("launch", launch))
    if self.on_launch is not None: self.on_launch(launch)

  # *** copy class ***

  def _copy(self, method: int, v: int) -> None:
    if method not in COPY_NAMES: raise MockFault(f"copy class method {method:#06x} is not one the MOCK implements")
    self.regs[method] = v
    if method in (pb.D_OFFSET_IN_UPPER, pb.D_OFFSET_OUT_UPPER) and v >> self.upper_bits:
      raise MockFault(f"{COPY_NAMES[method]} {v:#x} has bits above {self.upper_bits}")
    if method != pb.D_LAUNCH_DMA: return
    transfer, sem = v & 3, (v >> 3) & 3
    if sem: raise MockFault(f"LAUNCH_DMA {v:#x}: semaphore releases by the copy engine are not implemented (use the host SEM methods)")
    if v & (1 << 9): raise MockFault(f"LAUNCH_DMA {v:#x}: multi-line copies are not implemented (MULTI_LINE_ENABLE)")
    if v & (1 << 10): raise MockFault(f"LAUNCH_DMA {v:#x}: component remapping is not implemented")
    if (v >> 7) & 3 != 3: raise MockFault(f"LAUNCH_DMA {v:#x}: block-linear layouts are not implemented (SRC/DST_MEMORY_LAYOUT must be PITCH)")
    if (v >> 12) & 3: raise MockFault(f"LAUNCH_DMA {v:#x}: physical addresses are not implemented (SRC/DST_TYPE must be VIRTUAL)")
    if transfer == 0: return
    if transfer == 3: raise MockFault(f"LAUNCH_DMA {v:#x}: DATA_TRANSFER_TYPE 3 is reserved")
    src = self.regs.get(pb.D_OFFSET_IN_UPPER, 0) << 32 | self.regs.get(pb.D_OFFSET_IN_LOWER, 0)
    dst = self.regs.get(pb.D_OFFSET_OUT_UPPER, 0) << 32 | self.regs.get(pb.D_OFFSET_OUT_LOWER, 0)
    n = self.regs.get(pb.D_LINE_LENGTH_IN, 0)
    self.log.append(("copy", (dst, src, n)))
    self.mem.copy(dst, src, n)

MAX_THREADS_PER_CTA = 1024

def decode_qmd(info: ArchInfo, raw: bytes, qaddr: int = 0) -> Launch:
  """The launch a QMD describes, refused when it isn't one this arch can run: version, grid and block, registers, shared memory
  against the carve-outs, constant buffer 0."""
  L = info.qmd
  q = QMD(L, raw)
  where = f"QMD at {qaddr:#x}"
  if q.get("QMD_MAJOR_VERSION") != L.major: raise MockFault(f"{where}: QMD_MAJOR_VERSION {q.get('QMD_MAJOR_VERSION')}, sm_{info.sm} takes {L.major}")
  grid = tuple(q.get(f) for f in L.grid)
  block = tuple(q.get(f"CTA_THREAD_DIMENSION{k}") for k in range(3))
  if 0 in grid: raise MockFault(f"{where}: empty grid {grid}")
  if 0 in block or prod(block) > MAX_THREADS_PER_CTA: raise MockFault(f"{where}: block {block}: 1..{MAX_THREADS_PER_CTA} threads per CTA")
  regs = q.get("REGISTER_COUNT_V" if L.major == 3 else "REGISTER_COUNT")
  if not 0 < regs <= 255: raise MockFault(f"{where}: register count {regs} (1..255)")
  if regs * prod(block) > 65536: raise MockFault(f"{where}: {regs} registers x {prod(block)} threads exceed the SM's 64K registers")
  shared = q.get("SHARED_MEMORY_SIZE_SHIFTED7") << 7 if L.major >= 5 else q.get("SHARED_MEMORY_SIZE")
  target = (q.get("TARGET_SM_CONFIG_SHARED_MEM_SIZE") - 1) * 4 * 1024
  if (q.get("TARGET_SM_CONFIG_SHARED_MEM_SIZE") - 1) * 4 not in info.carveouts_kib:
    raise MockFault(f"{where}: TARGET_SM_CONFIG_SHARED_MEM_SIZE {q.get('TARGET_SM_CONFIG_SHARED_MEM_SIZE')} is no sm_{info.sm} carve-out")
  if shared > target: raise MockFault(f"{where}: {shared} bytes of shared memory exceed the {target // 1024} KiB carve-out it asks for")
  lo, hi = program_fields(L)
  program = (q.get(lo) | q.get(hi) << 32) << address_slot(L, lo)[1]
  cbufs: dict[int, tuple[int, int]] = {}
  clo, chi = cbuf_fields(L)
  for bank in range(8):
    if not q.get("CONSTANT_BUFFER_VALID", bank): continue
    cbufs[bank] = ((q.get(clo, bank) | q.get(chi, bank) << 32) << address_slot(L, clo, bank)[1], q.get("CONSTANT_BUFFER_SIZE_SHIFTED4", bank) << 4)
  if 0 not in cbufs or cbufs[0][1] == 0: raise MockFault(f"{where}: constant buffer 0 (the kernel's parameters) is not valid")
  return Launch(qaddr, program, grid, block, regs, shared, cbufs)   # type: ignore[arg-type]

def run_launch(launch: Launch, mem: VASpace) -> None:
  """Run a decoded launch with the host build of the kernel whose code is at its program address; the parameters come from
  constant buffer 0 at the offsets prep read from the cubin (buffer VAs become host pointers)."""
  p = PROGRAMS.find(launch.program, mem)
  data, build = p.data, p.build
  name = data.name
  if launch.regs != data.regs: raise MockFault(f"{name}: the QMD says {launch.regs} registers, the cubin {data.regs}")
  if launch.shared < data.shared_size: raise MockFault(f"{name}: the QMD gives {launch.shared} bytes of shared memory, the kernel needs {data.shared_size}")
  cb_addr, cb_size = launch.cbufs[0]
  if cb_size < data.cbank0_size: raise MockFault(f"{name}: constant buffer 0 is {cb_size} bytes, the kernel's bank 0 is {data.cbank0_size}")
  for bank, _, size in data.const_banks:
    if bank not in launch.cbufs or launch.cbufs[bank][1] < size: raise MockFault(f"{name}: constant bank {bank} ({size} bytes) is not bound by the QMD")
  if tuple(launch.block) != tuple(build.local_size):
    raise MockFault(f"{name}: block {launch.block}, but the kernel was built for {build.local_size} threads per block")
  cb = mem.read(cb_addr, cb_size)
  args: list[int] = []
  spans: list[tuple[int, int]] = []   # the kernel's accesses through each buffer are checked against its mapping (a GPU would fault)
  for i, off in enumerate(data.arg_offsets[:build.nbufs + build.nvars]):
    if i < build.nbufs:
      va = struct.unpack_from("<Q", cb, off)[0]
      try: args.append(mem.host(va, 1))
      except MockFault: raise MockFault(f"{name}: buffer argument {i} is {va:#x}, not mapped GPU memory") from None
      spans.append(mem.host_span(va))
    else: args.append(struct.unpack_from("<i", cb, off)[0])
  build.run(args, launch.grid, launch.block, spans)
