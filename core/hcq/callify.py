"""Stage 9, callify: the submit program, a kernel over host buffers that copies each command buffer into its ring at the
write pointer (wrapping around), writes the submit-time timeline values into the ring copy, bumps the write pointer, rings
the doorbell and advances the host timelines. Rendered and compiled by the CPU backend, called with the host buffers."""
from __future__ import annotations
import ctypes
from typing import Any
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, AxisType
from core.hcq.queue_ir import is_submit, submit_device, submit_queue, queue_of, device_of, kind_of
from core.hcq.encode import _is_timeline
from core.hcq.state import HCQState
from core.device.hcq import handle_addr

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

def build_submit_program(linear: UOp, ctx: HCQState) -> tuple[list[UOp], list[UOp]]:
  """(uops of the submit program, the buffer behind each of its parameters) for the submits and finalizers in `linear`."""
  b = _Builder()
  timelines: dict[UOp, UOp] = {}
  def tl_of(var: UOp) -> UOp:
    if var not in timelines:
      _, q, dev = var.arg
      from core.hcq.queue_ir import queue_buffer
      timelines[var] = b.load(b.param(queue_buffer("timeline_value", q, dev), dtypes.uint64), 0)
    return timelines[var]
  def value(v: UOp) -> UOp: return v.substitute({t: tl_of(t) for t in v.toposort() if _is_timeline(t)})
  wptr0: dict[tuple[str, str], UOp] = {}
  written: dict[tuple[str, str], int] = {}
  nranges = 0
  for s in linear.src:
    if not is_submit(s): continue
    dev, q, nbytes = submit_device(s), submit_queue(s), s.arg[2]
    cmd_view, ring, wptr, doorbell, rpatches = s.src[0], s.src[2], s.src[3], s.src[4], s.src[5:]
    cmdbuf, cmd_off = (cmd_view.src[0], cmd_view.arg[1]) if cmd_view.op is Ops.BUFFER_VIEW else (cmd_view, 0)
    hcq = ctx.hcq_of(dev)
    ring_words = hcq.ring_size(q) // 4
    # the write pointer counts in the queue's own unit (a PM4 queue: dwords; core's protocol and SDMA: bytes)
    unit = hcq.ring_layout(q).unit
    if unit not in (1, 2, 4) or nbytes % unit: raise RuntimeError(f"{dev} {q}: write pointer unit {unit} does not divide {nbytes} bytes")
    key = (dev, q)
    if (done := written.get(key, 0)) + nbytes > ring_words * 4:
      raise RuntimeError(f"{dev} {q}: this schedule needs {done + nbytes} bytes of commands, more than the {ring_words * 4}-byte ring")
    p_ring, p_cmd = b.param(ring, dtypes.uint32), b.param(cmdbuf, dtypes.uint32)
    p_wptr, p_bell = b.param(wptr, dtypes.uint64), b.param(doorbell, dtypes.uint64)
    if key not in wptr0: wptr0[key] = b.load(p_wptr, 0)
    # word index of this submit's first word in the ring
    base = b.emit(((wptr0[key] * _u64(unit) if unit != 1 else wptr0[key]) >> _u64(2)) + _u64(done // 4))
    mask = _u64(ring_words - 1)
    r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, nbytes // 4),), (nranges, AxisType.LOOP))
    nranges += 1
    b.emit(r)
    word = b.load(p_cmd, r + UOp.const(dtypes.int32, cmd_off // 4))
    st = b.store(p_ring, (base + r.cast(dtypes.uint64)) & mask, word)
    b.emit(UOp(Ops.END, src=(st, r)))
    for rp in rpatches:
      val, off = value(rp.src[0]), rp.arg
      b.store(p_ring, (base + _u64(off // 4)) & mask, val.cast(dtypes.uint32))
      if val.dtype.itemsize == 8: b.store(p_ring, (base + _u64(off // 4 + 1)) & mask, (val >> _u64(32)).cast(dtypes.uint32))
    written[key] = done + nbytes
    new_wptr = wptr0[key] + _u64(written[key] // unit)
    b.store(p_wptr, _u64(0), new_wptr)
    # the doorbell is the last write of the submit: the command processor may start as soon as it changes, so the ring
    # writes before it must be visible first (BARRIER: a release fence on the CPU backend)
    b.emit(UOp(Ops.BARRIER))
    b.store(p_bell, _u64(0), new_wptr)
  for u in linear.src:
    if u.op is Ops.ADVANCE:
      b.store(b.param(u.src[0], dtypes.uint64), _u64(0), value(u.src[1]))
  return [b.param_of[p] for p in b.params] + b.body, b.params

_programs: dict[str, Any] = {}

def compile_submit_program(uops: list[UOp]) -> tuple[str, bytes, Any]:
  """(source, binary, loaded program) of the submit program, by Device["CPU"]'s renderer and compiler (cached by source)."""
  from core.device.registry import Device
  cpu = Device["CPU"]
  src0 = cpu.renderer.render("hcq_submit", uops)
  if (hit := _programs.get(src0)) is None:
    lib = cpu.compiler.compile_cached(src0)
    hit = _programs[src0] = (src0, lib, cpu.runtime("hcq_submit", lib))
  return hit

def param_address(buf: UOp, ctx: HCQState) -> int:
  """Host address of a submit-program parameter: a host timeline value, or a (host-visible) device buffer."""
  if kind_of(buf) == "timeline_value": return ctypes.addressof(host_timeline(device_of(buf), queue_of(buf) or ""))
  return handle_addr(ctx.buffer_of(buf))

def callify(linear: UOp, ctx: HCQState) -> tuple[UOp, Any, tuple[int, ...]]:
  """(LINEAR of what the host still does per run, then the CALL of the submit program; the program; its arguments)."""
  uops, params = build_submit_program(linear, ctx)
  src, lib, prg = compile_submit_program(uops)
  prog = UOp(Ops.PROGRAM, src=(UOp(Ops.DEVICE, arg="CPU"), UOp(Ops.BINARY, arg=lib)), arg="hcq_submit")
  rest = tuple(u for u in linear.src if not is_submit(u) and u.op is not Ops.ADVANCE)
  call = UOp(Ops.CALL, src=(prog,) + tuple(params))
  return linear.replace(src=rest + (call,)), prg, tuple(param_address(p, ctx) for p in params)
