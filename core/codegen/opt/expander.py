"""UPCAST/UNROLL axes become registers: one chosen axis becomes the lanes of vector values (vector loads, stores, ALU and
accumulators), the others are unrolled into copies of the code; reductions over register axes are summed in registers."""
from __future__ import annotations
import itertools
from typing import Any, Iterator, cast
from core.ir.dtype import dtypes, DType, PtrDType
from core.ir.ops import UOp, Ops, AxisType, GroupOp, reduce_alu, intern_uop
from core.helpers import LRUCache
from core.codegen.opt.kernel import REGISTER_AXES, range_size, build_sum, const_of
from core.codegen.opt.shuffle import transpose_rows

# element types whose vectors every renderer we have loads and stores directly (bool is i1 in LLVM registers, a byte in memory)
VECTOR_MEM_DTYPES = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64})

# element types every renderer computes on in vectors (lane by lane where it has no vector op); half/bf16/fp8 are decomposed
# or emulated after this pass, which expects scalars
VECTOR_SAFE_DTYPES = VECTOR_MEM_DTYPES | frozenset({dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.index,
                                                    dtypes.void})

def _simplify(u: UOp, memo: dict[UOp, UOp] | None = None) -> UOp:
  from core.ir.symbolic import simplify
  return simplify(u, "simplify expanded index", memo)

def _mark_simplified(u: UOp, memo: dict[UOp, UOp]) -> UOp:
  from core.ir.symbolic import mark_simplified
  return mark_simplified(u, memo)

def _combine(op: Ops | tuple[Ops, str], xs: list[UOp]) -> UOp:
  # a balanced tree: independent adds, so the unrolled partial sums don't wait on each other
  while len(xs) > 1:
    xs = [reduce_alu(op, a, b) for a, b in zip(xs[0::2], xs[1::2])] + ([xs[-1]] if len(xs) % 2 else [])
  return xs[0]

# a float sum over register axes alone (a depthwise conv's taps): runs of this many terms accumulated (FMA chains), added in a tree;
# 0: one tree of multiplies and adds. 3x3 taps as 3 chains of 3: 9 FMAs and 2 adds, 3 FMAs deep (one chain of 9 waited 9)
UNROLLED_SUM_CHAIN = 3

FOLD_MIN_BYTES = 16   # vector halves at least this wide are added as vectors when the lanes fold (16: every SIMD ISA's narrowest)

def fold_lanes(op: Ops | tuple[Ops, str], v: UOp) -> UOp:
  """The lanes of vector `v` combined by `op`: its halves as vectors while a half is at least FOLD_MIN_BYTES wide (a 64-lane
  accumulator: 4 vector adds, not 60 scalar ones), then the lanes left one by one in a tree."""
  while (n := v.dtype.count) % 2 == 0 and n // 2 * v.dtype.scalar().itemsize >= FOLD_MIN_BYTES:
    v = _combine(op, [v.gep(tuple(range(n // 2))), v.gep(tuple(range(n // 2, n)))])
  return _combine(op, [v.gep(k) for k in range(v.dtype.count)])

# strides up to this many elements are read as that many whole vectors and shuffled (a stride-2 conv reads every second input
# column): more loads per vector than that cost more than the scalar loads they replace
MAX_SHUFFLED_STRIDE = 4
# a transposing tile's rows (loaded whole, then shuffled) may span registers up to a cache line: an AVX2 tile then reads whole
# input lines, 16 floats in two registers per row (heuristic.hand_coded's whole-line tiles), as an AVX-512 one does in one
ROWS_MAX_BYTES = 64

# strided_offset's answers by (idx, v): the optimizer's trials and the expander's lanes, copies and loads ask the same few indices
# hundreds of times a kernel (ResNet-18 b8 inference: 1666 asks, about a third distinct), each a walk per term and a rebuilt sum
_offsets: LRUCache = LRUCache("strided_offsets", 4096)

def strided_offset(idx: UOp, v: UOp) -> tuple[UOp, int] | None:
  """(idx - c*v, c) when idx is `c*v + (terms not using v)` for a constant c, else None."""
  if (hit := _offsets.get(key := (idx, v), _offsets)) is not _offsets: return hit   # (the cache itself: a miss)
  ret = _offsets[key] = _strided_offset(idx, v)
  return ret

def _strided_offset(idx: UOp, v: UOp) -> tuple[UOp, int] | None:
  from core.ir.symbolic import split_sum
  if (parts := split_sum(idx)) is None: return None
  terms, const = parts
  # v must be one term and in no other: the walks below only where it is one
  if len(with_v := [c for t, c in terms if t is v]) != 1 or any(t is not v and v in t.toposort() for t, _ in terms): return None
  return build_sum(idx, [(t, c) for t, c in terms if t is not v], const), with_v[0]

def contiguous_offset(idx: UOp, v: UOp) -> UOp | None:
  """idx - v when idx is `v + (terms not using v)`, else None (then lanes of v are not neighbours in memory)."""
  return o[0] if (o := strided_offset(idx, v)) is not None and o[1] == 1 else None

def strided_lanes(stride: int, width: int) -> tuple[list[int], list[tuple[int, int]]]:
  """How `width` lanes `stride` elements apart are read as whole vectors of `width`: the vectors' offsets from lane 0 (every
  one inside the span the lanes cover, the last one ending at the last lane) and, per lane, (vector, element)."""
  span = stride * (width - 1) + 1
  starts = [j * width for j in range(-(-span // width) - 1)] + [span - width]
  lanes = [(min(o // width, len(starts) - 1), o - starts[min(o // width, len(starts) - 1)]) for o in (stride * i for i in range(width))]
  return starts, lanes

class Expander:
  """Rewrites a kernel whose register axes are `unrolled` (copied per value) and `vec` (lanes of vector dtypes, or None)."""
  def __init__(self, unrolled: list[UOp], vec: UOp | None, masked: bool = False, mem_dtypes: frozenset[DType] = VECTOR_MEM_DTYPES,
               simd_bytes: int = 0, split_rows: bool = False, walks: Expander | None = None):
    """`walks`: an Expander over the same register axes whose deps, sums and substitutions this one reuses (they depend on
    the set of register axes, not on which of them is the vector axis: pick_vector_axis asks them first)."""
    self.unrolled, self.vec, self.masked, self.mem_dtypes, self.simd_bytes = unrolled, vec, masked, mem_dtypes, simd_bytes
    self.split_rows = split_rows
    self.width: int = (range_size(vec) or 1) if vec is not None else 1
    self.regs = frozenset(unrolled) | ({vec} if vec is not None else set())
    self.memo: dict[tuple[UOp, tuple], UOp] = {}
    self._deps: dict[UOp, frozenset[UOp]] = {}
    self._mem: dict[UOp, bool] = {}
    self._simplified: dict[UOp, UOp] = {}   # shared by every simplify of this kernel: the copies share most of their nodes
    # sub's answers by (node, register values, lane): a kernel's loads and store share one gate and most of one index, which
    # each of them set lane by lane
    self._subs: dict[tuple[UOp, tuple[tuple[UOp, int], ...], int | None], UOp] = {}
    self._sums: dict[UOp, Any] = {}   # _sum_parts by node
    self._whole: dict[UOp, UOp] = {}   # _simplified_whole by node
    self._transposed: dict[tuple[tuple[tuple[UOp, ...], ...], int], list[UOp]] = {}   # a tile's shuffled rows, built once for all its stores
    if walks is not None:
      assert walks.regs == self.regs, "walks over other register axes"
      self._deps, self._mem, self._subs, self._sums = walks._deps, walks._mem, walks._subs, walks._sums

  def deps(self, u: UOp) -> frozenset[UOp]:
    """The register axes u depends on (walked without recursion: kernels can be deep)."""
    if (hit := self._deps.get(u)) is not None: return hit
    for x in u.toposort(stop=self._deps):
      if x in self._deps: continue
      self._deps[x] = (frozenset({x}) & self.regs) if x.op is Ops.RANGE else frozenset().union(*(self._deps[s] for s in x.src))
    return self._deps[u]

  def has_mem(self, u: UOp) -> bool:
    if (hit := self._mem.get(u)) is not None: return hit
    for x in u.toposort(stop=self._mem):
      if x not in self._mem: self._mem[x] = x.op in (Ops.LOAD, Ops.REDUCE, Ops.STORE) or any(self._mem[s] for s in x.src)
    return self._mem[u]

  def sub(self, u: UOp, env: dict[UOp, int], lane: int | None = None) -> UOp:
    """u with the register axes set to constants (the vector axis to `lane`, or kept when None), simplified."""
    d = self.deps(u)
    key = (u, tuple([(r, v) for r, v in env.items() if r in d]), lane)
    if (hit := self._subs.get(key)) is not None: return hit
    vals = dict(key[1])
    if lane is not None and self.vec is not None: vals[self.vec] = lane
    if not vals: return u
    if (ret := self._sub_sum(u, vals)) is not None:
      # simplify's answer, marked as its own: a gate's compare and the lowerer's walks stop at it
      self._subs[key] = ret = _mark_simplified(ret, self._simplified)
      return ret
    if u.dtype is dtypes.bool and u.op in GroupOp.ALU:
      # a gate: each source set as above (a compared index by the sum shortcut, not walked and simplified whole), then only this
      # node simplified (simplify is bottom-up: a node's answer is its simplified sources' node simplified)
      deps = self._deps
      src = tuple(self._simplified_whole(s) if deps[s].isdisjoint(vals) else self.sub(s, env, lane if self.vec in deps[s] else None)
                  for s in u.src)
      ret = self._subs[key] = _simplify(u.replace(src=src), self._simplified)
      return ret
    m = {r: const_of(dtypes.index, v) for r, v in vals.items()}   # constant nodes only here: the sum above moves its constant
    # like u.substitute(m), but the walk stops at nodes that use none of the axes set (most of a big index expression)
    # (self.deps(u) above filled _deps for every node under u)
    ret = self._subs[key] = _simplify(self._set_axes(u, m), self._simplified)
    return ret

  def _set_axes(self, u: UOp, m: dict[UOp, UOp]) -> UOp:
    """u.substitute(m) (m: register axes -> constants), not walking below the nodes that use none of them (most of a big index
    expression): each node rebuilt as its sources are done, in one loop (no gate called per node)."""
    if (hit := m.get(u)) is not None: return hit
    done, deps, keys = dict(m), self._deps, m.keys()
    stack: list[tuple[UOp, Iterator[UOp]]] = [(u, iter(u.src))]
    push, pop = stack.append, stack.pop
    while stack:
      x, srcs = stack[-1]
      for s in srcs:
        if s not in done:
          if deps[s].isdisjoint(keys): done[s] = s
          else:
            push((s, iter(s.src)))
            break
      else:
        pop()
        done[x] = x if deps[x].isdisjoint(keys) else intern_uop(UOp, x.op, x.dtype, tuple([done[s] for s in x.src]), x.arg, x.tag)
    return done[u]

  def _simplified_whole(self, u: UOp) -> UOp:
    """u simplified (a gate's source that uses no axis set), once a kernel."""
    if u.op is Ops.CONST: return u
    if (hit := self._whole.get(u)) is None: hit = self._whole[u] = _simplify(u, self._simplified)
    return hit

  def _sub_sum(self, u: UOp, m: dict[UOp, int]) -> UOp | None:
    """u with the axes of `m` set to its ints, built as the sum it simplifies to, or None where that is not known: u an index sum in which,
    simplified, each axis set is a term of its own and in no other term (setting it then only moves the constant)."""
    if (parts := self._sums.get(u)) is None: parts = self._sums[u] = self._sum_parts(u)
    if not parts: return None
    terms, const, deps = parts
    keep: list[tuple[UOp, int]] = []
    for (t, c), d in zip(terms, deps):
      if t in m: const += c * m[t]
      elif d.isdisjoint(m) and t.vmin != t.vmax: keep.append((t, c))
      else: return None   # a term with an axis set inside, or one value (a size-1 axis): simplify folds it
    ret = build_sum(u, keep, const)
    # a sum whose terms left are constant over their bounds (a size-1 axis) is one value: simplify folds it
    return ret if ret.op is Ops.CONST or ret.vmin != ret.vmax else None

  def _sum_parts(self, u: UOp) -> tuple[list[tuple[UOp, int]], int, list[frozenset[UOp]]] | tuple[()]:
    """split_sum of index u simplified, with each term's register axes; () where it is no sum."""
    from core.ir.symbolic import split_sum
    if u.dtype is not dtypes.index or (parts := split_sum(_simplify(u, self._simplified))) is None: return ()
    return parts[0], parts[1], [self.deps(t) for t, _ in parts[0]]

  def bcast(self, x: UOp) -> UOp: return x if x.dtype.count > 1 or self.width == 1 else UOp.vectorize(*([x] * self.width))

  def __call__(self, u: UOp, env: dict[UOp, int]) -> UOp:
    d = self.deps(u)
    if not d: return u
    key = (u, tuple(sorted((r.arg[0], v) for r, v in env.items() if r in d)))
    if (hit := self.memo.get(key)) is None: hit = self.memo[key] = self._expand(u, env)
    return hit

  def _expand(self, u: UOp, env: dict[UOp, int]) -> UOp:
    op, vec = u.op, self.vec
    if op is Ops.RANGE:
      if u in env: return const_of(dtypes.index, env[u])
      raise RuntimeError(f"expander: the vector axis {u.arg} is used outside index math")
    if op is Ops.SINK: return u.replace(src=tuple(self(s, env) for s in u.src))
    if op is Ops.END: return self._end(u, env)
    if op is Ops.REDUCE: return self._reduce(u, env)
    if op is Ops.LOAD: return self._load(u, env)
    if op is Ops.STORE: return self._store(u, env)
    if vec is not None and vec in self.deps(u) and not self.has_mem(u):
      # pure math on the vector axis (an arange, a mask): an index `base + c*lane` is one vector add, and math on such indices
      # (a causal mask's compare and select) is vector math; any other index is one scalar expression per lane
      if u.dtype is dtypes.index: return self._index_lanes(u, env)
      if u.dtype is dtypes.bool and (lanes := self._gate_lanes(u, env)) is not None: return lanes
      if u.op in GroupOp.ALU and u.dtype.count == 1:
        srcs = [self.bcast(self._index_lanes(s, env) if s.dtype is dtypes.index and vec in self.deps(s) else self(s, env)) for s in u.src]
        return u.replace(src=tuple(srcs), dtype=u.dtype.vec(self.width))
      return UOp.vectorize(*[self.sub(u, env, k) for k in range(self.width)])
    srcs = [self(s, env) for s in u.src]
    if self.width > 1 and any(s.dtype.count > 1 for s in srcs):
      srcs = [self.bcast(s) for s in srcs]
      return u.replace(src=tuple(srcs), dtype=u.dtype.vec(self.width))
    return _simplify(u.replace(src=tuple(srcs)), self._simplified) if u.dtype is dtypes.index or u.dtype is dtypes.bool else u.replace(src=tuple(srcs))

  def _index_lanes(self, u: UOp, env: dict[UOp, int]) -> UOp:
    """The lanes of index u: base + c*lane as a scalar broadcast plus a constant vector when u is that, else lane by lane."""
    if (st := strided_offset(self.sub(u, env), cast(UOp, self.vec))) is not None:
      return self.bcast(st[0]) + UOp.vectorize(*[const_of(dtypes.index, st[1] * k) for k in range(self.width)])
    return UOp.vectorize(*[self.sub(u, env, k) for k in range(self.width)])

  def _gate_lanes(self, u: UOp, env: dict[UOp, int]) -> UOp | None:
    """Condition u lane by lane where the lanes simplify to constants and at most one other condition (a padded row's `lane
    in row`: true but in a tail vector's last lanes, which share one compare of the outer loop, as a masked load's gate does),
    else None (a causal mask's compare stays one vector compare)."""
    lanes: dict[int, UOp] = {}
    def lane(k: int) -> UOp:
      if (x := lanes.get(k)) is None: x = lanes[k] = self.sub(u, env, k)
      return x
    # the end lanes first: a condition of the lane (a causal mask) differs there, found in 2 simplifications rather than width
    if len({x for x in (lane(0), lane(self.width - 1)) if x.op is not Ops.CONST}) > 1: return None
    monotone = self._monotone_in_lane(u, env)
    def fill(a: int, b: int) -> None:
      # a compare of `c*lane + rest` with a bound holds on nested sets of the other values as the lane grows: where lanes a and
      # b come out as one condition, every lane between is that condition too (a padded row's gate: a step, found by bisection)
      if b - a < 2: return
      if monotone and lane(a) is lane(b): lanes.update(dict.fromkeys(range(a + 1, b), lanes[a]))
      else:
        fill(a, m := (a + b) // 2)
        fill(m, b)
    fill(0, self.width - 1)
    vals = [lane(k) for k in range(self.width)]
    return UOp.vectorize(*vals) if len({x for x in vals if x.op is not Ops.CONST}) <= 1 else None

  def _monotone_in_lane(self, u: UOp, env: dict[UOp, int]) -> bool:
    """Whether u is a compare of `c*lane + rest` (the vector axis) with a side free of it: true on nested sets as the lane grows."""
    if u.op is not Ops.CMPLT or sum(self.vec in self.deps(s) for s in u.src) != 1: return False
    side = next(s for s in u.src if self.vec in self.deps(s))
    return side.dtype is dtypes.index and strided_offset(self.sub(side, env), cast(UOp, self.vec)) is not None

  def _combos(self, rngs: list[UOp]) -> list[dict[UOp, int]]:
    sizes = [range(range_size(r) or 1) for r in rngs]
    return [dict(zip(rngs, vals)) for vals in itertools.product(*sizes)]

  def _end(self, u: UOp, env: dict[UOp, int]) -> UOp:
    closed = [r for r in u.src[1:] if r in self.unrolled]
    bodies = [self(u.src[0], {**env, **c}) for c in self._combos(closed)]
    body = bodies[0] if len(bodies) == 1 else UOp(Ops.GROUP, dtypes.void, tuple(bodies))
    rest = [r for r in u.src[1:] if r not in self.regs]
    return body.end(*rest) if rest else body

  def _reduce(self, u: UOp, env: dict[UOp, int]) -> UOp:
    rngs = u.src[1:]
    closed = [r for r in rngs if r in self.unrolled]
    parts = [self(u.src[0], {**env, **c}) for c in self._combos(closed)]
    if any(p.dtype.count > 1 for p in parts): parts = [self.bcast(p) for p in parts]
    rest = [r for r in rngs if r not in self.regs]
    if not rest and UNROLLED_SUM_CHAIN and u.arg is Ops.ADD and dtypes.is_float(u.dtype) and len(parts) > 1:
      # a float sum over registers only: runs of parts as REDUCEs without loops, which the lowerer gives accumulators that
      # renderers with a fused multiply-add update with one FMA per product (lowerer.pm_fuse_mulacc), the runs added in a tree
      n = UNROLLED_SUM_CHAIN
      parts = [_combine(Ops.ADD, parts[i:i + n]).reduce(op=Ops.ADD) for i in range(0, len(parts), n)]
    val = _combine(u.arg, parts)
    red = val.reduce(*rest, op=u.arg) if rest else val
    if self.vec in rngs:
      # a vector accumulator over the lanes of the vector axis: fold its lanes after the loop
      if red.dtype.count == 1: red = self.bcast(red)
      return fold_lanes(u.arg, red)
    return red

  def _mem_index(self, idx: UOp, env: dict[UOp, int], dt: DType, shuffled: bool = False) -> tuple[str, Any]:
    """How to access memory through INDEX `idx`: ("scalar", index), ("vector", index of lane 0), ("lanes", [index per lane])
    or, with `shuffled` (loads), ("strided", (stride, [index of each whole vector strided_lanes reads]))."""
    # the buffer may be a register filled by a loop before this one (PACK): expand that loop too
    buf, rest = self(idx.src[0], env), idx.src[1:]
    if self.vec is None or not any(self.vec in self.deps(s) for s in rest):
      return "scalar", idx.replace(src=(buf,) + tuple(self.sub(s, env) if not self.has_mem(s) else self(s, env) for s in rest))
    i, valid = self.sub(rest[0], env), (self.sub(rest[1], env) if len(rest) > 1 else None)
    if dt.scalar() in self.mem_dtypes and (valid is None or self.vec not in valid.toposort()) and not any(self.has_mem(s) for s in rest) \
       and (base := contiguous_offset(i, self.vec)) is not None:
      return "vector", idx.replace(src=(buf, base) + ((valid,) if valid is not None else ()))
    if self.masked and dt.scalar() in self.mem_dtypes and valid is not None and not any(self.has_mem(s) for s in rest) \
       and (base := contiguous_offset(i, self.vec)) is not None:
      # neighbouring lanes under a gate of their own (a padded copy's edges, a padded row's tail): one load or store whose
      # masked-off lanes touch nothing
      return "vector", idx.replace(src=(buf, base, UOp.vectorize(*[self.sub(rest[1], env, k) for k in range(self.width)])))
    if shuffled and dt.scalar() in self.mem_dtypes and (valid is None or self.vec not in valid.toposort() or self.masked) and \
       not any(self.has_mem(s) for s in rest) and (st := strided_offset(i, self.vec)) is not None and 2 <= st[1] <= MAX_SHUFFLED_STRIDE:
      # lanes a few elements apart: whole vectors over the span they cover, picked from by a shuffle (a gather is a scalar
      # load per lane). A gate per lane (a padded row's tail) masks each vector's elements: a lane's gate where a lane reads
      # it, off elsewhere (the elements between lanes are never needed)
      starts, lanes = strided_lanes(st[1], self.width)
      gates: list[UOp | None] = [valid] * len(starts)
      if valid is not None and self.vec in valid.toposort():
        lane_of = {jl: k for k, jl in enumerate(lanes)}
        gates = [UOp.vectorize(*[self.sub(rest[1], env, lane_of[(j, e)]) if (j, e) in lane_of else UOp.const(dtypes.bool, False)
                                 for e in range(self.width)]) for j in range(len(starts))]
      return "strided", (st[1], [idx.replace(src=(buf, _simplify(st[0] + o, self._simplified)) + ((g,) if g is not None else ()))
                                 for o, g in zip(starts, gates)])
    if shuffled and valid is None and dt.scalar() in self.mem_dtypes and not any(self.has_mem(s) for s in rest) and \
       (rows := self._rows_along(rest[0], dt.itemsize, env)) is not None:
      # lanes that each read along another register axis (a transposing copy's tile): a whole vector per lane along that axis,
      # transposed in registers (shuffle.transpose_rows), where a gather loads every element alone
      axis, bases = rows
      return "rows", (axis, [idx.replace(src=(buf, b)) for b in bases])
    per_src = [self._lane_indices(i, rest[0], env)] + [[self.sub(s, env, k) for k in range(self.width)] for s in rest[1:]]
    return "lanes", [idx.replace(src=(buf,) + tuple(ln[k] for ln in per_src)) for k in range(self.width)]

  def _lane_indices(self, i: UOp, u: UOp, env: dict[UOp, int]) -> list[UOp]:
    """Each lane's index u (i: u with `env` set), as setting the lane in u and simplifying gives it: a 16-lane scattered store
    or gather did that 16 times, each walking the whole sum again. Where i is `c*lane + rest` and lanes 1 and width-1 come out
    as lane 0's terms plus the constant c*k, the lanes between are built so (rules that could see the constant's value, such as
    wrap-around checks, decide at the ends; a lane whose constant is 0 would be the terms alone)."""
    if self.width <= 3 or (st := strided_offset(i, cast(UOp, self.vec))) is None: return [self.sub(u, env, k) for k in range(self.width)]
    c, (first, second, last) = st[1], (self.sub(u, env, k) for k in (0, 1, self.width - 1))
    terms, base = (first.src[0], first.src[1].arg) if first.op is Ops.ADD and first.src[1].op is Ops.CONST else (first, 0)
    def built(k: int) -> UOp: return intern_uop(UOp, Ops.ADD, dtypes.index, (terms, const_of(dtypes.index, base + c * k)))
    if first.dtype is not dtypes.index or not isinstance(base, int) or second is not built(1) or last is not built(self.width - 1) or \
       any(base + c * k == 0 for k in range(1, self.width)):
      return [self.sub(u, env, k) for k in range(self.width)]
    return [first, second] + [built(k) for k in range(2, self.width - 1)] + [last]

  def _rows_along(self, i: UOp, itemsize: int, env: dict[UOp, int]) -> tuple[UOp, list[UOp]] | None:
    """(r, the index of each lane at r = 0) for the first unrolled axis r along which every lane's index `i` is contiguous, of a
    power-of-two size whose row is at most ROWS_MAX_BYTES or one register (16 bytes where the renderer does not say), else None."""
    most = max(self.simd_bytes, ROWS_MAX_BYTES) if self.simd_bytes else 16
    for r in self.unrolled:
      if r not in self.deps(i) or (n := range_size(r) or 0) < 2 or n & (n - 1) or self.width & (self.width - 1) or \
         n * itemsize > most: continue
      rest = {x: v for x, v in env.items() if x is not r}
      bases: list[UOp] = []
      for k in range(self.width):   # (one lane at a time: most gathers fail at the first, and each lane is a simplify)
        if (b := contiguous_offset(self.sub(i, rest, k), r)) is None: break
        bases.append(b)
      else: return r, bases
    return None

  def _load(self, u: UOp, env: dict[UOp, int]) -> UOp:
    kind, idx = self._mem_index(u.src[0], env, u.dtype, shuffled=True)
    alt = [self(s, env) for s in u.src[1:]]
    if kind == "scalar":
      if alt and alt[0].dtype.count > 1: raise RuntimeError("expander: a scalar load with a vector alternative")
      return u.replace(src=(idx, *alt))
    if kind == "vector":
      vdt = u.dtype.vec(self.width)
      if len(idx.src) > 2: alt = [self.bcast(alt[0]) if alt else UOp.const(vdt, 0)]
      return intern_uop(UOp, Ops.LOAD, vdt, (idx, *[self.bcast(a) for a in alt]))
    if kind == "strided":
      stride, idxs = idx
      vdt = u.dtype.vec(self.width)
      if alt and len(idxs[0].src) > 2: alt = [self.bcast(alt[0])]
      elif len(idxs[0].src) > 2: alt = [UOp.const(vdt, 0)]
      vecs = [intern_uop(UOp, Ops.LOAD, vdt, (ix, *alt)) for ix in idxs]
      return UOp.vectorize(*[vecs[j].gep(e) for j, e in strided_lanes(stride, self.width)[1]])
    if kind == "rows":
      axis, idxs = idx
      n, reg = range_size(axis) or 1, self.simd_bytes // u.dtype.itemsize
      # a row wider than a register, in a tile of more rows than a register's lanes (an output row then puts several squares end
      # to end), is loaded a register at a time: each column of squares has loads of its own, and the output rows they make
      # read no others (linearize.tile_keys emits them group by group; one 16-float load per AVX2 row kept every square's rows
      # live until the last output row: 72-80 ymm spills per streamed 16 x 16 tile). Tiles of a register's rows keep whole
      # rows (the C renderer's cached 8-row tiles ran up to 25% slower split; LLVM's no faster). Only where the renderer tests a
      # streamed tile's alignment once (Renderer.split_tile_rows): with clang's branch per store the C renderer's streamed
      # tiles ran 30% slower split
      w = reg if self.split_rows and 2 <= reg < n and len(idxs) > reg else n
      rows = tuple(tuple(intern_uop(UOp, Ops.LOAD, u.dtype.vec(w), (ix if p == 0 else ix.replace(src=(ix.src[0], _simplify(ix.src[1] + p, self._simplified))),))
                         for p in range(0, n, w)) for ix in idxs)
      if (key := (rows, reg)) not in self._transposed: self._transposed[key] = transpose_rows([list(r) for r in rows], reg)
      return self._transposed[key][env[axis]]
    return UOp.vectorize(*[intern_uop(UOp, Ops.LOAD, u.dtype, (ix, *[a.gep(k) if a.dtype.count > 1 else a for a in alt])) for k, ix in enumerate(idx)])

  def _store(self, u: UOp, env: dict[UOp, int]) -> UOp:
    val = self(u.src[1], env)
    kind, idx = self._mem_index(u.src[0], env, u.src[1].dtype)
    if kind == "scalar":
      if val.dtype.count > 1: raise RuntimeError("expander: a vector value stored to one address")
      return u.replace(src=(idx, val) + u.src[2:])
    if kind == "vector": return intern_uop(UOp, Ops.STORE, dtypes.void, (idx, self.bcast(val)))
    return intern_uop(UOp, Ops.GROUP, dtypes.void, tuple(intern_uop(UOp, Ops.STORE, dtypes.void, (ix, val.gep(k) if val.dtype.count > 1 else val))
                                             for k, ix in enumerate(idx)))

def pick_vector_axis(sink: UOp, regs: list[UOp], mem_dtypes: frozenset[DType] = VECTOR_MEM_DTYPES, walks: Expander | None = None) -> UOp | None:
  """The register axis (power-of-two size) along which the most loads inside a reduction touch neighbouring elements, then the
  most loads/stores (ties: the innermost). `walks`: an Expander over `regs` (no vector axis) to ask, whose answers the
  expansion then reuses."""
  best: tuple[int, int, bool, Any] | None = None
  choice = None
  mem = [u for u in sink.toposort() if u.op in (Ops.LOAD, Ops.STORE)]
  # the expander's walks with every axis a register: which axes an index uses, and the index with the others set to 0 (an
  # index sum's terms dropped where it is one: substitute + simplify per load and axis took ~10% of the expander's time)
  probe = walks if walks is not None else Expander(regs, None)
  for r in regs:
    n = range_size(r)
    if n is None or n < 2 or n & (n - 1): continue   # vector types have a power-of-two number of lanes
    others = {x: 0 for x in regs if x is not r}
    score = inner = 0
    for m in mem:
      idx = m.src[0]
      if idx.op is not Ops.INDEX or r not in probe.deps(idx.src[1]): continue
      dt = m.dtype if m.op is Ops.LOAD else m.src[1].dtype
      # (an index using none of the others is simplified as substitute + simplify left it)
      i = (probe.sub(idx.src[1], others) if probe.deps(idx.src[1]) != {r} else _simplify(idx.src[1])) if others else idx.src[1]
      if dt.scalar() in mem_dtypes and contiguous_offset(i, r) is not None:
        score += 2 if m.op is Ops.STORE else 1
        # a load that moves with a reduction runs once per reduce step, one of the outputs' once per output (a fused
        # batchnorm's per-channel scale and shift after a conv must not pull the lanes onto the channels)
        inner += any(x.op is Ops.RANGE and x.arg[1] in (AxisType.REDUCE, AxisType.UNROLL) for x in idx.src[1].toposort())
    key = (inner, score, r.arg[1] is AxisType.UPCAST, r.arg[0])
    if score > 0 and (best is None or key > best): best, choice = key, r
  return choice

def expand_kernel(sink: UOp, vectorize: bool = True, masked: bool = False, vector_dtypes: frozenset[DType] = frozenset(),
                  simd_bytes: int = 0, split_rows: bool = False) -> UOp:
  """Remove every UPCAST/UNROLL range: the vector axis (if `vectorize`) becomes vector lanes, the rest unrolled copies.
  `masked`: the renderer loads and stores vectors under a gate per lane (Renderer.masked_vectors). `vector_dtypes`: element
  types beyond VECTOR_MEM_DTYPES the renderer loads, stores and computes on as vectors (Renderer.vector_dtypes: bfloat16 for
  the host LLVM renderer on CPUs with a bf16 dot product). `simd_bytes`: the renderer's register width (Renderer.simd_width),
  the widest square a transposed tile is shuffled in (0: any). `split_rows`: a transposed tile's rows wider than that load a
  register at a time (Renderer.split_tile_rows)."""
  regs = sorted({u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] in REGISTER_AXES and range_size(u) is not None},
                key=lambda r: r.arg[0])
  if not regs: return sink
  # a WMMA's operands are vectors already (one lane's fragments): its kernel is unrolled, not vectorized
  safe, mem = VECTOR_SAFE_DTYPES | vector_dtypes, VECTOR_MEM_DTYPES | vector_dtypes
  if vectorize and any(u.op is Ops.WMMA or u.dtype.scalar() not in safe for u in sink.toposort() if not isinstance(u.dtype, PtrDType)):
    vectorize = False
  for group in register_groups(sink, regs):
    walks = Expander(group, None)
    vec = pick_vector_axis(sink, group, mem, walks) if vectorize else None
    sink = Expander([r for r in group if r is not vec], vec, masked, mem, simd_bytes, split_rows, walks)(sink, {})
  return sink

def register_groups(sink: UOp, regs: list[UOp]) -> list[list[UOp]]:
  """The register axes in groups that share no node while open (a REDUCE or END closes its ranges): a fused row kernel's
  max, sum and output loops (realize_points.row_fusable) each get vector lanes of their own. Inner groups come first (the
  last node using a group is below every node of the groups after it), so each later pass sees the earlier ones' results
  only through closed reductions, as scalars."""
  parent = {r: r for r in regs}
  def find(r: UOp) -> UOp:
    while parent[r] is not r: r = parent[r]
    return r
  opened: dict[UOp, frozenset[UOp]] = {}
  last: dict[UOp, int] = {}
  for i, u in enumerate(sink.toposort()):
    o = frozenset({u}) & parent.keys() if u.op is Ops.RANGE else frozenset().union(*(opened[x] for x in u.src))
    if u.op in (Ops.REDUCE, Ops.END): o = o - set(u.src[1:])
    opened[u] = o
    if o:
      first, *rest = o
      for r in rest:
        if find(r) is not find(first): parent[find(r)] = find(first)
      for r in o: last[r] = i
  groups: dict[UOp, list[UOp]] = {}
  for r in regs: groups.setdefault(find(r), []).append(r)
  return sorted(groups.values(), key=lambda g: max(last.get(r, -1) for r in g))
