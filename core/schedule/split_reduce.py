"""Split a big reduction with few outputs into partial reductions and a total, so the partials can run in parallel.

`sum` of 16M floats is one output: its kernel is one long loop no thread pool or GPU grid can share. Reshaping the reduced
axis into (parts, n/parts), reducing the inner part into a buffer of `parts` partials and then reducing those gives
`parts` independent loops. A reduction of a reduction (already split by the Tensor layer) gets its partials realized.
Off with NOOPT=1, like the kernel optimizer."""
from __future__ import annotations
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.helpers import prod

SPLIT_MIN = 2**15       # reduced elements per output below which one loop is fine
MAX_OUTPUTS = 64        # with at least this many outputs the reduction is already parallel
MAX_PARTS, MIN_PARTS = 256, 8

def split_reduce(red: UOp) -> UOp | None:
  op, axes = red.arg
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
  return None

def realize_partials(outer: UOp, inner: UOp) -> UOp | None:
  """A reduction of a reduction that is already split (the Tensor layer sums long float axes in two levels, for accuracy):
  fused, both levels are one loop nest with few outputs; realizing the many partials first makes them parallel."""
  if outer.shape is None or inner.shape is None or inner.src[0].shape is None: return None
  if prod(outer.shape) >= MAX_OUTPUTS or prod(inner.shape) < MAX_OUTPUTS: return None
  if prod(inner.src[0].shape) < SPLIT_MIN * prod(outer.shape): return None
  return outer.replace(src=(inner.contiguous(),))

pm_split_reduce = PatternMatcher([
  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.REDUCE_AXIS, name="inner"),), name="outer"), realize_partials),
  (UPat(Ops.REDUCE_AXIS, name="red"), split_reduce),
], name="split reduce")
