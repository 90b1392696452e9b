"""linearize's order: sources before users, each loop contiguous from its RANGE to its END, a loop after everything its body
uses from outside (even where the graph order puts that after the RANGE), the kernel's arguments first in slot order."""
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, AxisType
from core.codegen.linearize import linearize
from core.codegen.lowerer import RangeScopes

def _rng(n: int, axis: int) -> UOp: return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (axis, AxisType.LOOP))

def test_loops_wait_for_what_their_body_uses():
  # out[i*8+j] = a[i*8+j] + b[0]: b[0] is loaded outside both loops, and the graph order reaches it after the RANGEs (the
  # store's index comes before its value); the arguments are made out of slot order
  i, j = _rng(4, 0), _rng(8, 1)
  b, a, out = UOp.param(2, dtypes.float32.ptr(1)), UOp.param(1, dtypes.float32.ptr(32)), UOp.param(0, dtypes.float32.ptr(32))
  outside = b.index(UOp.const(dtypes.index, 0)).load()
  sink = out.index(i * 8 + j).store(a.index(i * 8 + j).load() + outside).end(j).end(i).sink()
  nodes = list(sink.toposort())
  assert nodes.index(i) < nodes.index(outside)
  uops = linearize(sink)
  pos = {u: k for k, u in enumerate(uops)}
  assert len(pos) == len(uops) and set(uops) == set(nodes) - {sink}
  assert all(pos[s] < pos[u] for u in uops for s in u.src), "a source after its user"
  assert [(u.op, u.arg) for u in uops[:3]] == [(Ops.PARAM, 0), (Ops.PARAM, 1), (Ops.PARAM, 2)]
  assert pos[outside] < pos[i] < pos[j]
  scopes = RangeScopes()
  scopes.fill(nodes)
  for r in (i, j):   # each loop contiguous: what lives in it lies between its RANGE and its END
    end = next(u for u in uops if u.op is Ops.END and u.src[1] is r)
    assert all(pos[r] < pos[u] < pos[end] for u in uops if r in scopes.cache[u] and u is not r)
    assert all(not pos[r] < pos[u] < pos[end] for u in uops if r not in scopes.cache[u] and u.op is not Ops.END and u is not j)
  assert [u.src[1] for u in uops if u.op is Ops.END] == [j, i]   # j's loop inside i's
