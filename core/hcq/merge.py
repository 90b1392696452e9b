"""Stage 4, merge: consecutive submits to the same (device, queue) become one submit (one doorbell instead of several)."""
from __future__ import annotations
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat, graph_rewrite
from core.hcq.queue_ir import is_submit, submit_device, submit_queue, submit

def _mergeable(a: UOp, b: UOp) -> bool:
  return is_submit(a) and is_submit(b) and (submit_device(a), submit_queue(a)) == (submit_device(b), submit_queue(b))

def _merge(x: UOp) -> UOp | None:
  out: list[UOp] = []
  for u in x.src:
    if out and _mergeable(out[-1], u): out[-1] = submit(out[-1].src[0].src + u.src[0].src, submit_device(u), submit_queue(u))
    else: out.append(u)
  return x.replace(src=tuple(out)) if len(out) != len(x.src) else None

pm_merge_submits = PatternMatcher([(UPat(Ops.LINEAR, name="x"), _merge)], name="merge submits")

def merge_submits(linear: UOp) -> UOp: return graph_rewrite(linear, pm_merge_submits, bottom_up=True, name="merge submits")
