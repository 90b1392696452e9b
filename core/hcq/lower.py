"""Stage 2, lower to queue IR: each call becomes a submit (CUSTOM_FUNCTION "submit") on its device's COMPUTE or COPY queue."""
from __future__ import annotations
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat, graph_rewrite
from core.hcq.queue_ir import submit, copy
from core.hcq.state import HCQState

def pick_queue(queues: tuple[str, ...], kind: str) -> str:
  """The first queue of `kind` ("COMPUTE" or "COPY"); copies fall back to the compute queue on devices without a copy queue."""
  for q in queues:
    if q.split(":")[0] == kind: return q
  if kind == "COPY": return pick_queue(queues, "COMPUTE")
  raise RuntimeError(f"the device offers no {kind} queue (it has {', '.join(queues) or 'none'})")

# a submit carries (until dependencies are inserted) GROUP(buffers written), GROUP(buffers read)
def _lower_launch(ctx: HCQState, call: UOp, l: UOp) -> UOp:
  dev, bufs = l.src[0].src[0].arg, call.src[1:]
  return submit([l], dev, pick_queue(ctx.hcq_of(dev).queues, "COMPUTE"), UOp(Ops.GROUP, src=bufs[:1]), UOp(Ops.GROUP, src=bufs[1:]))

def _lower_copy(ctx: HCQState, call: UOp) -> UOp:
  dest, src = call.src[1], call.src[2]
  dev = call.arg if isinstance(call.arg, str) else dest.src[1].arg
  nbytes = min(dest.arg * dest.dtype.itemsize, src.arg * src.dtype.itemsize)
  return submit([copy(dest, src, nbytes)], dev, pick_queue(ctx.hcq_of(dev).queues, "COPY"), UOp(Ops.GROUP, src=(dest,)), UOp(Ops.GROUP, src=(src,)))

pm_lower_to_queues = PatternMatcher([
  (UPat(Ops.CALL, src=(UPat(Ops.LAUNCH, name="l", src=(UPat(Ops.PROGRAM), UPat(Ops.BUFFER))),), allow_any_len=True, name="call"), _lower_launch),
  (UPat(Ops.CALL, src=(UPat(Ops.COPY),), allow_any_len=True, name="call"), _lower_copy),
], name="lower to queues")

def lower_to_queues(linear: UOp, ctx: HCQState) -> UOp: return graph_rewrite(linear, pm_lower_to_queues, ctx, name="lower to queues")
