"""The loops each node lives in (lowerer.RangeScopes, linearize's), built from its sources' sets by union_of (core.ir.ops): a node whose
sources add no loop to one of theirs shares that set (a new union per node was most of the walk), a new set only where loops
meet."""
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, AxisType, union_of
from core.codegen.lowerer import RangeScopes

def _rng(n: int, axis: int) -> UOp: return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (axis, AxisType.LOOP))

def test_union_of():
  i, j, c = _rng(4, 0), _rng(8, 1), UOp.const(dtypes.index, 3)
  si, sj, sij = frozenset({i}), frozenset({j}), frozenset({i, j})
  sets = {i: si, j: sj, c: frozenset(), i + c: sij}
  assert union_of(sets, (i, c)) is si and union_of(sets, (c, i, i)) is si
  assert union_of(sets, (i + c, j)) is sets[i + c] and union_of(sets, (j, i + c)) is sets[i + c]   # one holds the other
  assert union_of(sets, (i, j)) == sij and union_of(sets, (c,)) == frozenset() and union_of(sets, ()) == frozenset()
  assert union_of(sets, (UOp.const(dtypes.index, 9), j)) is sj   # a node the table lacks adds nothing

def test_range_scopes_share_their_sources_sets():
  i, j = _rng(4, 0), _rng(8, 1)
  buf = UOp.param(0, dtypes.float32.ptr(32))
  idx = i * 8 + j
  st = buf.index(idx).store(UOp.const(dtypes.float32, 1.0))
  inner = st.end(j)
  sink = inner.end(i).sink()
  scopes = RangeScopes()
  scopes.fill(list(sink.toposort()))
  s = scopes.cache
  assert s[idx] == {i, j} and s[st] == {i, j} and s[inner] == {i} and s[sink] == frozenset()
  assert s[i * 8] is s[i] and s[st] is s[idx]   # nothing new: the source's set itself
