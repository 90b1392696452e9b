"""pm_bufferize for AMD: each placeholder BUFFER (by tag) becomes a real buffer the device's HCQ object (runtime.AMDHCQ) owns."""
from __future__ import annotations
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from plugin_amd.runtime import AMDHCQ

# per-queue tags ("ring" | "wptr" | "doorbell" | "timeline_signal", queue) map to the queue's one buffer each (the ring's
# placeholder has size 0: the real one is ring_size bytes); "program", "kernargs", "cmdbuf", "scratch", "staging" and "timestamps" get a
# fresh allocation of the placeholder's size (core packs program/kernarg/cmdbuf placeholders first and uploads their contents)
KINDS = ("program", "kernargs", "cmdbuf", "scratch", "staging", "timestamps") + AMDHCQ.PER_QUEUE

def _kind(b: UOp) -> str | None:
  t = b.tag
  k = t if isinstance(t, str) else t[0] if isinstance(t, tuple) and len(t) == 2 else None
  return k if k in KINDS else None

def bufferize(ctx: AMDHCQ, b: UOp) -> UOp:
  if (k := _kind(b)) is None:
    raise ValueError(f"{ctx.device}: no buffer for placeholder tag {b.tag!r} (kinds: {', '.join(KINDS)})")
  if k in AMDHCQ.PER_QUEUE and b.tag[1] not in ctx.queues:
    raise ValueError(f"{ctx.device}: placeholder {b.tag!r} names a queue this device lacks (it has {', '.join(ctx.queues)})")
  return ctx.buffer_uop(b.tag, b.dtype, b.arg)

# the HCQ contract's pm_bufferize (ctx: the device's AMDHCQ)
pm_bufferize = PatternMatcher([
  (UPat(Ops.BUFFER, name="b", custom=lambda b: b.tag is not None), bufferize),
], name="amd bufferize")
