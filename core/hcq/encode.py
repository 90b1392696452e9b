"""Stage 5, encode: the plugin's pm_lower turns each command into INS (words + patches); each submit's words become a
command-buffer placeholder, its patches host writes (known before submit) or ring patches (timeline values, known at submit)."""
from __future__ import annotations
import struct
from typing import Any
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat, graph_rewrite
from core.hcq.queue_ir import is_submit, submit_device, submit_queue, placeholder, queue_buffer, host_patch, ring_patch, command_kind, getaddr
from core.hcq.state import HCQState
from core.device.hcq import EncodeCtx

def _is_timeline(u: UOp) -> bool: return u.op is Ops.DEFINE_VAR and isinstance(u.arg, tuple) and u.arg[0] == "timeline"
def needs_submit_time(v: UOp) -> bool: return any(_is_timeline(u) for u in v.toposort())

def _ins_list(u: UOp, what: str) -> list[UOp]:
  if u.op is Ops.INS: return [u]
  if u.op is Ops.LINEAR and all(x.op is Ops.INS for x in u.src): return list(u.src)
  raise RuntimeError(f"the plugin's pm_lower left {what} as {u.op.name}: every command must become INS (or a LINEAR of INS)")

# an address in a command's words is the address as the device running the command sees it
pm_bind_addresses = PatternMatcher([
  (UPat(Ops.GETADDR, src=(UPat(name="b"),)), lambda ctx, b: getaddr(b, device=ctx)),
], name="bind addresses")

def encode_submit(s: UOp, ctx: HCQState, pm: Any) -> tuple[UOp, list[UOp]]:
  dev, q = submit_device(s), submit_queue(s)
  ectx = EncodeCtx(ctx.hcq_of(dev), dev, q)
  words = bytearray()
  patches: list[tuple[int, UOp]] = []
  kinds: list[tuple[str, int]] = []
  for cmd in s.src[0].src:
    kinds.append((command_kind(cmd), len(words)))
    encoded = graph_rewrite(graph_rewrite(cmd, pm, ectx, bottom_up=True, name=f"encode {dev}"), pm_bind_addresses, dev, name="bind addresses")
    for i in _ins_list(encoded, command_kind(cmd)):
      w, offs = i.arg
      if len(w) % 4: raise RuntimeError(f"{dev} {q}: encoded {command_kind(cmd)} is {len(w)} bytes, not a multiple of 4")
      patches += [(len(words) + o, v) for o, v in zip(offs, i.src)]
      words += w
  cmdbuf = placeholder("cmdbuf", dev, max(len(words), 4) // 4, dtypes.uint32)
  host: list[UOp] = []
  ring: list[UOp] = []
  for off, v in patches:
    if v.dtype.itemsize not in (4, 8) or off % 4: raise RuntimeError(f"{dev} {q}: patch at byte {off} of width {v.dtype.itemsize} is not aligned")
    if v.op is Ops.CONST: struct.pack_into("<Q" if v.dtype.itemsize == 8 else "<I", words, off, v.arg & ((1 << 8 * v.dtype.itemsize) - 1))
    elif needs_submit_time(v): ring.append(ring_patch(off, v))
    else: host.append(host_patch(cmdbuf, off, v))
  ctx.contents[cmdbuf] = bytes(words) + bytes(max(0, 4 - len(words)))
  new = UOp(Ops.CUSTOM_FUNCTION, src=(cmdbuf, s.src[1], queue_buffer("ring", q, dev), queue_buffer("wptr", q, dev),
                                      queue_buffer("doorbell", q, dev)) + tuple(ring), arg=("submit", q, len(words)))
  ctx.commands[new] = kinds
  return new, host

def encode(linear: UOp, ctx: HCQState) -> UOp:
  pms: dict[str, Any] = {}
  out: list[UOp] = []
  host: list[UOp] = []
  for u in linear.src:
    if not is_submit(u):
      out.append(u)
      continue
    dev = submit_device(u)
    if dev not in pms and (pms.setdefault(dev, ctx.hooks.pm_lower(dev))) is None: raise RuntimeError(f"no plugin answers core_pm_lower({dev!r})")
    new, hp = encode_submit(u, ctx, pms[dev])
    out.append(new)
    host += hp
  return linear.replace(src=tuple(host) + tuple(out))
