"""A tiny fake HCQ plugin for core/hcq's tests: CPU memory and kernels, its own packet format, and a Python command
processor that runs the rings when the host waits (queues in reverse order, so missing WAITs give wrong results)."""
from __future__ import annotations
import ctypes, struct
from dataclasses import dataclass, field
from typing import Any
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.device.buffer import Buffer
from core.device.compiled import Compiled
from core.hcq import HCQError
from core.device.hcq import HCQDevice, RingLayout, handle_addr
from core.hcq.queue_ir import ProgramData, getaddr, ins
from core.codegen.program import compiled_program

LAUNCH, COPY, WAIT, SIGNAL, BARRIER = 1, 2, 3, 4, 5
SIZES = {LAUNCH: 40, COPY: 32, WAIT: 24, SIGNAL: 24, BARRIER: 8}

@dataclass(frozen=True)
class FakeProgramData(ProgramData):
  nbufs: int = 0
  program: Any = field(default=None, compare=False, hash=False)

_progs: list[Any] = []

def _prep(ctx: Any, p: UOp, device: UOp, linear: UOp, binary: UOp) -> UOp:
  from plugin_cpu.runtime import CPUProgram
  spec = p.arg
  _progs.append(CPUProgram(spec.name, binary.arg) if binary.arg != b"LIB" else None)   # b"LIB": a stage test, never launched
  nbufs = sum(1 for u in linear.src if u.op is Ops.PARAM)
  n = nbufs + len(spec.vars)
  data = FakeProgramData(spec.name, 8 * n, 8, tuple(range(0, 8 * n, 8)), nbufs=nbufs, program=len(_progs) - 1)
  return UOp(Ops.PROGRAM, src=(device, UOp(Ops.BINARY, arg=b"IMG" + bytes([len(_progs) % 256]))), arg=data)

def _hdr(op: int) -> bytes: return struct.pack("<II", op, 0)

def _launch(prog: UOp, kargs: UOp, cmd: UOp) -> UOp:
  d = prog.arg
  return ins(_hdr(LAUNCH) + struct.pack("<QQQQ", 0, d.program, d.nbufs | (len(d.arg_offsets) - d.nbufs) << 16, cmd.arg[0][0]),
             [(8, getaddr(kargs))])

pm_prep = PatternMatcher([(compiled_program, _prep)])
pm_lower = PatternMatcher([
  (UPat(Ops.LAUNCH, src=(UPat(Ops.PROGRAM, name="prog"), UPat(name="kargs")), name="cmd"), lambda prog, kargs, cmd: _launch(prog, kargs, cmd)),
  (UPat(Ops.COPY, src=(UPat(name="d"), UPat(name="s")), name="c"),
   lambda c, d, s: ins(_hdr(COPY) + struct.pack("<QQQ", 0, 0, c.arg), [(8, getaddr(d)), (16, getaddr(s))])),
  (UPat(Ops.WAIT, src=(UPat(name="sig"), UPat(name="v"))), lambda sig, v: ins(_hdr(WAIT) + bytes(16), [(8, getaddr(sig)), (16, v)])),
  (UPat(Ops.SIGNAL, src=(UPat(Ops.BUFFER, name="sig"), UPat(name="v"))),
   lambda sig, v: ins(_hdr(SIGNAL) + bytes(16), [(8, getaddr(sig)), (16, v)])),
  (UPat(Ops.BARRIER), lambda: ins(_hdr(BARRIER))),
])
pm_bufferize = PatternMatcher([(UPat(Ops.BUFFER, name="b", custom=lambda b: b.tag is not None), lambda ctx, b: ctx.buffer_uop(b))])

class FakeHooks:
  """Stands in for the plugin manager: answers for FAKE devices only."""
  def pm_prep_program(self, device: str) -> Any: return pm_prep
  def pm_lower(self, device: str) -> Any: return pm_lower
  def pm_bufferize(self, device: str) -> Any: return pm_bufferize

def _rd(addr: int, fmt: str) -> Any: return struct.unpack(fmt, ctypes.string_at(addr, struct.calcsize(fmt)))
def _wr(addr: int, fmt: str, *v: Any) -> None: ctypes.memmove(addr, struct.pack(fmt, *v), struct.calcsize(fmt))

FAKES: list[FakeHCQ] = []

class FakeHCQ(HCQDevice):
  queues = ("COMPUTE:0", "COPY:0")
  def __init__(self, device: str, ring: int = 4096):
    self.device, self.ring = device, ring
    self.qbufs: dict[tuple, UOp] = {}
    self.owned: dict[UOp, Buffer] = {}
    self.rptr: dict[str, int] = {q: 0 for q in self.queues}
    self.fail_next = False          # the next LAUNCH faults
    self.stalled: set[str] = set()  # queues whose processor is stuck
    self.report: str | None = None
    self.executed: list[tuple[str, int]] = []
    self.layout = RingLayout()      # every queue's ring layout (a test may set another)
    FAKES.append(self)
  def ring_size(self, queue: str) -> int: return self.ring
  def ring_layout(self, queue: str) -> RingLayout: return self.layout
  def buffer_uop(self, b: UOp) -> UOp:
    if isinstance(b.tag, tuple) and b.tag in self.qbufs: return self.qbufs[b.tag]
    size = self.ring // 4 if isinstance(b.tag, tuple) and b.tag[0] == "ring" else b.arg
    u = UOp.new_buffer(self.device, size, b.dtype)
    self.owned[u] = Buffer(self.device, size, b.dtype).allocate()
    self.owned[u].copyin(bytes(self.owned[u].nbytes))
    if isinstance(b.tag, tuple): self.qbufs[b.tag] = u
    return u
  def buffer_of(self, u: UOp) -> Buffer | None: return self.owned.get(u)
  def _addr(self, kind: str, q: str) -> int: return handle_addr(self.owned[self.qbufs[(kind, q)]])
  def error(self) -> str | None:
    r, self.report = self.report, None
    return r
  def step(self, q: str) -> bool:
    """Run one packet of queue q; False when it is empty, stalled or blocked in a WAIT."""
    if q in self.stalled or ("doorbell", q) not in self.qbufs: return False
    bell = _rd(self._addr("doorbell", q), "<Q")[0]
    if self.rptr[q] >= bell: return False
    ring = self._addr("ring", q)
    def word(off: int) -> int: return _rd(ring + (off % self.ring), "<I")[0]
    off = self.rptr[q]
    op = word(off)
    f = [word(off + 8 + 4 * i) | word(off + 12 + 4 * i) << 32 for i in range(0, 8, 2)]
    if op == WAIT and _rd(f[0], "<Q")[0] < f[1]: return False
    if op == LAUNCH:
      if self.fail_next:
        self.fail_next, self.report = False, f"fault in LAUNCH at ring offset {off}"
        while self.rptr[q] < bell and word(self.rptr[q]) != SIGNAL: self.rptr[q] += SIZES[word(self.rptr[q])]
        return True
      nbufs, nvars = f[2] & 0xffff, f[2] >> 16
      args = _rd(f[0], f"<{nbufs + nvars}Q")
      _progs[f[1]](*args[:nbufs], global_size=(f[3], 1, 1), vals=tuple(ctypes.c_int32(a & 0xffffffff).value for a in args[nbufs:]))
    elif op == COPY: ctypes.memmove(f[0], f[1], f[2])
    elif op == SIGNAL: _wr(f[0], "<Q", f[1])
    self.executed.append((q, op))
    self.rptr[q] = off + SIZES[op]
    return True
  def wait_signal(self, signal_buf: Buffer, value: int, timeout_s: float) -> None:
    while any(h.step(q) for h in reversed(FAKES) for q in reversed(h.queues)): pass
    if self.report: raise HCQError(f"{self.device}: {self.report}", self.device)
    if (seen := _rd(handle_addr(signal_buf), "<Q")[0]) < value:
      raise TimeoutError(f"{self.device}: signal is {seen}, waiting for {value}")

def make_fake(name: str) -> Compiled:
  from plugin_cpu.runtime import CPUAllocator, CPUProgram
  from plugin_cpu.c_renderer import CPUCRenderer
  from plugin_cpu.compiler import CCompiler
  r = CPUCRenderer()
  r.device = name
  return Compiled(name, CPUAllocator(name), r, CCompiler(), CPUProgram, hcq=FakeHCQ(name))

_ = dtypes
