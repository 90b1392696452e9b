"""pm_bufferize for AMD MOCK devices: each placeholder BUFFER (by tag) becomes a real buffer the device's HCQ object owns."""
from __future__ import annotations
from typing import Any
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat

# per-queue tags ("ring" | "wptr" | "doorbell" | "timeline_signal", queue) map to the queue's one buffer each (the ring's
# placeholder has size 0: the real one is ring_size bytes); "program", "kernargs", "cmdbuf", "scratch" and "staging" get a
# fresh allocation of the placeholder's size (core packs program/kernarg/cmdbuf placeholders first and uploads their contents)
KINDS = ("program", "kernargs", "cmdbuf", "scratch", "staging", "ring", "wptr", "doorbell", "timeline_signal")

def _kind(b: UOp) -> str | None:
  t = b.tag
  k = t if isinstance(t, str) else t[0] if isinstance(t, tuple) and len(t) == 2 else None
  return k if k in KINDS else None

def _bufferize(ctx: Any, b: UOp) -> UOp:
  if (k := _kind(b)) is None:
    raise ValueError(f"{getattr(ctx, 'device', 'AMD')}: no buffer for placeholder tag {b.tag!r} (kinds: {', '.join(KINDS)})")
  if k in ("ring", "wptr", "doorbell", "timeline_signal") and b.tag[1] not in ctx.queues:
    raise ValueError(f"{ctx.device}: placeholder {b.tag!r} names a queue this device lacks (it has {', '.join(ctx.queues)})")
  return ctx.buffer_uop(b.tag, b.dtype, b.arg)

pm_bufferize = PatternMatcher([
  (UPat(Ops.BUFFER, name="b", custom=lambda b: b.tag is not None), _bufferize),
], name="amd mock bufferize")
