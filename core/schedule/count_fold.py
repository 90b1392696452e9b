"""Sums that count: a REDUCE(ADD) over one loop of a value gated by bounds on the loop's index is the number of indices
inside the bounds times the value, with no loop. `arange` builds its indices as running sums of ones (`Tensor._iota`), so
after this fold an index (and a mask from indices, like attention's causal mask) is plain index arithmetic that a kernel
recomputes per element for nothing."""
from __future__ import annotations
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import UPat, PatternMatcher
from core.ir.symbolic import split_sum, _build_sum

def _bound(c: UOp, r: UOp) -> tuple[str, UOp] | None:
  """A comparison `a < b` that bounds r by a value not using r: ("lo", x) for r >= x, ("hi", x) for r < x."""
  if c.op is not Ops.CMPLT or c.src[0].dtype != dtypes.index: return None
  for side, kind in ((1, "lo"), (0, "hi")):
    s, other = c.src[side], c.src[1 - side]
    if r in other.toposort() or (parts := split_sum(s)) is None: continue
    terms, const = parts
    with_r = [(t, k) for t, k in terms if r in t.toposort()]
    if len(with_r) != 1 or with_r[0] != (r, 1): continue
    rest = _build_sum(s, [(t, k) for t, k in terms if t is not r], const)
    # other < r + rest  <=>  r >= other - rest + 1;  r + rest < other  <=>  r < other - rest
    return (kind, other - rest + 1) if kind == "lo" else (kind, other - rest)
  return None

def _conjuncts(g: UOp) -> list[UOp]: return _conjuncts(g.src[0]) + _conjuncts(g.src[1]) if g.op is Ops.AND and g.dtype == dtypes.bool else [g]

def fold_count(red: UOp) -> UOp | None:
  if red.arg is not Ops.ADD or len(red.src) != 2 or not dtypes.is_int(red.dtype): return None
  v, r = red.src
  if r.op is not Ops.RANGE or r.src[0].op is not Ops.CONST: return None
  n = r.src[0].arg
  if r not in v.toposort(): return v * UOp.const(v.dtype, n)
  if v.op is not Ops.WHERE or r in v.src[1].toposort() or v.src[2].op is not Ops.CONST or v.src[2].arg != 0: return None
  lo, hi = UOp.const(dtypes.index, 0), UOp.const(dtypes.index, n)
  for c in _conjuncts(v.src[0]):
    if (b := _bound(c, r)) is None: return None
    if b[0] == "lo": lo = lo.maximum(b[1])
    else: hi = hi.minimum(b[1])
  count = (hi - lo).maximum(UOp.const(dtypes.index, 0))
  return v.src[1] * count.cast(v.dtype)

pm_count_fold = PatternMatcher([(UPat(Ops.REDUCE, name="red"), fold_count)], name="count fold")
