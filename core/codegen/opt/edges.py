"""Edge splits: a conv reading its zero-padded input in place runs its first and last output rows and columns apart from the
interior, where the padding's gates are true and the loads plain (Renderer.conv_edge_split)."""
from __future__ import annotations
from core.ir.dtype import global_nbytes
from core.ir.ops import UOp, Ops, AxisType
from core.codegen.lowerer import _conjuncts
from core.codegen.opt.expander import strided_offset
from core.codegen.opt.kernel import range_size
from core.codegen.opt.pack import read_index

# a gated input up to this size keeps one gated loop nest: core.tensor.conv reads such a small padded input in place on every
# target (its PAD_IN_PLACE_BYTES), measured gated; only the large convs it reads in place for conv_edge_split are split
EDGE_SPLIT_MIN_BYTES = 512 * 1024

def _gated_loads(ast: UOp) -> list[UOp]:
  return [u for u in ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM and len(u.src[0].src) > 2]

def _window_gate(g: UOp, r: UOp, out: UOp) -> bool:
  """Whether gate `g` tests r against a 3-tap window's offset (a range of 3 the output does not use): the 3x3 convs core.tensor.
  conv reads in place at any size, not a transposed conv's phase (1 or 2 taps) or a pool."""
  return any(q.op is Ops.RANGE and q is not r and range_size(q) == 3 and q not in out.toposort() for q in g.toposort())

def _step(idx: UOp, r: UOp) -> int | None: return o[1] if (o := strided_offset(idx, r)) is not None else None

def _gate_loops(ast: UOp, ends: dict[UOp, UOp]) -> list[UOp]:
  """The loops of `ast` (ended in it, at least 2 iterations) that the gates of its input loads test and along which those
  loads step as its output does (a stride-1 window: an output row or column tile, not a weight gradient's row block or a
  strided conv's rows), outermost first."""
  loads = _gated_loads(ast)
  gated = {r for ld in loads for r in ld.src[0].src[2].toposort() if r.op is Ops.RANGE}
  if (out := next((u.src[0].src[1] for u in ast.toposort() if u.op is Ops.STORE and u.src[0].src[0].op is Ops.PARAM), None)) is None: return []
  loops = [r for r in ends if r in gated and r.arg[1] is AxisType.LOOP and (range_size(r) or 0) >= 2 and
           (step := _step(out, r)) is not None and all(_step(read_index(ld.src[0]), r) == step for ld in loads) and
           all(_window_gate(g, r, out) for ld in loads for g in _conjuncts(ld.src[0].src[2]) if r in g.toposort())]
  return sorted(loops, key=lambda r: sum(ends[r] in ends[q].src[0].toposort() for q in loops))

def split_edges(ast: UOp, next_id: list[int] | None = None) -> UOp:
  """`ast` with the outermost loop its gated loads test run as its first iteration, then a loop over the interior ones (split
  again by the next such loop), then its last: with the loop's bounds the interior's gates fold to true (a 3x3 conv padded by
  1: rows 1..n-2), an edge copy's taps that fall in the padding to zeros. Loops and reductions nested in the split one get
  fresh ranges in each copy; register axes are shared (the expander unrolls each copy alike). Same sums in the same order."""
  ends = {u.src[1]: u for u in ast.toposort() if u.op is Ops.END and len(u.src) == 2}
  if not (loops := _gate_loops(ast, ends)): return ast
  r, end = loops[0], ends[loops[0]]
  n, body = range_size(r) or 0, end.src[0]
  if next_id is None: next_id = [max(u.arg[0] for u in ast.toposort() if u.op is Ops.RANGE) + 1]
  # the loops and reductions that run inside r: those whose END or REDUCE depends on it (not a packed panel's copy before it)
  inner = {q for u in body.toposort() if u.op in (Ops.END, Ops.REDUCE) and r in u.toposort()
           for q in u.src[1:] if q.op is Ops.RANGE and q.arg[1] in (AxisType.LOOP, AxisType.REDUCE, AxisType.OUTER)}
  def fresh(q: UOp) -> UOp:
    next_id[0] += 1
    return q.replace(arg=(next_id[0] - 1, q.arg[1]))
  def copy(at: UOp) -> UOp: return body.substitute({r: at, **{q: fresh(q) for q in sorted(inner, key=lambda q: q.arg[0])}})
  parts = [copy(UOp.const(r.dtype, 0))]
  if n > 2:
    mid = fresh(r).replace(src=(UOp.const(r.src[0].dtype, n - 2),))
    parts.append(split_edges(copy(mid + 1), next_id).end(mid))
  parts.append(copy(UOp.const(r.dtype, n - 1)))
  return ast.substitute({end: UOp(Ops.GROUP, src=tuple(parts))})

def edge_split(ast: UOp) -> UOp:
  """`ast` split at its edges (split_edges) where a reduction loop runs over gated loads of one input larger than
  EDGE_SPLIT_MIN_BYTES (a conv reading its large padded input in place, its input channels the loop), else `ast`."""
  loads = _gated_loads(ast)
  bufs = {ld.src[0].src[0] for ld in loads}
  # not where every tap is unrolled (a depthwise conv, a pool: the same gates, no reduction loop): split, their kernels did not
  # linearize (loops not properly nested); they keep one gated nest, as before the split
  if len(bufs) != 1 or not any(u.op is Ops.REDUCE and any(q.op is Ops.RANGE and q.arg[1] is AxisType.REDUCE for q in u.src[1:])
                               for u in ast.toposort()): return ast
  return split_edges(ast) if global_nbytes(next(iter(bufs)).dtype) > EDGE_SPLIT_MIN_BYTES else ast
