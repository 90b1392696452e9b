"""The software command processor that MOCK+AMD and the simulated KFD driver (kfd_sim.py) run: decodes PM4 (compute) and SDMA
(copy) rings word by word and acts on host memory; dispatches run the host build (core.codegen.hostbuild) filed for the code they point at;
a worker thread per ring serves its doorbell."""
from __future__ import annotations
import bisect, collections, ctypes, struct, threading, time
from dataclasses import dataclass, field
from typing import Any, Callable
from plugin_amd import pm4, sdma
from core.codegen.hostbuild import HostBuild
from plugin_amd.regs import gen_of, sh_offset, sh_name, SH_REG_START, DISPATCH_INITIATOR_COMPUTE_SHADER_EN, \
  DISPATCH_INITIATOR_CS_W32_EN, NUM_USER_DATA

class MockError(RuntimeError):
  """A fault of the mock device: a malformed or unsupported packet, an unmapped address, a wait that timed out."""

class PacketError(MockError):
  """A packet the command processor refuses; names the queue kind, byte offset, opcode and its meaning."""
  def __init__(self, kind: str, offset: int, opcode: int, meaning: str, reason: str):
    self.kind, self.offset, self.opcode, self.meaning, self.reason = kind, offset, opcode, meaning, reason
    super().__init__(f"{kind} packet at ring byte offset {offset:#x}: opcode {opcode:#04x} ({meaning}): {reason}")

# *** device memory ***

class AddressSpace:
  """Device addresses mapped onto host buffers (bytearray, ctypes arrays, writable memoryviews)."""
  def __init__(self, base: int = 0x1_0000_0000):
    self.maps: list[tuple[int, int, memoryview]] = []
    self.next_addr = base
    self.lock = threading.Lock()
  def map(self, addr: int, buf: Any) -> int:
    mv = memoryview(buf).cast("B")
    if mv.readonly: raise MockError(f"mapping at {addr:#x}: the host buffer is read-only")
    for a, n, _ in self.maps:
      if addr < a + n and a < addr + mv.nbytes: raise MockError(f"mapping [{addr:#x}, {addr + mv.nbytes:#x}) overlaps [{a:#x}, {a + n:#x})")
    self.maps.append((addr, mv.nbytes, mv))
    return addr
  def alloc(self, size: int, align: int = 0x1000) -> tuple[int, bytearray]:
    """A fresh zeroed buffer mapped at the next free aligned address: (device address, host bytes)."""
    addr = (self.next_addr + align - 1) // align * align
    buf = bytearray(size)
    self.map(addr, buf)
    self.next_addr = addr + max(size, 1)
    return addr, buf
  def view(self, addr: int, n: int) -> memoryview:
    for a, size, mv in self.maps:
      if a <= addr and addr + n <= a + size: return mv[addr - a:addr - a + n]
    raise MockError(f"device address range [{addr:#x}, {addr + n:#x}) is not mapped (or spans two mappings)")
  def read(self, addr: int, n: int) -> bytes: return bytes(self.view(addr, n))
  def write(self, addr: int, data: bytes) -> None: self.view(addr, len(data))[:] = data
  def u32(self, addr: int) -> int: return struct.unpack("<I", self.view(addr, 4))[0]
  def u64(self, addr: int) -> int: return struct.unpack("<Q", self.view(addr, 8))[0]
  def write_u32(self, addr: int, v: int) -> None: self.write(addr, struct.pack("<I", v))
  def write_u64(self, addr: int, v: int) -> None: self.write(addr, struct.pack("<Q", v))

class HostMemory(AddressSpace):
  """Host memory an interface allocated, as a device address space (device address == host address): MOCK+AMD's allocations
  (MEMORY), or what the simulated KFD driver's page tables map. Any other address is a fault naming it."""
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
  def span(self, addr: int) -> tuple[int, int]:
    """The host range [start, end) of the allocation holding `addr` (a kernel's buffer argument may touch only that)."""
    with self.lock:
      i = bisect.bisect_right(self.starts, addr) - 1
      if i < 0 or addr >= self.starts[i] + self.sizes[self.starts[i]]: raise MockError(f"device address {addr:#x} is not {self.what}")
      return self.starts[i], self.starts[i] + self.sizes[self.starts[i]]
  def view(self, addr: int, n: int) -> memoryview:
    if n == 0: return memoryview(b"")
    if not self.contains(addr, n): raise MockError(f"device address range [{addr:#x}, {addr + n:#x}) is not {self.what}")
    return memoryview((ctypes.c_uint8 * n).from_address(addr)).cast("B")
  def copy(self, dst: int, src: int, n: int) -> None:
    self.view(dst, n), self.view(src, n)   # both checked before anything is written
    ctypes.memmove(dst, src, n)

MEMORY = HostMemory()   # the device memory of every MOCK+AMD instance in this process

# *** what the command processor does: a callback interface with a memory-backed default ***

COMPARE: dict[int, tuple[str, Callable[[int, int], bool]]] = {
  0: ("always", lambda a, b: True), 1: ("<", lambda a, b: a < b), 2: ("<=", lambda a, b: a <= b), 3: ("==", lambda a, b: a == b),
  4: ("!=", lambda a, b: a != b), 5: (">=", lambda a, b: a >= b), 6: (">", lambda a, b: a > b)}

@dataclass(frozen=True)
class Dispatch:
  """One decoded DISPATCH_DIRECT: what a host build of the kernel needs to run it."""
  pgm_addr: int
  grid: tuple[int, int, int]          # workgroups
  block: tuple[int, int, int]         # threads per workgroup
  kernarg_addr: int
  user_data: tuple[int, ...]
  registers: dict[str, int] = field(compare=False)
  wave32: bool = False

class Actions:
  """Performs the command processor's actions on an AddressSpace. Subclass (or pass on_dispatch) to run kernels."""
  def __init__(self, mem: AddressSpace, on_dispatch: Callable[[Dispatch], None] | None = None, timeout_s: float = 10.0):
    self.mem, self.on_dispatch, self.timeout_s = mem, on_dispatch, timeout_s
    self.log: list[tuple[str, Any]] = []
  def copy(self, dst: int, src: int, n: int) -> None:
    self.log.append(("copy", (dst, src, n)))
    self.mem.write(dst, self.mem.read(src, n))
  def signal(self, addr: int, value: int, nbytes: int) -> None:
    self.log.append(("signal", (addr, value, nbytes)))
    (self.mem.write_u64 if nbytes == 8 else self.mem.write_u32)(addr, value)
  def wait(self, addr: int, ref: int, mask: int, func: int) -> None:
    """Block until (*addr & mask) <func> ref on the 32-bit word at addr, or raise after timeout_s."""
    self.log.append(("wait", (addr, ref, mask, func)))
    name, cmp = COMPARE[func]
    deadline = time.monotonic() + self.timeout_s
    while not cmp(self.mem.u32(addr) & mask, ref):
      if time.monotonic() > deadline:
        raise MockError(f"wait timed out after {self.timeout_s}s: *{addr:#x} & {mask:#x} = {self.mem.u32(addr) & mask:#x}, "
                        f"needs {name} {ref:#x}")
      time.sleep(0.0005)
  def timestamp(self, addr: int) -> None:
    self.log.append(("timestamp", addr))
    self.mem.write_u64(addr, time.perf_counter_ns())
  def dispatch(self, d: Dispatch) -> None:
    self.log.append(("dispatch", d))
    if self.on_dispatch is not None: self.on_dispatch(d)
  def cache(self, what: str) -> None: self.log.append(("cache", what))
  def event(self, event_type: int) -> None: self.log.append(("event", event_type))
  def trap(self, context: int) -> None: self.log.append(("trap", context))

# *** ring reading ***

class _Ring:
  def __init__(self, ring: Any, kind: str):
    self.mv = memoryview(ring).cast("B")
    if self.mv.nbytes % 4 or self.mv.nbytes == 0: raise MockError(f"{kind} ring of {self.mv.nbytes} bytes is not a whole number of dwords")
    self.kind = kind
  def dw(self, ptr: int) -> int:
    off = ptr % self.mv.nbytes
    return struct.unpack_from("<I", self.mv, off)[0]
  def dws(self, ptr: int, n: int) -> list[int]: return [self.dw(ptr + 4 * i) for i in range(n)]

class _Processor:
  kind = ""
  def __init__(self, gen: str, mem: AddressSpace, actions: Actions | None = None):
    self.gen, self.mem = gen_of(gen), mem
    self.actions = actions if actions is not None else Actions(mem)
    self.packets: list[tuple[int, str]] = []   # (byte offset, packet name) of everything executed, for tests and errors
  def run(self, ring: Any, rptr: int, wptr: int) -> int:
    """Execute the packets in ring bytes [rptr, wptr) (pointers grow past the ring size; offsets wrap). Returns wptr."""
    r = _Ring(ring, self.kind)
    if rptr % 4 or wptr % 4 or wptr < rptr:
      raise MockError(f"{self.kind} ring pointers rptr={rptr:#x} wptr={wptr:#x} are not dword-aligned and ordered")
    if wptr - rptr > r.mv.nbytes: raise MockError(f"{self.kind}: {wptr - rptr} bytes submitted to a ring of {r.mv.nbytes} bytes")
    ptr = rptr
    while ptr < wptr: ptr = self._packet(r, ptr, wptr)
    return ptr
  def _fail(self, ptr: int, opcode: int, reason: str) -> PacketError:
    names = pm4.OPCODE_NAMES if self.kind == "PM4" else sdma.OP_NAMES
    return PacketError(self.kind, ptr, opcode, names.get(opcode, "unknown opcode"), reason)
  def _packet(self, r: _Ring, ptr: int, wptr: int) -> int: raise NotImplementedError
  def _body(self, r: _Ring, ptr: int, wptr: int, opcode: int, n: int, skip: int = 0) -> list[int]:
    """The n dwords after the first `skip` dwords of the packet at ptr; the whole packet must lie before wptr."""
    if ptr + 4 * (skip + n) > wptr:
      raise self._fail(ptr, opcode, f"truncated: the packet needs {skip + n} dwords, {(wptr - ptr) // 4} are before the write pointer")
    return r.dws(ptr + 4 * skip, n)
  def _act(self, ptr: int, opcode: int, fn: Callable[..., None], *args: Any) -> None:
    try: fn(*args)
    except PacketError: raise
    except MockError as e: raise self._fail(ptr, opcode, str(e)) from e

class PM4Processor(_Processor):
  """A compute queue's command processor (MEC): PM4 type-3 packets, an SH register file, dispatches via Actions.
  `kernarg_user_sgpr` is the COMPUTE_USER_DATA index holding the kernarg address (lower.py's layout puts it first)."""
  kind = "PM4"
  def __init__(self, gen: str, mem: AddressSpace, actions: Actions | None = None, kernarg_user_sgpr: int = 0):
    super().__init__(gen, mem, actions)
    self.sh: dict[int, int] = {}   # SET_SH_REG offset -> value
    self.kernarg_user_sgpr = kernarg_user_sgpr
  def reg(self, name: str) -> int | None: return self.sh.get(sh_offset(self.gen, name))

  def _packet(self, r: _Ring, ptr: int, wptr: int) -> int:
    hdr = r.dw(ptr)
    typ = hdr >> 30
    if typ == 2: return ptr + 4   # type-2 filler dword
    if typ != 3: raise PacketError("PM4", ptr, 0, f"type-{typ} packet", f"header {hdr:#010x}: only type-3 packets are accepted on a user queue")
    count, opcode = (hdr >> 16) & 0x3FFF, (hdr >> 8) & 0xFF
    if opcode == pm4.NOP and count == 0x3FFF:
      self.packets.append((ptr, "NOP"))
      return ptr + 4
    if hdr & 0xFC: raise self._fail(ptr, opcode, f"header {hdr:#010x} has reserved bits [7:2] set")
    body = self._body(r, ptr, wptr, opcode, count + 1, skip=1)
    name = pm4.OPCODE_NAMES.get(opcode)
    handler = getattr(self, f"_op_{name}", None) if name is not None else None
    if handler is None or name is None:
      raise self._fail(ptr, opcode, "not a packet the MOCK command processor executes" if name else "not a PM4 opcode in the public headers")
    handler(ptr, opcode, body)
    self.packets.append((ptr, name))
    return ptr + 4 * (count + 2)

  def _want(self, ptr: int, opcode: int, body: list[int], n: int) -> None:
    if len(body) != n: raise self._fail(ptr, opcode, f"body of {len(body)} dwords, expected {n}")

  def _op_NOP(self, ptr: int, opcode: int, body: list[int]) -> None: pass

  def _op_SET_SH_REG(self, ptr: int, opcode: int, body: list[int]) -> None:
    if len(body) < 2: raise self._fail(ptr, opcode, "needs a register offset and at least one value")
    off = body[0] & 0xFFFF
    if body[0] >> 16: raise self._fail(ptr, opcode, f"offset dword {body[0]:#x} sets VMID_SHIFT/INDEX bits the mock does not implement")
    if off + len(body) - 1 > 0x400: raise self._fail(ptr, opcode, f"registers {SH_REG_START + off:#x}.. run past SET_SH_REG_END")
    for i, v in enumerate(body[1:]): self.sh[off + i] = v

  def _op_DISPATCH_DIRECT(self, ptr: int, opcode: int, body: list[int]) -> None:
    self._want(ptr, opcode, body, 4)
    grid, initiator = (body[0], body[1], body[2]), body[3]
    if not initiator & DISPATCH_INITIATOR_COMPUTE_SHADER_EN: raise self._fail(ptr, opcode, f"initiator {initiator:#x} lacks COMPUTE_SHADER_EN")
    wave32 = bool(initiator & DISPATCH_INITIATOR_CS_W32_EN)
    if wave32 and self.gen == "gfx9": raise self._fail(ptr, opcode, "CS_W32_EN on gfx9, which only runs wave64")
    need = ("COMPUTE_PGM_LO", "COMPUTE_PGM_HI", "COMPUTE_PGM_RSRC1", "COMPUTE_PGM_RSRC2", "COMPUTE_NUM_THREAD_X",
            "COMPUTE_NUM_THREAD_Y", "COMPUTE_NUM_THREAD_Z")
    if (missing := [n for n in need if self.reg(n) is None]): raise self._fail(ptr, opcode, f"dispatch before {', '.join(missing)} were set")
    block = tuple(int(self.reg(f"COMPUTE_NUM_THREAD_{a}") or 0) for a in "XYZ")
    if 0 in grid or 0 in block: raise self._fail(ptr, opcode, f"empty dispatch: grid {grid}, block {block}")
    pgm = ((self.reg("COMPUTE_PGM_HI") or 0) << 32 | (self.reg("COMPUTE_PGM_LO") or 0)) << 8
    ud0 = sh_offset(self.gen, "COMPUTE_USER_DATA_0")
    user = tuple(self.sh.get(ud0 + i, 0) for i in range(NUM_USER_DATA))
    k = self.kernarg_user_sgpr
    regs = {(sh_name(self.gen, o) or f"SH_{SH_REG_START + o:#x}"): v for o, v in sorted(self.sh.items())}
    d = Dispatch(pgm, grid, block, user[k] | user[k + 1] << 32, user, regs, wave32)  # type: ignore[arg-type]
    self._act(ptr, opcode, self.actions.dispatch, d)

  def _op_ACQUIRE_MEM(self, ptr: int, opcode: int, body: list[int]) -> None:
    self._want(ptr, opcode, body, 6 if self.gen == "gfx9" else 7)
    self._act(ptr, opcode, self.actions.cache, f"acquire coher_cntl={body[0]:#x}" + ("" if self.gen == "gfx9" else f" gcr_cntl={body[6]:#x}"))

  def _op_RELEASE_MEM(self, ptr: int, opcode: int, body: list[int]) -> None:
    self._want(ptr, opcode, body, 7)
    event_type, event_index = body[0] & 0x3F, (body[0] >> 8) & 0xF
    data_sel, int_sel, dst_sel = (body[1] >> 29) & 0x7, (body[1] >> 24) & 0x7, (body[1] >> 16) & 0x3
    addr, value = body[2] | body[3] << 32, body[4] | body[5] << 32
    if event_index != pm4.EVENT_INDEX_EOP: raise self._fail(ptr, opcode, f"event index {event_index}, expected 5 (end of pipe)")
    if dst_sel != 0: raise self._fail(ptr, opcode, f"DST_SEL {dst_sel}: the mock writes memory only (0)")
    if data_sel > 4: raise self._fail(ptr, opcode, f"DATA_SEL {data_sel} is reserved")
    if int_sel > 2: raise self._fail(ptr, opcode, f"INT_SEL {int_sel} is reserved")
    if data_sel and addr % (4 if data_sel == 1 else 8): raise self._fail(ptr, opcode, f"address {addr:#x} misaligned for DATA_SEL {data_sel}")
    self._act(ptr, opcode, self.actions.cache, f"release event={event_type:#x} flags={body[0] & ~0xF3F:#x}")
    if data_sel == 1: self._act(ptr, opcode, self.actions.signal, addr, value & 0xFFFFFFFF, 4)
    elif data_sel == 2: self._act(ptr, opcode, self.actions.signal, addr, value, 8)
    elif data_sel in (3, 4): self._act(ptr, opcode, self.actions.timestamp, addr)
    if int_sel: self._act(ptr, opcode, self.actions.trap, body[6])

  def _op_WAIT_REG_MEM(self, ptr: int, opcode: int, body: list[int]) -> None:
    self._want(ptr, opcode, body, 6)
    func, mem_space, operation = body[0] & 0x7, (body[0] >> 4) & 0x3, (body[0] >> 6) & 0x3
    if mem_space != 1: raise self._fail(ptr, opcode, f"MEM_SPACE {mem_space}: the mock polls memory only (1)")
    if operation != 0: raise self._fail(ptr, opcode, f"OPERATION {operation}: only wait_reg_mem (0) is implemented")
    if func == 7: raise self._fail(ptr, opcode, "FUNCTION 7 is reserved")
    addr = body[1] | body[2] << 32
    if addr % 4: raise self._fail(ptr, opcode, f"poll address {addr:#x} is not dword aligned")
    self._act(ptr, opcode, self.actions.wait, addr, body[3], body[4], func)

  def _op_EVENT_WRITE(self, ptr: int, opcode: int, body: list[int]) -> None:
    if len(body) not in (1, 3): raise self._fail(ptr, opcode, f"body of {len(body)} dwords, expected 1 (or 3 with an address)")
    self._act(ptr, opcode, self.actions.event, body[0] & 0x3F)

class SDMAProcessor(_Processor):
  """A copy queue's SDMA engine: COPY_LINEAR, FENCE, POLL_REGMEM, TIMESTAMP, TRAP and NOP packets. A packet must lie whole
  before the ring's end (the engine does not follow one across it; a PM4 processor reads its ring as a circle)."""
  kind = "SDMA"
  SIZES = {sdma.OP_COPY: sdma.COPY_LINEAR_DWORDS, sdma.OP_FENCE: sdma.FENCE_DWORDS, sdma.OP_TRAP: sdma.TRAP_DWORDS,
           sdma.OP_POLL_REGMEM: sdma.POLL_REGMEM_DWORDS, sdma.OP_TIMESTAMP: sdma.TIMESTAMP_DWORDS}
  def _whole(self, r: _Ring, ptr: int, wptr: int, op: int, n: int) -> list[int]:
    """The packet's n dwords, refused when they would wrap past the ring's end."""
    w = self._body(r, ptr, wptr, op, n)
    if (off := ptr % r.mv.nbytes) + 4 * n > r.mv.nbytes:
      raise self._fail(ptr, op, f"the packet's {n} dwords wrap past the end of the {r.mv.nbytes:#x}-byte ring (it starts at ring offset "
                                f"{off:#x}): an SDMA packet must lie whole before the end; fill the tail with NOPs and start it at offset 0")
    return w
  def _packet(self, r: _Ring, ptr: int, wptr: int) -> int:
    hdr = r.dw(ptr)
    op, sub_op = hdr & 0xFF, (hdr >> 8) & 0xFF
    if op == sdma.OP_NOP:
      n = 1 + ((hdr >> 16) & 0x3FFF)
      self._whole(r, ptr, wptr, op, n)
      self.packets.append((ptr, "NOP"))
      return ptr + 4 * n
    if op not in self.SIZES:
      raise self._fail(ptr, op, "not a packet the MOCK SDMA engine executes" if op in sdma.OP_NAMES else "not an SDMA opcode in the public headers")
    w = self._whole(r, ptr, wptr, op, self.SIZES[op])
    if op == sdma.OP_COPY:
      if sub_op != sdma.SUBOP_COPY_LINEAR: raise self._fail(ptr, op, f"COPY sub-op {sub_op}: only COPY_LINEAR (0) is implemented")
      n = (w[1] & sdma.COUNT_MASK[self.gen]) + 1
      if w[1] & ~sdma.COUNT_MASK[self.gen]: raise self._fail(ptr, op, f"COUNT dword {w[1]:#x} has bits above the {self.gen} count field")
      if n > sdma.MAX_COPY[self.gen]: raise self._fail(ptr, op, f"copy of {n} bytes exceeds the {self.gen} maximum {sdma.MAX_COPY[self.gen]:#x}")
      self._act(ptr, op, self.actions.copy, w[5] | w[6] << 32, w[3] | w[4] << 32, n)
    elif op == sdma.OP_FENCE:
      addr = w[1] | w[2] << 32
      if addr % 4: raise self._fail(ptr, op, f"fence address {addr:#x} is not dword aligned")
      self._act(ptr, op, self.actions.signal, addr, w[3], 4)
    elif op == sdma.OP_TRAP: self._act(ptr, op, self.actions.trap, w[1] & 0x0FFFFFFF)
    elif op == sdma.OP_POLL_REGMEM:
      func, mem_poll = (hdr >> 28) & 0x7, hdr >> 31
      if not mem_poll: raise self._fail(ptr, op, "register polling (mem_poll=0) is not implemented")
      if func == 7: raise self._fail(ptr, op, "func 7 is reserved")
      self._act(ptr, op, self.actions.wait, w[1] | w[2] << 32, w[3], w[4], func)
    elif op == sdma.OP_TIMESTAMP:
      if sub_op != sdma.SUBOP_TIMESTAMP_GET_GLOBAL: raise self._fail(ptr, op, f"TIMESTAMP sub-op {sub_op}: only GET_GLOBAL (2) is implemented")
      addr = w[1] | w[2] << 32
      if addr % 8: raise self._fail(ptr, op, f"timestamp address {addr:#x} is not 8-byte aligned")
      self._act(ptr, op, self.actions.timestamp, addr)
    self.packets.append((ptr, sdma.OP_NAMES[op]))
    return ptr + 4 * self.SIZES[op]

# *** what MOCK+AMD and the simulated KFD driver run: programs filed by code, actions on host memory, a worker per ring ***

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
  def find(self, addr: int, mem: HostMemory) -> MockProgram:
    """The program whose code is at `addr` now (memory is re-read: a program buffer may have been reused for another one)."""
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

def register_program(name: str, uops: tuple[Any, ...], data: Any, image: bytes) -> None:
  """Build kernel `name` (its linearized uops) for the host and file it under its code (`data`: its AMDProgramData, `image`:
  the code object as loaded)."""
  from core.codegen.hostbuild import host_build
  PROGRAMS.add(image, data, host_build(name, uops))

def run_dispatch(d: Dispatch, mem: HostMemory) -> None:
  """Execute one decoded DISPATCH_DIRECT with the host build of the program at its address (`mem`: the address space it may use)."""
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
  args, spans = [], []
  for i, off in enumerate(data.arg_offsets[:nargs]):
    if i < build.nbufs:
      a = mem.u64(kernargs + off)
      if not mem.contains(a, 1): raise MockError(f"{data.name}: buffer argument {i} is {a:#x}, not {mem.what}")
      spans.append(mem.span(a))   # the kernel's accesses through it are checked against its allocation (a GPU would fault)
    else: a = struct.unpack("<i", mem.view(kernargs + off, 4))[0]
    args.append(a)
  build.run(args, d.grid, d.block, spans)

class MockActions(Actions):
  """Copies, signals and waits on host memory; dispatches run the host build of the program at the dispatched address.
  `foreign(addr)`: whether a wait may poll `addr` outside `mem` (another HCQ device's timeline signal); None: never."""
  def __init__(self, timeout_s: float, mem: HostMemory, foreign: Callable[[int], bool] | None = None):
    self.hmem = mem
    super().__init__(mem, timeout_s=timeout_s)
    self.foreign = foreign
    self.log: Any = collections.deque(maxlen=256)   # the base class logs every action: keep the recent ones only
    self.stop = False
  def copy(self, dst: int, src: int, n: int) -> None:
    self.log.append(("copy", (dst, src, n)))
    self.hmem.copy(dst, src, n)
  def wait(self, addr: int, ref: int, mask: int, func: int) -> None:
    self.log.append(("wait", (addr, ref, mask, func)))
    name, cmp = COMPARE[func]
    if not (self.hmem.contains(addr, 4) or (self.foreign is not None and self.foreign(addr))):
      raise MockError(f"wait address {addr:#x} is neither {self.hmem.what}" + (" nor another HCQ device's timeline signal" if self.foreign else ""))
    word = ctypes.c_uint32.from_address(addr)
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

class RingWorker:
  """The command processor of one ring: a thread that polls a doorbell and runs `proc` over the ring bytes it announces.
  `unit`: bytes per doorbell count (the queue's RingLayout.unit: 1 for SDMA, 4 for a PM4 compute queue, whose write pointer
  counts dwords). `rptr_addr`: where to report the read pointer (in units) after each batch, as the hardware does; the MOCK
  queues have none. Shared by the MOCK queues and the simulated KFD driver's queues (kfd_sim.py)."""
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
  def busy(self) -> bool: return self.rptr != self.announced()

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
    if isinstance(self.proc.actions, MockActions): self.proc.actions.stop = True   # releases a WAIT in progress
    self.kick.set()
    self.thread.join(timeout=5)

class MockQueue:
  """A ring in device memory plus its processor; writing the doorbell runs everything between rptr and the new wptr."""
  def __init__(self, processor: _Processor, ring_size: int = 1 << 16):
    if ring_size & (ring_size - 1): raise MockError(f"ring size {ring_size} is not a power of two")
    self.processor = processor
    self.ring_addr, self.ring = processor.mem.alloc(ring_size)
    self.rptr = self.wptr = 0
  def submit(self, words: list[int] | bytes) -> None:
    """Copy command words into the ring at wptr and ring the doorbell (what the host submit program does)."""
    data = words if isinstance(words, (bytes, bytearray)) else struct.pack(f"<{len(words)}I", *words)
    for i, b in enumerate(data): self.ring[(self.wptr + i) % len(self.ring)] = b
    self.doorbell(self.wptr + len(data))
  def doorbell(self, wptr: int) -> None:
    self.wptr = wptr
    self.rptr = self.processor.run(self.ring, self.rptr, wptr)

def host_buffer(n: int) -> Any:
  """A ctypes buffer a test can map as device memory (same as a real interface's host-visible allocation)."""
  return (ctypes.c_uint8 * n)()

__all__ = ["AddressSpace", "HostMemory", "MEMORY", "Actions", "MockActions", "Dispatch", "MockError", "PacketError", "PM4Processor",
           "SDMAProcessor", "MockQueue", "RingWorker", "PROGRAMS", "register_program", "run_dispatch", "host_buffer"]
