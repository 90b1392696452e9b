"""pm_bufferize for NV: each placeholder BUFFER (by tag) becomes a real buffer of the device's HCQ object (runtime.NVHCQ).

Per-queue tags map to the channel's own buffers: ("ring", q) the pushbuffer ring core's submit program writes methods into,
("wptr", q) and ("doorbell", q) its dword write pointer and the copy the interface publishes GPFIFO entries up to, and
("timeline_signal", q) the channel's semaphore. "program" (kernel images), "kernargs" (constant bank 0 of each launch with its
QMD behind it), "cmdbuf", "scratch", "staging" and "timestamps" (16 bytes per TIMESTAMP) get a fresh allocation of the
placeholder's size. The GPFIFO ring, the USERD page
with GP_PUT and the work-submit token are the channel's and never reach core (runtime.NVHCQ says who writes them)."""
from __future__ import annotations
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from plugin_nv.runtime import NVHCQ

KINDS = ("program", "kernargs", "cmdbuf", "scratch", "staging", "timestamps") + NVHCQ.PER_QUEUE

def _kind(b: UOp) -> str | None:
  t = b.tag
  k = t if isinstance(t, str) else t[0] if isinstance(t, tuple) and len(t) == 2 else None
  return k if k in KINDS else None

def bufferize(ctx: NVHCQ, b: UOp) -> UOp:
  if (k := _kind(b)) is None: raise ValueError(f"{ctx.device}: no buffer for placeholder tag {b.tag!r} (kinds: {', '.join(KINDS)})")
  if k in NVHCQ.PER_QUEUE and b.tag[1] not in ctx.queues:
    raise ValueError(f"{ctx.device}: placeholder {b.tag!r} names a channel this device lacks (it has {', '.join(ctx.queues)})")
  return ctx.buffer_uop(b.tag, b.dtype, b.arg)

# the HCQ contract's pm_bufferize (ctx: the device's NVHCQ)
pm_bufferize = PatternMatcher([
  (UPat(Ops.BUFFER, name="b", custom=lambda b: b.tag is not None), bufferize),
], name="nv bufferize")
