"""The CPU plugin's three HCQ rule sets (pm_prep_program, pm_lower, pm_bufferize) and the command format they encode.

Command format (executed by native/cmdproc.c, whose header is the reference): little-endian packets, each a whole number of 8-byte
words. Word 0 is the header `opcode | length_in_dwords << 16`; then
  LAUNCH    (1, 8 dwords): u32 nargs, u64 fn, u64 kernargs, u64 nblocks  -> cpu_launch(fn, nargs, kernargs, nblocks)
  COPY      (2, 8 dwords): u32 0, u64 dst, u64 src, u64 nbytes
  WAIT      (3, 6 dwords): u32 0, u64 signal, u64 value   until *signal >= value (uint64)
  SIGNAL    (4, 6 dwords): u32 0, u64 signal, u64 value   *signal = value after everything before it (release)
  TIMESTAMP (5, 4 dwords): u32 0, u64 addr                *addr = CLOCK_MONOTONIC in ns
  BARRIER   (6, 2 dwords): u32 0                          nothing: each packet completes before the next starts
Kernel arguments: one uint64 slot per argument (buffer addresses, then int32 variables in the slot's low half), so
kernarg_size = 8 * nargs; the pool appends the block index.
"""
from __future__ import annotations
import ctypes, struct, threading, weakref
from dataclasses import field
from typing import Any
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.hcq.queue_ir import ProgramData, getaddr
from core.codegen.program import compiled_program
from core.helpers import frozen_record, sha256

# *** the command format ***

OP_LAUNCH, OP_COPY, OP_WAIT, OP_SIGNAL, OP_TIMESTAMP, OP_BARRIER = range(1, 7)
OP_NAMES = {OP_LAUNCH: "LAUNCH", OP_COPY: "COPY", OP_WAIT: "WAIT", OP_SIGNAL: "SIGNAL", OP_TIMESTAMP: "TIMESTAMP", OP_BARRIER: "BARRIER"}
DWORDS = {OP_LAUNCH: 8, OP_COPY: 8, OP_WAIT: 6, OP_SIGNAL: 6, OP_TIMESTAMP: 4, OP_BARRIER: 2}
# byte offsets, inside a packet, of the fields the pipeline patches later
LAUNCH_KERNARGS, COPY_DST, COPY_SRC, SIGNAL_ADDR, SIGNAL_VALUE, TIMESTAMP_ADDR = 16, 8, 16, 8, 16, 8

def header(op: int, dwords: int | None = None) -> int: return op | (DWORDS[op] if dwords is None else dwords) << 16
def enc_launch(fn: int, kernargs: int, nargs: int, nblocks: int) -> bytes:
  # a negative nblocks: its blocks run one after another on the queue's thread (native/pool.h)
  return struct.pack("<IIQQq", header(OP_LAUNCH), nargs, fn, kernargs, nblocks)
def enc_copy(dst: int, src: int, nbytes: int) -> bytes: return struct.pack("<IIQQQ", header(OP_COPY), 0, dst, src, nbytes)
def enc_wait(signal: int, value: int) -> bytes: return struct.pack("<IIQQ", header(OP_WAIT), 0, signal, value)
def enc_signal(signal: int, value: int) -> bytes: return struct.pack("<IIQQ", header(OP_SIGNAL), 0, signal, value)
def enc_timestamp(addr: int) -> bytes: return struct.pack("<IIQ", header(OP_TIMESTAMP), 0, addr)
def enc_barrier() -> bytes: return struct.pack("<II", header(OP_BARRIER), 0)

def decode(words: bytes) -> list[tuple[str, tuple[int, ...]]]:
  """Packets -> [(opcode name, fields)], for tests and DEBUG output. Raises ValueError on a malformed packet."""
  out, off = [], 0
  while off < len(words):
    hdr = struct.unpack_from("<I", words, off)[0]
    op, n = hdr & 0xffff, hdr >> 16
    if op not in DWORDS or n != DWORDS[op]: raise ValueError(f"bad packet header 0x{hdr:08x} at byte {off}")
    fmt = {OP_LAUNCH: "<IQQq", OP_COPY: "<xxxxQQQ", OP_WAIT: "<xxxxQQ", OP_SIGNAL: "<xxxxQQ", OP_TIMESTAMP: "<xxxxQ", OP_BARRIER: "<xxxx"}[op]
    out.append((OP_NAMES[op], struct.unpack_from(fmt, words, off + 4)))
    off += 4 * n
  return out

# *** pm_prep_program: load the shared object, describe its arguments ***

@frozen_record
class CPUProgramData(ProgramData):
  """A loaded CPU kernel: `fn` is its address; one uint64 kernarg slot per argument (buffers, then variables)."""
  fn: int = 0
  nargs: int = 0
  serial: bool = False   # its blocks run on the queue's thread, not the pool: too little work to split (runtime.serial_by_estimate)
  program: Any = field(default=None, compare=False, hash=False, repr=False)   # the loaded CPUProgram: keeps the code mapped

# while anything holds a program (a CPUProgramData in a cached or Jit-captured submission), a second load of the same bytes
# reuses it; when nothing does, it is unloaded (a plain dict kept every program ever loaded: ~14 KB per new kernel, forever)
_programs: weakref.WeakValueDictionary[tuple[str, bytes], Any] = weakref.WeakValueDictionary()
_load_lock = threading.Lock()

def load_program(name: str, lib: bytes) -> Any:
  """The CPUProgram of (name, library bytes), loaded once while in use: the CPUProgramData that launches it holds it."""
  key = (name, sha256(lib).digest())
  with _load_lock:
    if (prg := _programs.get(key)) is None:
      from plugin_cpu.runtime import CPUProgram
      prg = _programs[key] = CPUProgram(name, lib)
  return prg

def prep_program(ctx: Any, p: UOp, device: UOp, linear: UOp, binary: UOp) -> UOp:
  from plugin_cpu.runtime import serial_by_estimate
  spec = p.arg
  prg = load_program(spec.name, binary.arg)
  fn = ctypes.cast(prg.fxn, ctypes.c_void_p).value or 0
  nargs = sum(1 for u in linear.src if u.op is Ops.PARAM) + len(spec.vars)
  data = CPUProgramData(spec.name, 8 * nargs, 8, tuple(range(0, 8 * nargs, 8)), fn=fn, nargs=nargs, program=prg,
                        serial=serial_by_estimate(spec.estimates))
  # the image is the function's address: the code itself stays where the loader mapped it
  return UOp(Ops.PROGRAM, src=(device, UOp(Ops.BINARY, arg=struct.pack("<Q", fn))), arg=data)

pm_prep_program = PatternMatcher([(compiled_program, prep_program)], name="cpu prep program")

# *** pm_lower: abstract commands -> INS (packet bytes + patches) ***

def _ins(words: bytes, patches: list[tuple[int, UOp]]) -> UOp:
  return UOp(Ops.INS, src=tuple(v for _, v in patches), arg=(words, tuple(o for o, _ in patches)))

def _u64(v: UOp) -> UOp: return v if v.dtype == dtypes.uint64 else v.cast(dtypes.uint64)

def _value_packet(enc: Any, sig: UOp, value: UOp) -> UOp:
  # a constant value is baked into the packet; a submit-time value (timeline + k) is patched in
  if value.op is Ops.CONST: return _ins(enc(0, int(value.arg)), [(SIGNAL_ADDR, getaddr(sig))])
  return _ins(enc(0, 0), [(SIGNAL_ADDR, getaddr(sig)), (SIGNAL_VALUE, _u64(value))])

def lower_launch(ctx: Any, cmd: UOp, prog: UOp, kernargs: UOp) -> UOp:
  data: CPUProgramData = prog.arg
  gs = tuple(cmd.arg[0])
  if any(g != 1 for g in gs[1:]):
    raise RuntimeError(f"{ctx.device}: kernel {data.name} has global size {gs}; the CPU runs blocks along the first axis only")
  n = gs[0] if gs else 1
  return _ins(enc_launch(data.fn, 0, data.nargs, -n if data.serial and n > 1 else n), [(LAUNCH_KERNARGS, getaddr(kernargs))])

pm_lower = PatternMatcher([
  (UPat(Ops.LAUNCH, src=(UPat(Ops.PROGRAM, name="prog", custom=lambda u: isinstance(u.arg, CPUProgramData)), UPat(name="kernargs")),
        name="cmd"), lower_launch),
  (UPat(Ops.COPY, src=(UPat(name="dst"), UPat(name="src")), name="cmd"),
   lambda ctx, cmd, dst, src: _ins(enc_copy(0, 0, cmd.arg), [(COPY_DST, getaddr(dst)), (COPY_SRC, getaddr(src))])),
  (UPat(Ops.WAIT, src=(UPat(name="sig"), UPat(name="value"))), lambda ctx, sig, value: _value_packet(enc_wait, sig, value)),
  (UPat(Ops.SIGNAL, src=(UPat(Ops.BUFFER, name="sig"), UPat(name="value"))),
   lambda ctx, sig, value: _value_packet(enc_signal, sig, value)),
  (UPat(Ops.BARRIER, src=()), lambda ctx: _ins(enc_barrier(), [])),
  (UPat(Ops.TIMESTAMP, src=(UPat(name="buf"),)), lambda ctx, buf: _ins(enc_timestamp(0), [(TIMESTAMP_ADDR, getaddr(buf))])),
], name="cpu lower")

# *** pm_bufferize: placeholders -> buffers this device's HCQ object owns ***

pm_bufferize = PatternMatcher([
  (UPat(Ops.BUFFER, name="b", custom=lambda b: b.tag is not None), lambda ctx, b: ctx.buffer_uop(b.tag, b.dtype, b.arg)),
], name="cpu bufferize")
