"""The TC option: a matmul-like reduction (a sum of products of two loads) computed by a renderer's tensor core (Ops.WMMA).

The output axes m and n and the reduce axis k are split into tiles of the tensor core's M, N and K. A new LOCAL axis, the lane
of a warp (lidx0: consecutive work-items form a warp), replaces the tile's inside: each lane loads the elements its fragments
hold (the TensorCore's lane layouts say which), a WMMA multiplies the warp's tiles and adds them to the lane's accumulator
fragment, and each lane stores the output elements its accumulator fragment holds. Axes that are not multiples of the tile are
padded (the extra rows, columns and reduce steps load zeros and store nothing); a kernel that is not such a product is refused
with KernelOptError.
"""
from __future__ import annotations
from typing import TYPE_CHECKING
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, AxisType
from core.ir.pattern import UPat, PatternMatcher
if TYPE_CHECKING: from core.device.tensor_core import TensorCore, LaneLayout   # types only: a renderer with tensor cores loads them
from core.codegen.opt.kernel import KernelOptError, range_size, pad_axis, nest_ends

def lane_index(lay: LaneLayout, lane: UOp, elem: int, dim: str) -> UOp:
  """The row (dim "r") or column ("c") that lane `lane` (an integer UOp) holds as element `elem`: runs of lane-id bits that land
  on consecutive bits of that dimension become one (lane // 2**i) % 2**len * 2**b term."""
  out: UOp = UOp.const(lane.dtype, sum(1 << b for i, (d, b) in enumerate(lay.elem_bits) if d == dim and (elem >> i) & 1))
  i = 0
  while i < len(lay.lane_bits):
    d, b = lay.lane_bits[i]
    j = i + 1
    while j < len(lay.lane_bits) and lay.lane_bits[j] == (d, b + j - i): j += 1
    if d == dim:
      t = lane // (1 << i) if i else lane
      if j < len(lay.lane_bits): t = t % (1 << (j - i))   # the run that ends at the top lane bit needs no modulo
      out = out + (t * (1 << b) if b else t)
    i = j
  return out

def _operand(x: UOp, dtype_in: object) -> UOp | None:
  """The load a product operand reads, when the operand is that load (of the tensor core's input dtype) or its cast."""
  if x.op is Ops.CAST: x = x.src[0]
  return x if x.op is Ops.LOAD and x.dtype is dtype_in and x.src[0].op is Ops.INDEX else None

def _simplify_indices(ast: UOp) -> UOp:
  from core.ir.symbolic import simplify
  sub = {u: u.replace(src=(u.src[0],) + tuple(simplify(s, "simplify index") for s in u.src[1:]))
         for u in ast.toposort() if u.op is Ops.INDEX}
  return ast.substitute(sub) if sub else ast

def _padded(n: int, d: int) -> int:
  p = -(-n // d) * d
  if p > 2 * n: raise KernelOptError(f"TC: an axis of {n} padded to a multiple of {d} more than doubles")
  return p

def _by_id(ast: UOp, rid: int) -> UOp: return next(u for u in ast.toposort() if u.op is Ops.RANGE and u.arg[0] == rid)

def _match(ast: UOp, tc: TensorCore) -> tuple[UOp, UOp, UOp, UOp, UOp, UOp, UOp]:
  """(store, reduce, load a, load b, m, n, k) of a kernel the tensor core can compute, else KernelOptError."""
  if any(r.arg[1] not in (AxisType.LOOP, AxisType.REDUCE) for r in ast.toposort() if r.op is Ops.RANGE):
    raise KernelOptError("TC: must be the first optimization (the kernel already has register, thread or workgroup axes)")
  reds = [u for u in ast.toposort() if u.op is Ops.REDUCE]
  stores = [u for u in ast.toposort() if u.op is Ops.STORE]
  if len(reds) != 1 or len(stores) != 1 or stores[0].src[0].op is not Ops.INDEX: raise KernelOptError("TC: needs one reduction and one store")
  red, st = reds[0], stores[0]
  if red.arg is not Ops.ADD or red.dtype is not tc.dtype_acc: raise KernelOptError(f"TC {tc.key}: not a sum in {tc.dtype_acc}")
  mul = red.src[0]
  # a product rounded to the input dtype and then widened: the tensor core's product is exact, only more accurate
  if mul.op is Ops.CAST and mul.src[0].op is Ops.MUL and mul.src[0].dtype is tc.dtype_in: mul = mul.src[0]
  if mul.op is not Ops.MUL: raise KernelOptError("TC: the reduction is not a sum of products")
  la, lb = _operand(mul.src[0], tc.dtype_in), _operand(mul.src[1], tc.dtype_in)
  if la is None or lb is None: raise KernelOptError(f"TC {tc.key}: the product's operands are not loads of {tc.dtype_in}")
  outs = [r for r in st.src[0].toposort() if r.op is Ops.RANGE and r.arg[1] is AxisType.LOOP and range_size(r) is not None]
  uses = lambda ld, r: r in ld.src[0].toposort()  # noqa: E731
  ks = sorted((r for r in red.src[1:] if range_size(r) is not None and uses(la, r) and uses(lb, r)), key=lambda r: -(range_size(r) or 0))
  if not ks: raise KernelOptError("TC: no reduce axis is used by both loads")
  # m: an output axis only a uses, n: one only b uses (either load may be a); preferred: no padding, then a full tile, then the
  # innermost (the store is contiguous along it)
  M, N, _ = tc.dims
  def best(cands: list[UOp], d: int) -> tuple[tuple[bool, bool, bool, int], UOp] | None:
    sz = lambda r: range_size(r) or 0  # noqa: E731
    return max(((-(-sz(r) // d) * d <= 2 * sz(r), sz(r) % d == 0, sz(r) >= d, r.arg[0]), r) for r in cands) if cands else None
  found = []
  for x, y in ((la, lb), (lb, la)):
    bm = best([r for r in outs if uses(x, r) and not uses(y, r)], M)
    bn = best([r for r in outs if uses(y, r) and not uses(x, r)], N)
    if bm is not None and bn is not None: found.append(((bm[0][:3], bn[0][:3], bn[0][3]), (x, y, bm[1], bn[1])))
  if found:
    x, y, m, n = max(found, key=lambda f: f[0])[1]
    return st, red, x, y, m, n, ks[0]
  raise KernelOptError("TC: no pair of output axes where each is used by only one of the loads")

def apply_tensor_core(ast: UOp, tc: TensorCore) -> UOp:
  """The kernel computed by tensor core `tc` (see the module docstring); KernelOptError when it does not fit."""
  M, N, K = tc.dims
  _, _, _, _, m, n, k = _match(ast, tc)
  ids = (m.arg[0], n.arg[0], k.arg[0])
  # pad the three axes to whole tiles first (each pad makes new RANGE nodes: find them again by id)
  for rid, d in zip(ids, (M, N, K)):
    r = _by_id(ast, rid)
    size = range_size(r)
    assert size is not None
    # a padded reduce step adds a product of gated loads (0 * 0): only output axes gate the stores
    if size % d: ast = pad_axis(ast, r, _padded(size, d), gate_stores=r.arg[1] is AxisType.LOOP)
  st, red, la, lb, m, n, k = _match(ast, tc)
  if (m.arg[0], n.arg[0], k.arg[0]) != ids: raise KernelOptError("TC: padding changed which axes match")
  lane = UOp.range(tc.threads, max(u.arg[0] for u in ast.toposort() if u.op is Ops.RANGE) + 1, AxisType.LOCAL)
  tiles = {r: UOp.range((range_size(r) or 0) // d, r.arg[0], r.arg[1]) for r, d in ((m, M), (n, N), (k, K))}
  def at(r: UOp, d: int, lay: LaneLayout, e: int, dim: str) -> UOp: return tiles[r] * d + lane_index(lay, lane, e, dim)
  # each lane's fragments: the loads at the elements its layout holds (no casts: WMMA takes the input dtype)
  frag_a = UOp.vectorize(*[la.substitute({m: at(m, M, tc.a, e, "r"), k: at(k, K, tc.a, e, "c")}) for e in range(tc.a.elements)])
  frag_b = UOp.vectorize(*[lb.substitute({k: at(k, K, tc.b, e, "r"), n: at(n, N, tc.b, e, "c")}) for e in range(tc.b.elements)])
  acc = tc.dtype_acc.vec(tc.c.elements)
  wmma = UOp(Ops.WMMA, acc, (frag_a, frag_b, UOp.const(acc, 0.0)), tc.key)
  new_red = UOp(Ops.REDUCE, acc, (wmma,) + tuple(tiles.get(r, r) for r in red.src[1:]), red.arg)
  # each lane stores the output elements its accumulator fragment holds
  stores = [st.substitute({red: new_red.gep(e), m: at(m, M, tc.c, e, "r"), n: at(n, N, tc.c, e, "c")}) for e in range(tc.c.elements)]
  rngs: list[UOp] = []
  s = ast.src[0]
  while s.op is Ops.END:
    rngs.extend(s.src[1:])
    s = s.src[0]
  body = UOp(Ops.GROUP, dtypes.void, tuple(stores)).end(*[tiles.get(r, r) for r in rngs], lane)
  return nest_ends(_simplify_indices(ast.replace(src=(body,) + ast.src[1:])))

def _fuse_accumulate(acc: UOp, w: UOp) -> UOp | None:
  """acc + WMMA(a, b, 0) -> WMMA(a, b, acc): the matrix unit adds the accumulator itself."""
  c = w.src[2]
  if c.op not in (Ops.CONST, Ops.VCONST) or any(v != 0 for v in (c.arg if isinstance(c.arg, tuple) else (c.arg,))): return None
  return w.replace(src=(w.src[0], w.src[1], acc))

# run with the lowering of reductions: the accumulator update of a tensor-core reduction becomes the WMMA's own add
pm_wmma_accumulate = PatternMatcher([
  (UPat(Ops.ADD, src=(UPat(name="acc"), UPat(Ops.WMMA, name="w"))), _fuse_accumulate),
  (UPat(Ops.ADD, src=(UPat(Ops.WMMA, name="w"), UPat(name="acc"))), _fuse_accumulate),
], name="wmma accumulate")

def bits_of(bits: tuple[tuple[str, int], ...], rc: dict[str, UOp], dt: object) -> UOp:
  """The lane id (or element index) that holds the matrix element at rc["r"], rc["c"] (integer UOps): bit i is bit b of rc[d]
  for bits[i] == (d, b). The inverse of lane_index, for code that must find another lane's element."""
  out: UOp = UOp.const(dt, 0)  # type: ignore[arg-type]
  for i, (d, b) in enumerate(bits):
    bit = (rc[d] // (1 << b) if b else rc[d]) % 2
    out = out + (bit * (1 << i) if i else bit)
  return out
