"""Split a big reduction with few outputs into partial reductions and a total, so the partials can run in parallel.

`sum` of 16M floats is one output: its kernel is one long loop no thread pool or GPU grid can share. Reshaping the reduced
axis into (parts, n/parts), reducing the inner part into a buffer of `parts` partials and then reducing those gives
`parts` independent loops; a length no such split divides leaves its few last elements to the total. A reduction of a
reduction (already split by the Tensor layer) gets its partials realized. Off with NOOPT=1, like the kernel optimizer."""
from __future__ import annotations
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.helpers import prod

SPLIT_MIN = 2**15       # reduced elements per output below which one loop is fine
MAX_OUTPUTS = 64        # with at least this many outputs the reduction is already parallel
MAX_PARTS, MIN_PARTS = 256, 8

def split_reduce(red: UOp) -> UOp | None:
  op, axes = red.arg[:2]   # a split max's parts drop MAX_NO_NAN: they keep NaN, which is allowed (only not required)
  x = red.src[0]
  if x.shape is None or red.shape is None or not all(isinstance(d, int) for d in x.shape): return None
  shape: tuple[int, ...] = x.shape  # type: ignore[assignment]
  out_shape = red.shape
  if prod(out_shape) >= MAX_OUTPUTS or prod(shape[a] for a in axes) < SPLIT_MIN * prod(out_shape): return None
  # the first reduced axis with a divisor in [MIN_PARTS, MAX_PARTS] that leaves long enough inner loops
  for a in axes:
    for parts in range(MAX_PARTS, MIN_PARTS - 1, -1):
      if shape[a] % parts == 0 and shape[a] // parts >= 256: break
    else: continue
    split = shape[:a] + (parts, shape[a] // parts) + shape[a + 1:]
    inner = tuple(ax + (ax > a) for ax in axes if ax != a) + (a + 1,)
    partials = x.reshape(split).r(op, tuple(sorted(inner))).contiguous()
    return partials.r(op, (a,)).reshape(out_shape)
  return split_with_tail(red, max(axes, key=lambda ax: shape[ax]))

def split_with_tail(red: UOp, a: int) -> UOp | None:
  """No divisor fits (a prime length): `parts` equal rows of the first parts*len elements of axis `a` become the partials,
  and the few elements left over are reduced in the total, next to the partials."""
  (op, axes), x = red.arg, red.src[0]
  shape: tuple[int, ...] = x.shape  # type: ignore[assignment]
  assert red.shape is not None
  parts = min(MAX_PARTS, shape[a] // 256)
  if parts < MIN_PARTS: return None
  length, keep = shape[a] // parts, tuple((0, d) for d in shape)
  main = x.shrink(keep[:a] + ((0, parts * length),) + keep[a + 1:])
  split = shape[:a] + (parts, length) + shape[a + 1:]
  inner = tuple(sorted(tuple(ax + (ax > a) for ax in axes if ax != a) + (a + 1,)))
  total = main.reshape(split).r(op, inner).contiguous().r(op, (a,)).reshape(red.shape)
  tail = x.shrink(keep[:a] + ((parts * length, shape[a]),) + keep[a + 1:]).r(op, axes)
  return total.alu(op, tail)

def realize_partials(outer: UOp, inner: UOp) -> UOp | None:
  """A reduction of a reduction that is already split (the Tensor layer sums long float axes in two levels, for accuracy):
  fused, both levels are one loop nest with few outputs; realizing the many partials first makes them parallel."""
  if outer.shape is None or inner.shape is None or inner.src[0].shape is None: return None
  if prod(outer.shape) >= MAX_OUTPUTS or prod(inner.shape) < MAX_OUTPUTS: return None
  if prod(inner.src[0].shape) < SPLIT_MIN * prod(outer.shape): return None
  if (split := unpad_rows(outer, inner)) is not None: return split
  return outer.replace(src=(inner.contiguous(),))

def unpad_rows(outer: UOp, inner: UOp) -> UOp | None:
  """A sum of rows whose last row is padded (the Tensor layer pads a length that the row length does not divide): the full
  rows become the realized partials and the short last row is summed in the total. Without this every load of the partials
  kernel carries a `valid` gate that depends on the lane, and the vector loads become gathers of gated scalars."""
  rows, pad = inner.src[0], inner.src[0].src[0]
  if outer.arg[0] is not Ops.ADD or inner.arg[0] is not Ops.ADD or rows.op is not Ops.RESHAPE or pad.op is not Ops.PAD: return None
  x = pad.src[0]
  if x.shape is None or rows.shape is None or pad.shape is None or not all(isinstance(d, int) for d in rows.shape + x.shape): return None
  *lead, (lo, hi) = pad.arg
  if lo != 0 or hi <= 0 or any(p != (0, 0) for p in lead): return None
  *rest, m, b = rows.shape
  n = x.shape[-1]
  # the reshape must only split x's last axis into (m, b); inner reduces the rows (b), outer the row index (m)
  if tuple(rest) != x.shape[:-1] or m * b != n + hi or hi >= b or inner.arg[1] != (len(rest) + 1,) or outer.arg[1] != (len(rest),): return None
  keep = tuple((0, d) for d in rest)
  full = x.shrink(keep + ((0, (m - 1) * b),)).reshape(tuple(rest) + (m - 1, b)).r(Ops.ADD, (len(rest) + 1,)).contiguous()
  tail = x.shrink(keep + (((m - 1) * b, n),)).r(Ops.ADD, (len(rest),)).reshape(tuple(rest) + (1, 1))
  return full.r(Ops.ADD, (len(rest),)) + tail

pm_split_reduce = PatternMatcher([
  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.REDUCE_AXIS, name="inner"),), name="outer"), realize_partials),
  (UPat(Ops.REDUCE_AXIS, name="red"), split_reduce),
], name="split reduce")
