"""pm_bufferize (ctx: the device's MetalHCQ): placeholders -> shared-storage buffers of the device."""
from __future__ import annotations
from core.ir.ops import Ops
from core.ir.pattern import PatternMatcher, UPat

pm_bufferize = PatternMatcher([
  # (kind, queue): a queue's ring, wptr, doorbell or timeline signal, the same buffer for every schedule
  (UPat(Ops.BUFFER, name="b", custom=lambda b: isinstance(b.tag, tuple)), lambda ctx, b: ctx.queue_buffer(*b.tag)),
  # program (pipeline handles), kernargs, cmdbuf, scratch, staging: a fresh buffer of the placeholder's size
  (UPat(Ops.BUFFER, name="b", custom=lambda b: isinstance(b.tag, str)), lambda ctx, b: ctx.fresh_buffer(b.arg, b.dtype)),
], name="metal bufferize")
