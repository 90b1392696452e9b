"""Stage 8, resolve patches: addresses of the pipeline's own buffers become constants, constant host writes go into memory
now; what is left depends on the schedule's buffers or variables (patched per run) or on timelines (patched at submit)."""
from __future__ import annotations
import struct
from typing import Any
from core.ir.dtype import dtypes, truncate
from core.ir.ops import UOp, Ops, GroupOp, exec_uop_tree
from core.ir.pattern import PatternMatcher, UPat, graph_rewrite
from core.hcq.state import HCQState

def write_value(buf: Any, offset: int, value: int, width: int) -> None:
  """Write a little-endian `width`-byte integer into an allocated Buffer (zero-copy when the allocator maps it)."""
  data = struct.pack("<Q" if width == 8 else "<I", value & ((1 << 8 * width) - 1))
  if (mv := buf.host_view()) is not None: mv[offset:offset + width] = data
  else: buf.view(width, dtypes.uint8, offset).copyin(data)

def _fold(x: UOp) -> UOp | None:
  return UOp.const(x.dtype, truncate(x.dtype, exec_uop_tree(x, {}))) if all(s.op is Ops.CONST for s in x.src) else None

pm_resolve = PatternMatcher([
  (UPat(Ops.GETADDR, src=(UPat(Ops.BUFFER, name="b"), UPat(Ops.DEVICE, name="d"))),
   lambda ctx, b, d: UOp.const(dtypes.uint64, ctx.addr(b, d.arg)) if b in ctx.internal else None),
  (UPat(GroupOp.ALU | {Ops.CAST}, name="x"), _fold),
], name="resolve patches")

def _apply(ctx: HCQState, p: UOp) -> UOp | None:
  ctx_buf, v = p.src
  write_value(ctx.buffer_of(ctx_buf), p.arg, v.arg, v.dtype.itemsize)
  return UOp(Ops.NOOP)

pm_write_constant_patches = PatternMatcher([
  (UPat(Ops.HOST_PATCH, src=(UPat(Ops.BUFFER), UPat(Ops.CONST)), name="p"), _apply),
], name="write constant patches")

def resolve_patches(linear: UOp, ctx: HCQState) -> UOp:
  linear = graph_rewrite(linear, pm_resolve, ctx, name="resolve patches")
  linear = graph_rewrite(linear, pm_write_constant_patches, ctx, name="write constant patches")
  return linear.replace(src=tuple(u for u in linear.src if u.op is not Ops.NOOP))
