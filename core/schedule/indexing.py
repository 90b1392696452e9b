"""Movement ops become index arithmetic: push `INDEX(tensor, valid, *idx)` down to the buffers it reads."""
from __future__ import annotations
from dataclasses import field
from typing import Any
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, GroupOp, AxisType, sint
from core.ir.pattern import UPat, PatternMatcher
from core.helpers import mutable_record, prod

PUSH = "push"  # tag of an INDEX that is still being pushed towards the buffers

def strides_for(shape: tuple[sint, ...]) -> tuple[sint, ...]:
  """Row-major strides, 0 for size-1 dimensions (they never contribute to the offset)."""
  out: list[sint] = []
  acc: sint = 1
  for d in reversed(shape):
    out.append(acc if d != 1 else 0)
    acc = acc * d
  return tuple(reversed(out))

def const_index(v: int) -> UOp: return UOp.const(dtypes.index, v)
TRUE = UOp.const(dtypes.bool, True)

def flat_index(idx: tuple[UOp, ...], shape: tuple[sint, ...]) -> UOp:
  terms = [i * st for i, st in zip(idx, strides_for(shape)) if not (isinstance(st, int) and st == 0)]
  return sum(terms[1:], terms[0]) if terms else const_index(0)

def push(x: UOp, valid: UOp, idx: tuple[UOp, ...]) -> UOp:
  if x.shape is not None and len(idx) != len(x.shape): raise RuntimeError(f"index rank {len(idx)} != shape {x.shape}")
  return UOp(Ops.INDEX, x.dtype, (x, valid) + idx, tag=PUSH)

@mutable_record
class KernelCtx:
  """State of building one kernel: buffer -> PARAM slot, and a counter for new loop ids."""
  params: dict[UOp, UOp] = field(default_factory=dict)   # BUFFER uop -> PARAM uop
  next_axis: int = 0
  def param_for(self, buf: UOp) -> UOp:
    if (p := self.params.get(buf)) is None: p = self.params[buf] = UOp.param(len(self.params), buf.dtype.ptr(buf.arg))
    return p
  def new_range(self, end: sint, kind: AxisType) -> UOp:
    self.next_axis += 1
    return UOp.range(end, self.next_axis - 1, kind)

# *** one rule per tensor op: where the element at `idx` of the result comes from ***

def _runs(src: tuple[sint, ...], dst: tuple[sint, ...]) -> list[tuple[list[int], list[int]]]:
  """The dims of a reshape (size-1 dims left out) in runs of equal products: [(src dims, dst dims)]."""
  s, d = [k for k, n in enumerate(src) if n != 1], [k for k, n in enumerate(dst) if n != 1]
  if not all(isinstance(n, int) and n > 0 for n in src + dst): return [(s, d)]   # symbolic or empty: one run
  out: list[tuple[list[int], list[int]]] = []
  i = j = 0
  while i < len(s) and j < len(d):
    rs, rd, a, b = [s[i]], [d[j]], src[s[i]], dst[d[j]]
    i, j = i + 1, j + 1
    while a != b:
      if a < b: rs, a, i = rs + [s[i]], a * src[s[i]], i + 1   # type: ignore[operator]
      else: rd, b, j = rd + [d[j]], b * dst[d[j]], j + 1   # type: ignore[operator]
    out.append((rs, rd))
  return out

def _reshape(x: UOp, r: UOp, v: UOp, idx: tuple[UOp, ...]) -> UOp:
  assert x.shape is not None and r.shape is not None  # tensor-level nodes always have a shape
  # dims are regrouped run by run: a dim that maps to one dim keeps its index as it is, and in each run the outermost dim takes
  # no modulo (indices are in bounds wherever the read is valid; where it is not, as in a PAD's border, the load is gated), so a
  # read through a pad keeps no division the simplifier could not remove
  new_idx: list[UOp] = [const_index(0)] * len(x.shape)
  for rs, rd in _runs(x.shape, r.shape):
    flat = flat_index(tuple(idx[k] for k in rd), tuple(r.shape[k] for k in rd))
    for n, (k, st) in enumerate(zip(rs, strides_for(tuple(x.shape[k] for k in rs)))):
      q = flat if isinstance(st, int) and st == 1 else flat // st
      new_idx[k] = q if n == 0 else q % x.shape[k]
  return push(x, v, tuple(new_idx))

def _permute(x: UOp, p: UOp, v: UOp, idx: tuple[UOp, ...]) -> UOp:
  new_idx: list[Any] = [None] * len(idx)
  for out_axis, src_axis in enumerate(p.arg): new_idx[src_axis] = idx[out_axis]
  return push(x, v, tuple(new_idx))

def _expand(x: UOp, e: UOp, v: UOp, idx: tuple[UOp, ...]) -> UOp:
  assert x.shape is not None and e.shape is not None
  return push(x, v, tuple(const_index(0) if s == 1 and d != 1 else i for i, s, d in zip(idx, x.shape, e.shape)))

def _shrink(x: UOp, s: UOp, v: UOp, idx: tuple[UOp, ...]) -> UOp:
  return push(x, v, tuple(i + b if not (isinstance(b, int) and b == 0) else i for i, (b, _) in zip(idx, s.arg)))

def _flip(x: UOp, f: UOp, v: UOp, idx: tuple[UOp, ...]) -> UOp:
  assert x.shape is not None
  return push(x, v, tuple((d - 1) - i if fl else i for i, d, fl in zip(idx, x.shape, f.arg)))

def _pad(x: UOp, p: UOp, v: UOp, idx: tuple[UOp, ...]) -> UOp:
  """Reads inside the source get its value, reads in the padding get 0; loads are gated so they never go out of bounds."""
  assert x.shape is not None
  inside = TRUE
  new_idx = []
  for i, d, (b, a) in zip(idx, x.shape, p.arg):
    if isinstance(b, int) and isinstance(a, int) and b == 0 and a == 0:
      new_idx.append(i)
      continue
    cond = (i < (d + b)) if isinstance(b, int) and b == 0 else ((i >= b) & (i < (d + b)))
    inside = cond if inside is TRUE else inside & cond
    new_idx.append(i - b)
  inner = push(x, inside if v is TRUE else v & inside, tuple(new_idx))
  return inside.where(inner, inner.const_like(0))

def _reduce(ctx: KernelCtx, x: UOp, r: UOp, v: UOp, idx: tuple[UOp, ...]) -> UOp:
  assert x.shape is not None
  op, axes = r.arg[:2]
  new_idx = list(idx)
  ranges = []
  for a in axes:
    rng = ctx.new_range(x.shape[a], AxisType.REDUCE)
    ranges.append(rng)
    new_idx[a] = rng
  return push(x, v, tuple(new_idx)).reduce(*ranges, op=(op, r.arg[2]) if len(r.arg) > 2 else op)

def _elementwise(x: UOp, v: UOp, idx: tuple[UOp, ...]) -> UOp:
  return x.replace(src=tuple(push(s, v, idx) for s in x.src), tag=None)

def _buffer(ctx: KernelCtx, b: UOp, v: UOp, idx: tuple[UOp, ...]) -> UOp:
  gate = () if v is TRUE else (v,)
  return UOp(Ops.INDEX, b.dtype.ptr(b.arg), (ctx.param_for(b), idx[0]) + gate).load()

def _const(c: UOp) -> UOp: return UOp.const(c.dtype, c.arg)

def _rule(op: Ops | tuple[Ops, ...], fn: Any, with_ctx: bool = False) -> tuple[UPat, Any]:
  pat = UPat(Ops.INDEX, src=(UPat(op, name="x"),), allow_any_len=True, tag=PUSH, name="ix")
  if with_ctx: return (pat, lambda ctx, ix, x: fn(ctx, x.src[0] if x.src else x, x, ix.src[1], ix.src[2:]))
  return (pat, lambda ix, x: fn(x.src[0], x, ix.src[1], ix.src[2:]))

pm_index = PatternMatcher([
  _rule(Ops.RESHAPE, _reshape), _rule(Ops.PERMUTE, _permute), _rule(Ops.EXPAND, _expand), _rule(Ops.SHRINK, _shrink),
  _rule(Ops.FLIP, _flip), _rule(Ops.PAD, _pad), _rule(Ops.REDUCE_AXIS, _reduce, with_ctx=True),
  (UPat(Ops.INDEX, src=(UPat(GroupOp.Elementwise, name="x"),), allow_any_len=True, tag=PUSH, name="ix"),
   lambda ix, x: _elementwise(x, ix.src[1], ix.src[2:])),
  (UPat(Ops.INDEX, src=(UPat(Ops.BUFFER, name="b"),), allow_any_len=True, tag=PUSH, name="ix"),
   lambda ctx, ix, b: _buffer(ctx, b, ix.src[1], ix.src[2:])),
  (UPat(Ops.INDEX, src=(UPat(Ops.CONST, name="c"),), allow_any_len=True, tag=PUSH), _const),
  # a scalar variable as a value (the eager path's float literals, core/engine/realize.py): the same at every element
  (UPat(Ops.INDEX, src=(UPat(Ops.DEFINE_VAR, name="v"),), allow_any_len=True, tag=PUSH), lambda v: v),
], name="index")

def output_ranges(ctx: KernelCtx, shape: tuple[sint, ...]) -> list[UOp]:
  return [ctx.new_range(d, AxisType.LOOP) if d != 1 else const_index(0) for d in shape]

__all__ = ["pm_index", "KernelCtx", "push", "flat_index", "output_ranges", "strides_for", "TRUE", "prod"]
