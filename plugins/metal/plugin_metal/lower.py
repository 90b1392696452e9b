"""pm_lower (ctx: EncodeCtx): core's abstract queue commands -> Metal encoder calls (cmdbuf.py), with patches for the addresses and
timeline values known only later."""
from __future__ import annotations
from typing import TYPE_CHECKING
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.hcq.queue_ir import getaddr, ins
from plugin_metal.cmdbuf import Call, packet, field

if TYPE_CHECKING:
  from core.device.hcq import EncodeCtx
  from plugin_metal.prep import MetalProgramData

def _u64(v: UOp) -> UOp: return v if v.dtype == dtypes.uint64 else v.cast(dtypes.uint64)

def lower_launch(ctx: EncodeCtx, cmd: UOp, prog: UOp, kernargs: UOp) -> UOp:
  # set the pipeline, bind every argument at its [[buffer(n)]] (buffers through their kernarg slot, patched per run; variables as
  # the kernarg memory holding their int32), dispatch the grid of threadgroups
  data: MetalProgramData = prog.arg
  words, patches = bytearray(packet(Call.SET_PIPELINE, 0)), [(field(0), getaddr(prog.src[1]))]
  for i, off in enumerate(data.arg_offsets):
    patches.append((len(words) + field(1), getaddr(kernargs, off)))
    words += packet(Call.SET_BUFFER_AT if i < data.nbufs else Call.SET_BUFFER, i, 0)
  gs, ls = (tuple(cmd.arg[0]) + (1, 1, 1))[:3], (tuple(cmd.arg[1]) + (1, 1, 1))[:3]
  words += packet(Call.DISPATCH, *gs, *ls)
  return ins(bytes(words), patches)

def lower_event(call: Call, sig: UOp, value: UOp) -> UOp:
  return ins(packet(call, 0, 0), [(field(0), getaddr(sig)), (field(1), _u64(value))])

pm_lower = PatternMatcher([
  (UPat(Ops.LAUNCH, src=(UPat(Ops.PROGRAM, name="prog"), UPat(name="kernargs")), name="cmd"), lower_launch),
  (UPat(Ops.COPY, src=(UPat(name="dst"), UPat(name="src")), name="cmd"),
   lambda ctx, cmd, dst, src: ins(packet(Call.BLIT_COPY, 0, 0, cmd.arg), [(field(0), getaddr(dst)), (field(1), getaddr(src))])),
  (UPat(Ops.WAIT, src=(UPat(name="sig"), UPat(name="value"))), lambda ctx, sig, value: lower_event(Call.WAIT, sig, value)),
  (UPat(Ops.SIGNAL, src=(UPat(Ops.BUFFER, name="sig"), UPat(name="value"))), lambda ctx, sig, value: lower_event(Call.SIGNAL, sig, value)),
  (UPat(Ops.TIMESTAMP, src=(UPat(name="buf"),)), lambda ctx, buf: ins(packet(Call.TIMESTAMP, 0), [(field(0), getaddr(buf))])),
  (UPat(Ops.BARRIER, src=()), lambda ctx: ins(packet(Call.MEMORY_BARRIER))),
], name="metal lower")
