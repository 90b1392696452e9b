"""Stage 9, callify: the submit program, a kernel over host buffers that copies each command buffer into its ring at the
write pointer (wrapping around, or after a NOP tail where the ring's layout says a submit must not wrap), writes the
submit-time timeline values into the ring copy, bumps the write pointer, rings the doorbell and advances the host timelines.
Rendered as host LLVM IR and compiled in process by core itself, called with the host buffers."""
from __future__ import annotations
import ctypes, functools
from typing import Any, Callable
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, AxisType
from core.hcq.queue_ir import is_submit, submit_device, submit_queue, queue_of, device_of, kind_of
from core.hcq.encode import _is_timeline
from core.hcq.state import HCQState
from core.device.hcq import handle_addr
from core.codegen.program import ProgramSpec

_host_timelines: dict[tuple[str, str], Any] = {}

def host_timeline(device: str, queue: str) -> Any:
  """The host copy of a queue's timeline value (uint64 in host memory, read and advanced by submit programs)."""
  if (t := _host_timelines.get((device, queue))) is None: t = _host_timelines[(device, queue)] = (ctypes.c_uint64 * 1)()
  return t

def _u64(v: int) -> UOp: return UOp.const(dtypes.uint64, v)

class _Builder:
  """Collects the linear uop list of the submit program; every node's sources are emitted before it."""
  def __init__(self) -> None:
    self.params: list[UOp] = []         # the BUFFER uops (or timeline_value placeholders) behind each PARAM
    self.param_of: dict[UOp, UOp] = {}
    self.body: list[UOp] = []
    self.seen: set[UOp] = set()
  def param(self, buf: UOp, dtype: Any) -> UOp:
    if buf not in self.param_of:
      self.param_of[buf] = UOp.param(len(self.params), dtype.ptr())
      self.params.append(buf)
    return self.param_of[buf]
  def emit(self, u: UOp) -> UOp:
    for x in u.toposort():
      if x not in self.seen and x.op is not Ops.PARAM:
        self.seen.add(x)
        self.body.append(x)
    return u
  def load(self, p: UOp, i: Any) -> UOp: return self.emit(p.index(i if isinstance(i, UOp) else _u64(i)).load())
  def store(self, p: UOp, i: UOp, v: UOp) -> UOp: return self.emit(p.index(i).store(v))
  def store_gated(self, p: UOp, i: UOp, gate: UOp, v: UOp) -> UOp: return self.emit(p.index(i, valid=gate).store(v))

def build_submit_program(linear: UOp, ctx: HCQState) -> tuple[list[UOp], list[UOp]]:
  """(uops of the submit program, the buffer behind each of its parameters) for the submits and finalizers in `linear`.

  Per queue the program keeps the ring word where the next submit goes (`pos`, counted from the queue's creation, never wrapped):
  it starts at the write pointer, each submit's words are copied to `pos` onwards modulo the ring, and the write pointer and
  the doorbell become the end of the last one. A queue whose RingLayout has a `nop` never gets a submit across the ring's end:
  when its words would not fit before the end, the words up to the end become NOPs and the submit starts at ring word 0."""
  b = _Builder()
  timelines: dict[UOp, UOp] = {}
  def tl_of(var: UOp) -> UOp:
    if var not in timelines:
      _, q, dev = var.arg
      from core.hcq.queue_ir import queue_buffer
      timelines[var] = b.load(b.param(queue_buffer("timeline_value", q, dev), dtypes.uint64), 0)
    return timelines[var]
  def value(v: UOp) -> UOp: return v.substitute({t: tl_of(t) for t in v.toposort() if _is_timeline(t)})
  pos: dict[tuple[str, str], UOp] = {}
  written: dict[tuple[str, str], int] = {}    # bytes of this schedule's submits per queue
  largest: dict[tuple[str, str], int] = {}    # and the largest of them (a NOP tail is shorter than the submit it moves)
  nranges = 0
  def loop(n: int) -> UOp:
    nonlocal nranges
    r = b.emit(UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (nranges, AxisType.LOOP)))
    nranges += 1
    return r
  for s in linear.src:
    if not is_submit(s): continue
    dev, q, nbytes = submit_device(s), submit_queue(s), s.arg[2]
    cmd_view, ring, wptr, doorbell, rpatches = s.src[0], s.src[2], s.src[3], s.src[4], s.src[5:]
    cmdbuf, cmd_off = (cmd_view.src[0], cmd_view.arg[1]) if cmd_view.op is Ops.BUFFER_VIEW else (cmd_view, 0)
    hcq = ctx.hcq_of(dev)
    ring_words = hcq.ring_size(q) // 4
    # the write pointer counts in the queue's own unit (a PM4 queue: dwords; core's protocol and SDMA: bytes)
    layout = hcq.ring_layout(q)
    unit = layout.unit
    if unit not in (1, 2, 4) or nbytes % unit: raise RuntimeError(f"{dev} {q}: write pointer unit {unit} does not divide {nbytes} bytes")
    key = (dev, q)
    written[key], largest[key] = written.get(key, 0) + nbytes, max(largest.get(key, 0), nbytes)
    # the ring is empty when a schedule starts (core waits for each): its words, with at most one NOP tail, must fit in the ring
    tail = largest[key] - 4 if layout.nop is not None and largest[key] > 4 else 0
    if written[key] + tail > ring_words * 4:
      raise RuntimeError(f"{dev} {q}: this schedule needs {written[key]} bytes of commands" + (f" (+ up to {tail} bytes of NOPs)" if tail else "") +
                         f", more than the {ring_words * 4}-byte ring")
    p_ring, p_cmd = b.param(ring, dtypes.uint32), b.param(cmdbuf, dtypes.uint32)
    p_wptr, p_bell = b.param(wptr, dtypes.uint64), b.param(doorbell, dtypes.uint64)
    if key not in pos:
      w0 = b.load(p_wptr, 0)
      pos[key] = b.emit((w0 * _u64(unit) if unit != 1 else w0) >> _u64(2))
    mask, nwords = _u64(ring_words - 1), nbytes // 4
    base = pos[key]
    if layout.nop is not None and nwords > 1:
      # the NOP tail: ring words [pos, end of ring) when the submit would run past the end, else none; it is shorter than the
      # submit, so a loop over nwords - 1 words with a gated store writes exactly the tail
      off = b.emit(base & mask)
      fill = b.emit((off + _u64(nwords) > _u64(ring_words)).where(_u64(ring_words) - off, _u64(0)))
      f = loop(nwords - 1)
      fi = f.cast(dtypes.uint64)
      st = b.store_gated(p_ring, (base + fi) & mask, fi < fill, UOp.const(dtypes.uint32, layout.nop))
      b.emit(UOp(Ops.END, src=(st, f)))
      base = b.emit(base + fill)
    # ring word of this submit's first word: copy its words there, modulo the ring
    r = loop(nwords)
    word = b.load(p_cmd, r + UOp.const(dtypes.int32, cmd_off // 4))
    st = b.store(p_ring, (base + r.cast(dtypes.uint64)) & mask, word)
    b.emit(UOp(Ops.END, src=(st, r)))
    for rp in rpatches:
      val, off_b = value(rp.src[0]), rp.arg
      b.store(p_ring, (base + _u64(off_b // 4)) & mask, val.cast(dtypes.uint32))
      if val.dtype.itemsize == 8: b.store(p_ring, (base + _u64(off_b // 4 + 1)) & mask, (val >> _u64(32)).cast(dtypes.uint32))
    pos[key] = b.emit(base + _u64(nwords))
    new_wptr = b.emit(pos[key] * _u64(4 // unit) if unit != 4 else pos[key])
    b.store(p_wptr, _u64(0), new_wptr)
    # the doorbell is the last write of the submit: the command processor may start as soon as it changes, so the ring
    # writes before it must be visible first (BARRIER: a release fence)
    b.emit(UOp(Ops.BARRIER))
    b.store(p_bell, _u64(0), new_wptr)
  for u in linear.src:
    if u.op is Ops.ADVANCE:
      b.store(b.param(u.src[0], dtypes.uint64), _u64(0), value(u.src[1]))
  return [b.param_of[p] for p in b.params] + b.body, b.params

class SubmitProgram:
  """The loaded submit program: called with the host addresses of its parameters (`bind` fixes them once, as every run passes
  the same ones)."""
  def __init__(self, fn: Callable[..., None], untyped: Callable[..., None]):
    # untyped: the same function without argtypes, for bind: its c_void_p arguments pass as the pointers they are, where
    # argtypes converted each one on every call (an eager op's submit: ~2.4k of its ~94k instructions)
    self.fn, self.untyped = fn, untyped
  def __call__(self, *args: int) -> None: self.fn(*args)
  def bind(self, *args: int) -> Callable[[], None]: return functools.partial(self.untyped, *[ctypes.c_void_p(a) for a in args])

def compile_submit_program(uops: list[UOp]) -> tuple[str, bytes, SubmitProgram]:
  """(source, binary, loaded program) of the submit program: host LLVM IR, compiled and loaded in process by core
  (core.device.hostjit; cached by source), so any device's queues work without a CPU backend installed."""
  from core.codegen.llvm_ir import HostLLVMRenderer
  from core.device.hostjit import host_library
  src = HostLLVMRenderer().render("hcq_submit", uops)
  nparams = sum(1 for u in uops if u.op is Ops.PARAM)
  lib = host_library(src)
  return src, lib.obj, SubmitProgram(lib.function("hcq_submit", None, *[ctypes.c_void_p] * nparams), lib.function("hcq_submit", None))

def param_address(buf: UOp, ctx: HCQState) -> int:
  """Host address of a submit-program parameter: a host timeline value, or a (host-visible) device buffer."""
  if kind_of(buf) == "timeline_value": return ctypes.addressof(host_timeline(device_of(buf), queue_of(buf) or ""))
  return handle_addr(ctx.buffer_of(buf))

def callify(linear: UOp, ctx: HCQState) -> tuple[UOp, Any, tuple[int, ...]]:
  """(LINEAR of what the host still does per run, then the CALL of the submit program; the program; its arguments)."""
  uops, params = build_submit_program(linear, ctx)
  src, lib, prg = compile_submit_program(uops)
  # the same compiled PROGRAM shape codegen makes, for the host
  prog = UOp(Ops.PROGRAM, src=(UOp(Ops.SINK, arg="hcq_submit"), UOp(Ops.DEVICE, arg="HOST"), UOp(Ops.LINEAR, src=tuple(uops)),
                               UOp(Ops.SOURCE, arg=src), UOp(Ops.BINARY, arg=lib)), arg=ProgramSpec("hcq_submit"))
  rest = tuple(u for u in linear.src if not is_submit(u) and u.op is not Ops.ADVANCE)
  call = UOp(Ops.CALL, src=(prog,) + tuple(params))
  return linear.replace(src=rest + (call,)), prg, tuple(param_address(p, ctx) for p in params)
