"""Stage 6, pack: the program, kernarg and command-buffer placeholders of one device share one allocation each (views
into it); scratch placeholders of a device become one of the largest size."""
from __future__ import annotations
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat, graph_rewrite
from core.hcq.queue_ir import kind_of, device_of, placeholder, getaddr, host_patch
from core.hcq.state import HCQState
from core.helpers import round_up

PACKED = {"program": 256, "kernargs": 64, "cmdbuf": 16}   # kind -> alignment of each piece (bytes)

def pack_placeholders(linear: UOp, ctx: HCQState) -> dict[UOp, UOp]:
  """{placeholder: BUFFER_VIEW(packed, (nbytes, offset)) or the device's scratch}; packed contents go to ctx.contents."""
  groups: dict[tuple[str, str], list[UOp]] = {}
  for u in linear.toposort():
    if (k := kind_of(u)) in PACKED or k == "scratch": groups.setdefault((device_of(u), k), []).append(u)
  out: dict[UOp, UOp] = {}
  for (dev, k), phs in sorted(groups.items(), key=lambda kv: kv[0]):
    if k == "scratch":
      big = max(phs, key=lambda p: p.arg * p.dtype.itemsize)
      out.update({p: big for p in phs if p is not big})
      continue
    offs, size = [], 0
    for p in phs:
      size = round_up(size, PACKED[k])
      offs.append(size)
      size += p.arg * p.dtype.itemsize
    packed = placeholder(k, dev, max(size, 1))
    blob = bytearray(max(size, 1))
    for p, o in zip(phs, offs):
      if (c := ctx.contents.pop(p, None)) is not None: blob[o:o + len(c)] = c
      out[p] = UOp(Ops.BUFFER_VIEW, p.dtype, (packed,), (p.arg * p.dtype.itemsize, o))
    ctx.contents[packed] = bytes(blob)
  return out

pm_view_addresses = PatternMatcher([
  (UPat(Ops.GETADDR, src=(UPat(Ops.BUFFER_VIEW, name="v"), UPat(Ops.DEVICE, name="d"))), lambda v, d: getaddr(v.src[0], v.arg[1], d.arg)),
  (UPat(Ops.HOST_PATCH, src=(UPat(Ops.BUFFER_VIEW, name="v"), UPat.var("x")), name="p"),
   lambda p, v, x: host_patch(v.src[0], v.arg[1] + p.arg, x)),
], name="view addresses")

def pack(linear: UOp, ctx: HCQState) -> UOp:
  return graph_rewrite(linear.substitute(pack_placeholders(linear, ctx)), pm_view_addresses, name="pack")

