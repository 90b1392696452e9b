"""pm_lower (ctx: EncodeCtx): core's abstract queue commands -> Metal encoder calls (cmdbuf.py), with patches for the addresses and
timeline values known only later."""
from __future__ import annotations
from typing import TYPE_CHECKING
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.hcq.queue_ir import getaddr, ins, word_packet_rules
from plugin_metal.cmdbuf import CALLS, Call, packet, field

if TYPE_CHECKING:
  from core.device.hcq import EncodeCtx
  from plugin_metal.prep import MetalProgramData

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

pm_lower = PatternMatcher([
  (UPat(Ops.LAUNCH, src=(UPat(Ops.PROGRAM, name="prog"), UPat(name="kernargs")), name="cmd"), lower_launch),
  *word_packet_rules(CALLS, {Ops.COPY: Call.BLIT_COPY, Ops.WAIT: Call.WAIT, Ops.SIGNAL: Call.SIGNAL, Ops.TIMESTAMP: Call.TIMESTAMP,
                             Ops.BARRIER: Call.MEMORY_BARRIER}),
], name="metal lower")
