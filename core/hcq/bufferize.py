"""Stage 7, bufferize: the plugin's pm_bufferize maps each placeholder to a real buffer it owns; packed placeholders the
plugin leaves alone get a fresh allocation from core; placeholder contents (program images, commands) are uploaded."""
from __future__ import annotations
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import graph_rewrite
from core.hcq.queue_ir import kind_of, device_of, HOST_KINDS, TIMESTAMPS_KIND
from core.hcq.pack import PACKED
from core.hcq.state import HCQState

def bufferize_map(linear: UOp, ctx: HCQState) -> dict[UOp, UOp]:
  phs = [u for u in linear.toposort() if kind_of(u) is not None and kind_of(u) not in HOST_KINDS]
  out: dict[UOp, UOp] = {}
  for dev in sorted({device_of(p) for p in phs}):
    mine = tuple(p for p in phs if device_of(p) == dev)
    pm = ctx.hooks.pm_bufferize(dev)
    done = graph_rewrite(UOp(Ops.SINK, src=mine), pm, ctx.hcq_of(dev), bottom_up=True, name=f"bufferize {dev}").src if pm is not None else mine
    for p, r in zip(mine, done):
      if r.op is Ops.BUFFER and r.tag is None: out[p] = r
      elif kind_of(p) in PACKED or kind_of(p) == TIMESTAMPS_KIND:
        # core allocates what the plugin does not place itself; it lives as long as the submission holds it
        out[p] = UOp.new_buffer(dev, p.arg, p.dtype)
        ctx.buffer_of(out[p]).allocate()
      else: raise RuntimeError(f"{dev}: the plugin's pm_bufferize did not map placeholder {p.tag!r} to a real buffer (tag None)")
      ctx.internal[out[p]] = None
      if (c := ctx.contents.get(p)) is not None:
        buf = ctx.buffer_of(out[p])
        if buf.nbytes < len(c): raise RuntimeError(f"{dev}: pm_bufferize gave {p.tag!r} {buf.nbytes} bytes, {len(c)} needed")
        if not buf.is_allocated(): buf.allocate()
        if len(c): (buf if buf.nbytes == len(c) else buf.view(len(c), dtypes.uint8, 0)).copyin(c)
  return out

def bufferize(linear: UOp, ctx: HCQState) -> UOp:
  ctx.bufmap.update(m := bufferize_map(linear, ctx))
  return linear.substitute(m)
