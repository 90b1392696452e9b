"""pm_bufferize for QCOM: each placeholder BUFFER (by tag) becomes a real buffer the device's HCQ object (runtime.QCOMHCQ) owns."""
from __future__ import annotations
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from plugin_qcom.runtime import QCOMHCQ

# per-queue tags map to the queue's one buffer; "program", "kernargs", "cmdbuf", "scratch" and "staging" get a fresh
# allocation of the placeholder's size (core packs and uploads program, kernarg and cmdbuf contents)
KINDS = ("program", "kernargs", "cmdbuf", "scratch", "staging", "timestamps") + QCOMHCQ.PER_QUEUE

def _kind(b: UOp) -> str | None:
  t = b.tag
  k = t if isinstance(t, str) else t[0] if isinstance(t, tuple) and len(t) == 2 else None
  return k if k in KINDS else None

def bufferize(ctx: QCOMHCQ, b: UOp) -> UOp:
  if (k := _kind(b)) is None: raise ValueError(f"{ctx.device}: no buffer for placeholder tag {b.tag!r} (kinds: {', '.join(KINDS)})")
  if k in QCOMHCQ.PER_QUEUE and b.tag[1] not in ctx.queues:
    raise ValueError(f"{ctx.device}: placeholder {b.tag!r} names a queue this device lacks (it has {', '.join(ctx.queues)})")
  return ctx.buffer_uop(b.tag, b.dtype, b.arg)

# the HCQ contract's pm_bufferize (ctx: the device's QCOMHCQ)
pm_bufferize = PatternMatcher([(UPat(Ops.BUFFER, name="b", custom=lambda b: b.tag is not None), bufferize)], name="qcom bufferize")
