"""A kernel AST seen as axes with roles, and the optimizer's actions (Opt), each applied as a rewrite of the AST."""
from __future__ import annotations
import enum
from dataclasses import dataclass
from typing import Any, Callable
from core.ir.ops import UOp, Ops, AxisType, intern_uop
from core.ir.dtype import dtypes, DType
from core.helpers import prod, fast_members
from core.device.renderer import Renderer

@fast_members
class OptOps(enum.Enum):
  """UPCAST/UNROLL split an output/reduce axis and expand the inner part into registers; THREAD splits an output axis into
  blocks run by the renderer's thread pool (GLOBAL); LOCAL makes a workgroup axis (work-item ids, renderers with locals); GROUP
  splits a reduce axis across the work-items of a workgroup (GROUP_REDUCE: partial results combined through shared memory
  after a barrier, lowerer.lower_group_reduce); SWAP exchanges the nesting of two loops (`amt` is the other axis); PACK copies
  the inputs that loop `axis` reuses into a contiguous thread-private buffer before the loop (opt/pack.py); TILE splits a LOOP
  into two nested loops (the inner one innermost of the loops, so SWAPs and PACKs can put other loops between them); PADTO
  rounds an output axis up to a multiple of `amt` (the extra iterations compute on zeros and store nothing), so a later split
  by `amt` divides it, or a reduce axis (its reductions take their identity on the extra iterations); TC computes the kernel's
  sum of products on tensor core number `axis` of the renderer's tensor_cores
  (opt/tc.py: it must come first, and no LOCAL or GROUP may follow, which would move the warp's lanes off lidx0); NOOP does
  nothing; MERGE makes LOOP `axis` and the LOOP nested in it (`amt`) one loop, where every address uses them as one
  (axis * size(amt) + amt, times a stride: the spatial axes of a 1x1 conv or a permute), so the vectors along it see the
  whole row-major extent (28x28 -> 784, 16-lane vectors where 28 took 4); INTERLEAVE deals the GLOBAL `axis`'s blocks out to
  `amt` threads that each run an equal run of consecutive block ids (a CPU pool's home shares): block g does the work of
  block (g mod n/amt) * amt + g div n/amt, so the threads' j-th blocks are neighbours."""
  UPCAST = "UPCAST"; UNROLL = "UNROLL"; THREAD = "THREAD"; LOCAL = "LOCAL"; GROUP = "GROUP"; SWAP = "SWAP"; PACK = "PACK"  # noqa: E702
  PADTO = "PADTO"; TILE = "TILE"; TC = "TC"; NOOP = "NOOP"; MERGE = "MERGE"; INTERLEAVE = "INTERLEAVE"  # noqa: E702

@dataclass(frozen=True)
class Opt:
  """One action: `axis` indexes Kernel.axes of the kernel it is applied to; `amt` is the split size (0: the whole axis)."""
  op: OptOps
  axis: int = 0
  amt: int = 0
  def to_json(self) -> list[Any]: return [self.op.value, self.axis, self.amt]
  @staticmethod
  def from_json(x: list[Any]) -> Opt: return Opt(OptOps(x[0]), int(x[1]), int(x[2]))

class KernelOptError(ValueError):
  """An Opt that does not apply to this kernel (BEAM skips these candidates)."""

# loop nesting, outermost first: thread blocks, workgroups, output loops, reductions; register axes disappear when expanded.
# OUTER marks the copy loops PACK makes: they nest where their uses put them, and no Opt applies to them
AXIS_RANK = {AxisType.GLOBAL: 0, AxisType.LOCAL: 1, AxisType.OUTER: 2, AxisType.LOOP: 3, AxisType.GROUP_REDUCE: 4, AxisType.REDUCE: 5,
             AxisType.UPCAST: 6, AxisType.UNROLL: 7}
REGISTER_AXES = (AxisType.UPCAST, AxisType.UNROLL)
MAX_REGISTER_ELEMS = 1024  # product of UPCAST/UNROLL sizes: more unrolls into code too large to compile quickly

def axis_key(r: UOp) -> tuple[int, Any]: return (AXIS_RANK[r.arg[1]], r.arg[0])
def range_size(r: UOp) -> int | None: return r.src[0].arg if r.src[0].op is Ops.CONST else None

# index math is built node by node thousands of times a kernel: these build UOp's operators' nodes with the interning call
# itself (x * c and x + y each pass through _binop, const_like's shape and device walks, UOp.const's checks and the metaclass)
def const_of(dtype: DType, v: Any) -> UOp:
  """UOp.const(dtype, v) of a kernel node's scalar dtype (an index's int directly)."""
  return intern_uop(UOp, Ops.CONST, dtype, (), v) if dtype is dtypes.index and type(v) is int else UOp.const(dtype, v)

def build_sum(like: UOp, terms: list[tuple[UOp, int]], const: int) -> UOp:
  """symbolic._build_sum's node for kernel-level math (no device, so const_like is UOp.const): the terms times their
  coefficients (0 dropped, 1 bare) added left to right, then the constant (or `like`'s constant when nothing is left)."""
  acc: UOp | None = None
  for t, c in terms:
    if c == 0: continue
    e = t if c == 1 else intern_uop(UOp, Ops.MUL, t.dtype, (t, const_of(t.dtype, c)))
    acc = e if acc is None else intern_uop(UOp, Ops.ADD, acc.dtype, (acc, e))
  if acc is None: return const_of(like.dtype, const)
  return intern_uop(UOp, Ops.ADD, acc.dtype, (acc, const_of(acc.dtype, const))) if const != 0 else acc

class Kernel:
  """The axes (RANGE nodes) of a kernel AST with their sizes and roles. `apply` returns a new Kernel: ASTs are immutable."""
  def __init__(self, ast: UOp, renderer: Renderer | None = None, applied: tuple[Opt, ...] = ()):
    if ast.op is not Ops.SINK: raise TypeError(f"Kernel needs a kernel SINK, got {ast.op.name}")
    # no renderer: the base one's capabilities (no threads, locals, shared memory or tensor cores)
    self.ast, self.renderer, self.applied = ast, renderer if renderer is not None else Renderer(), applied
    self.axes: list[UOp] = sorted({u for u in ast.toposort() if u.op is Ops.RANGE}, key=axis_key)

  def types(self) -> list[AxisType]: return [r.arg[1] for r in self.axes]
  def sizes(self) -> list[int | None]: return [range_size(r) for r in self.axes]
  def of_type(self, *ts: AxisType) -> list[UOp]: return [r for r in self.axes if r.arg[1] in ts]
  def register_elems(self) -> int:
    """Register elements of the largest group of register axes expanded together (expander.register_groups: a fused row
    kernel's reductions and its output loop are expanded one after another, so their sizes do not multiply)."""
    from core.codegen.opt.expander import register_groups
    if not (regs := self.of_type(*REGISTER_AXES)): return 1
    return max(prod(range_size(r) or 1 for r in g) for g in register_groups(self.ast, regs))
  def __repr__(self) -> str:
    return f"Kernel({self.ast.arg}: " + ", ".join(f"{r.arg[1].name}{range_size(r) or '?'}" for r in self.axes) + ")"

  def apply(self, opt: Opt) -> Kernel:
    """The kernel with `opt` applied; KernelOptError when it does not fit."""
    if opt.op is OptOps.NOOP: return Kernel(self.ast, self.renderer, self.applied + (opt,))
    if opt.op is OptOps.TC:
      from core.codegen.opt.tc import apply_tensor_core
      tcs = self.renderer.tensor_cores
      if not 0 <= opt.axis < len(tcs): raise KernelOptError(f"{opt}: the renderer has {len(tcs)} tensor cores")
      return Kernel(apply_tensor_core(self.ast, tcs[opt.axis]), self.renderer, self.applied + (opt,))
    if not 0 <= opt.axis < len(self.axes): raise KernelOptError(f"{opt}: kernel {self.ast.arg} has {len(self.axes)} axes")
    r = self.axes[opt.axis]
    if opt.op is OptOps.SWAP:
      if not (0 <= opt.amt < len(self.axes)) or opt.amt == opt.axis: raise KernelOptError(f"{opt}: no other axis {opt.amt}")
      o = self.axes[opt.amt]
      if r.arg[1] is not AxisType.LOOP or o.arg[1] is not AxisType.LOOP: raise KernelOptError(f"{opt}: SWAP needs two LOOP axes")
      return Kernel(swap_ids(self.ast, r, o), self.renderer, self.applied + (opt,))
    if opt.op is OptOps.PACK:
      from core.codegen.opt.pack import pack_loads
      if r.arg[1] is not AxisType.LOOP: raise KernelOptError(f"{opt}: PACK needs a LOOP axis, not {r.arg[1].name}")
      if (packed := pack_loads(self.ast, r, self.renderer.simd_width)) is None: raise KernelOptError(f"{opt}: no input read at fixed strides is reused by this loop")
      return Kernel(packed, self.renderer, self.applied + (opt,))
    if opt.op is OptOps.MERGE:
      if not (0 <= opt.amt < len(self.axes)) or opt.amt == opt.axis: raise KernelOptError(f"{opt}: no other axis {opt.amt}")
      if (merged := merge_axes(self.ast, r, self.axes[opt.amt])) is None: raise KernelOptError(f"{opt}: the axes are not used as one")
      return Kernel(merged, self.renderer, self.applied + (opt,))
    kind, n = r.arg[1], range_size(r)
    if n is None: raise KernelOptError(f"{opt}: axis {opt.axis} has a symbolic size")
    if opt.op is OptOps.INTERLEAVE:
      if kind is not AxisType.GLOBAL: raise KernelOptError(f"{opt}: INTERLEAVE needs the GLOBAL axis, not {kind.name}")
      if opt.amt < 2 or n % opt.amt or n == opt.amt: raise KernelOptError(f"{opt}: {n} blocks are not {opt.amt} runs of several")
      if any(o.op is OptOps.INTERLEAVE for o in self.applied): raise KernelOptError(f"{opt}: the blocks are interleaved already")
      dealt = (r % (n // opt.amt)) * opt.amt + r // (n // opt.amt)
      # every use of the block id takes the dealt one, but the END of its range
      done: dict[UOp, UOp] = {}
      for u in self.ast.toposort():
        src = tuple(s if s is r and u.op is Ops.END else dealt if s is r else done.get(s, s) for s in u.src)
        if any(a is not b for a, b in zip(src, u.src)): done[u] = u.replace(src=src)
      return Kernel(done.get(self.ast, self.ast), self.renderer, self.applied + (opt,))
    if opt.op is OptOps.PADTO:
      if kind not in (AxisType.LOOP, AxisType.REDUCE): raise KernelOptError(f"{opt}: PADTO needs a LOOP or REDUCE axis, not {kind.name}")
      if opt.amt < 2 or n % opt.amt == 0: raise KernelOptError(f"{opt}: axis size {n} needs no padding to a multiple of {opt.amt}")
      if (n + opt.amt - 1) // opt.amt * opt.amt > n * 2: raise KernelOptError(f"{opt}: padding {n} to {opt.amt} more than doubles it")
      size = -(-n // opt.amt) * opt.amt
      ast = pad_axis(self.ast, r, size) if kind is AxisType.LOOP else pad_reduce(self.ast, r, size)
      return Kernel(ast, self.renderer, self.applied + (opt,))
    amt = opt.amt or n
    if amt < 2: raise KernelOptError(f"{opt}: a split of {amt} changes nothing (axis size {n})")
    if n % amt: raise KernelOptError(f"{opt}: {amt} does not divide the axis size {n}")
    rnd = self.renderer
    if opt.op is OptOps.UPCAST:
      if kind not in (AxisType.LOOP, AxisType.GLOBAL, AxisType.LOCAL): raise KernelOptError(f"{opt}: UPCAST needs an output axis, not {kind.name}")
      ast = split_axis(self.ast, r, amt, AxisType.UPCAST)
    elif opt.op is OptOps.UNROLL:
      if kind not in (AxisType.REDUCE, AxisType.GROUP_REDUCE): raise KernelOptError(f"{opt}: UNROLL needs a reduce axis, not {kind.name}")
      ast = split_axis(self.ast, r, amt, AxisType.UNROLL)
    elif opt.op is OptOps.THREAD:
      if not rnd.threads: raise KernelOptError(f"{opt}: the renderer has no thread pool (threads=0)")
      if kind is not AxisType.LOOP: raise KernelOptError(f"{opt}: THREAD needs a LOOP axis, not {kind.name}")
      if self.of_type(AxisType.GLOBAL): raise KernelOptError(f"{opt}: the kernel is already split into thread blocks")
      ast = split_axis(self.ast, r, amt, AxisType.GLOBAL, outer=True)
    elif opt.op is OptOps.TILE:
      if kind is not AxisType.LOOP: raise KernelOptError(f"{opt}: TILE needs a LOOP axis, not {kind.name}")
      ast = split_axis(self.ast, r, amt, AxisType.LOOP)
    elif opt.op in (OptOps.LOCAL, OptOps.GROUP) and any(o.op is OptOps.TC for o in self.applied):
      raise KernelOptError(f"{opt}: after TC the warp's lanes must stay the innermost work-item id")
    elif opt.op is OptOps.LOCAL:
      if not rnd.has_local: raise KernelOptError(f"{opt}: the renderer has no local (workgroup) ids")
      if kind not in (AxisType.LOOP, AxisType.GLOBAL): raise KernelOptError(f"{opt}: LOCAL needs an output axis, not {kind.name}")
      ast = split_axis(self.ast, r, amt, AxisType.LOCAL)
    elif opt.op is OptOps.GROUP:
      if not rnd.has_shared: raise KernelOptError(f"{opt}: the renderer has no shared (workgroup) memory")
      if kind is not AxisType.REDUCE: raise KernelOptError(f"{opt}: GROUP needs a REDUCE axis, not {kind.name}")
      reds = [u for u in self.ast.toposort() if u.op is Ops.REDUCE]
      # a group reduction reuses its shared buffer on every trip of an enclosing reduce loop, which would need a second barrier
      if any(x is not red and red in x.src[0].toposort() for red in reds if r in red.src[1:] for x in reds):
        raise KernelOptError(f"{opt}: the reduction over axis {opt.axis} runs inside another reduction")
      ast = split_axis(self.ast, r, amt, AxisType.GROUP_REDUCE)
    else: raise KernelOptError(f"{opt}: {opt.op.name} is not supported")
    k = Kernel(ast, rnd, self.applied + (opt,))
    # the groups' walk only where every register axis together is over the bound (the largest group is at most all of them)
    if prod(range_size(r) or 1 for r in k.of_type(*REGISTER_AXES)) > MAX_REGISTER_ELEMS and (n := k.register_elems()) > MAX_REGISTER_ELEMS:
      raise KernelOptError(f"{opt}: {n} register elements > {MAX_REGISTER_ELEMS}")
    if (err := k.workgroup_error()) is not None: raise KernelOptError(f"{opt}: {err}")
    return k

  def workgroup_error(self) -> str | None:
    """Why the workgroup (LOCAL and GROUP_REDUCE axes) does not fit the renderer, or None: its work-items must not exceed
    local_max[0], and the shared buffers of the group reductions (a slot per work-item, per vector lane) not shared_max."""
    lanes = self.of_type(AxisType.LOCAL, AxisType.GROUP_REDUCE)
    if not lanes: return None
    n = prod(range_size(r) or 1 for r in lanes)
    if (lm := self.renderer.local_max) and n > lm[0]: return f"{n} work-items per workgroup > {lm[0]}"
    groups = set(self.of_type(AxisType.GROUP_REDUCE))
    shared = sum(u.dtype.itemsize for u in self.ast.toposort() if u.op is Ops.REDUCE and groups & set(u.src[1:]))
    shared *= n * prod(range_size(r) or 1 for r in self.of_type(AxisType.UPCAST))
    if shared > (sm := self.renderer.shared_max): return f"group reductions need {shared} bytes of shared memory > {sm}"
    return None

def apply_opts(ast: UOp, opts: list[Opt] | tuple[Opt, ...], renderer: Renderer | None = None) -> UOp:
  k = Kernel(ast, renderer)
  for o in opts: k = k.apply(o)
  return k.ast

def pad_axis(ast: UOp, r: UOp, size: int, gate_stores: bool = True) -> UOp:
  """Output axis r (size n) iterated to `size` > n: every load that uses it and every store is gated by r < n, so the extra
  iterations read nothing (a gated load gives 0) and write nothing. `gate_stores=False` gates only the loads (pad_reduce, which
  then gives each reduction over the axis its identity on the extra iterations)."""
  n = range_size(r)
  assert n is not None
  new = UOp.range(size, r.arg[0], r.arg[1])
  ok = new < n
  done: dict[UOp, UOp] = {r: new}
  for u in ast.toposort(stop=done):
    if u in done: continue
    src = tuple(done[s] for s in u.src)
    if u.op is Ops.INDEX and any(s is not o for s, o in zip(src, u.src)):
      src = src[:2] + ((src[2] & ok if len(src) > 2 else ok),) + src[3:]
    done[u] = u if all(a is b for a, b in zip(src, u.src)) else u.replace(src=src)
  out = done[ast]
  if not gate_stores: return nest_ends(out)
  # a store whose index does not use r (a broadcast output) still must not run on the extra iterations
  stores = {u: u.replace(src=(u.src[0].replace(src=u.src[0].src[:2] + ((u.src[0].src[2] & ok if len(u.src[0].src) > 2 else ok),)),)
                                + u.src[1:])
            for u in out.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and new not in u.src[0].toposort()}
  return nest_ends(out.substitute(stores) if stores else out)

def pad_reduce(ast: UOp, r: UOp, size: int) -> UOp:
  """Reduce axis r (size n) iterated to `size` > n: its loads gated as in pad_axis, and each reduction over r takes its
  identity (0 for a sum, -inf for a max) on the extra iterations, whatever its input computes from the gated zeros (exp(0 - m))."""
  from core.codegen.lowerer import reduce_identity
  n = range_size(r)
  assert n is not None
  padded = pad_axis(ast, r, size, gate_stores=False)
  new = next(u for u in padded.toposort() if u.op is Ops.RANGE and u.arg == r.arg)
  ok = new < n
  reds = {u: u.replace(src=(ok.where(u.src[0], reduce_identity(u.arg, u.dtype)),) + u.src[1:])
          for u in padded.toposort() if u.op is Ops.REDUCE and new in u.src[1:]}
  return nest_ends(padded.substitute(reds))

def merge_axes(ast: UOp, a: UOp, b: UOp) -> UOp | None:
  """LOOP ranges a (size A) and b (size B) replaced by one range of size A*B with a's id, or None unless every use of them is
  an address `a*(B*s) + b*s + rest` (a gate, a broadcast along one of them, or any other use keeps them apart)."""
  from core.ir.symbolic import split_sum
  A, B = range_size(a), range_size(b)
  if A is None or B is None or a.arg[1] is not AxisType.LOOP or b.arg[1] is not AxisType.LOOP: return None
  new = UOp.range(A * B, a.arg[0], a.arg[1])
  sub: dict[UOp, UOp] = {}
  for u in ast.toposort():
    if u.op is not Ops.INDEX or len(u.src) < 2: continue
    deps = u.src[1].toposort()
    if a not in deps and b not in deps: continue
    if (parts := split_sum(u.src[1])) is None: return None
    terms, const = parts
    coef = {x: sum(c for t, c in terms if t is x) for x in (a, b)}
    if any(t is not a and t is not b and (a in t.toposort() or b in t.toposort()) for t, _ in terms): return None
    if coef[b] == 0 or coef[a] != coef[b] * B: return None
    rest = [(t, c) for t, c in terms if t is not a and t is not b]
    sub[u] = u.replace(src=(u.src[0], build_sum(u.src[1], rest + [(new, coef[b])], const), *u.src[2:]))
  out = ast.substitute(sub)
  done: dict[UOp, UOp] = {}
  for u in out.toposort():
    if u.op in (Ops.END, Ops.REDUCE):
      src = (done[u.src[0]],) + tuple(new if s is a else done[s] for s in u.src[1:] if s is not b)
    elif u is a or u is b: continue
    elif any(s is a or s is b for s in u.src): return None   # a use outside an address (a gate, arithmetic on the index)
    else: src = tuple(done[s] for s in u.src)
    done[u] = u if src == u.src else u.replace(src=src)
  return nest_ends(done[out])

def split_axis(ast: UOp, r: UOp, amt: int, kind: AxisType, outer: bool = False) -> UOp:
  """Replace RANGE r (size n) by two ranges: `amt` of role `kind` and n/amt keeping r's role. `outer=False` puts the new
  range inside (r = r_out*amt + r_new), `outer=True` outside (r = r_new*(n/amt) + r_in): blocks of consecutive iterations.
  When amt is the whole axis the range just changes role."""
  n = range_size(r)
  assert n is not None
  new_id = max(u.arg[0] for u in ast.toposort() if u.op is Ops.RANGE) + 1
  if amt == n: return rebuild(ast, {r: (UOp.range(n, r.arg[0], kind),)})
  new = UOp.range(amt, new_id, kind)
  keep = UOp.range(n // amt, r.arg[0], r.arg[1])
  expr = keep * amt + new if not outer else new * (n // amt) + keep
  return rebuild(ast, {r: (keep, new)}, expr)

def rebuild(ast: UOp, split: dict[UOp, tuple[UOp, ...]], expr: UOp | None = None) -> UOp:
  """Substitute each old range by its new ranges: in END and REDUCE sources the list of ranges, elsewhere the index
  expression `expr` (or the single new range). Index math is simplified, and the END chains re-nested (canonical order)."""
  from core.ir.symbolic import simplify, split_sum, mark_simplified
  (old, news), = split.items()
  val = expr if expr is not None else news[0]
  # the index math of loads and stores: fold the new products and sums
  memo: dict[UOp, UOp] = {}   # the loads and stores of a kernel mostly share their index math: each node simplified once
  parts = split_sum(val)
  def index_math(before: UOp, after: UOp) -> UOp:
    # a canonical sum over ranges (the index math of every earlier rebuild) is built as simplify gives it: ~0.2 ms a sum saved
    if parts is not None and (terms := canonical_range_sum(before)) is not None:
      if after is before: return before
      # marked in the memo: the expander's and lowerer's simplify calls then stop at the sum instead of walking it again
      if (ret := _resplit(before, *terms, old, parts)) is not None: return mark_simplified(ret, memo)
    return simplify(after, "simplify index", memo)
  return _rewalk(ast, {old: val}, {old: news}, index_math)

def swap_ids(ast: UOp, a: UOp, b: UOp) -> UOp:
  """LOOP ranges a and b with their ids exchanged: loops nest by id within a role, so the nesting is exchanged and the
  iteration space stays the same. One walk of the kernel (it was three rebuilds, through a spare id)."""
  from core.ir.symbolic import simplify, mark_simplified, _order
  new = {a: a.replace(arg=b.arg), b: b.replace(arg=a.arg)}
  memo: dict[UOp, UOp] = {}
  def index_math(before: UOp, after: UOp) -> UOp:
    # a canonical sum over ranges stays one with the two terms renamed, in simplify's order (as rebuild's _resplit builds it)
    if (parts := canonical_range_sum(before)) is not None:
      if after is before: return before
      terms = sorted([(new.get(t, t), c) for t, c in parts[0]], key=lambda tc: _order(tc[0]))
      return mark_simplified(build_sum(before, terms, parts[1]), memo)
    return simplify(after, "simplify index", memo)
  return _rewalk(ast, new, {r: (n,) for r, n in new.items()}, index_math)

def _rewalk(ast: UOp, vals: dict[UOp, UOp], ends: dict[UOp, tuple[UOp, ...]], index_math: Callable[[UOp, UOp], UOp]) -> UOp:
  """`ast` with each range r of `vals` replaced: by the ranges ends[r] in END and REDUCE sources, elsewhere by vals[r]; then
  each INDEX's sources after the buffer by index_math(before, after), and the END chains re-nested (canonical order)."""
  done: dict[UOp, UOp] = dict(vals)
  idx_nodes: list[tuple[UOp, UOp]] = []   # the INDEX nodes, old and new (the values of `vals` have none)
  for u in ast.toposort(stop=done):
    if u in done: continue
    if u.op in (Ops.END, Ops.REDUCE):
      rng = tuple(x for s in u.src[1:] for x in (ends[s] if s in ends else (done[s],)))
      new_src = (done[u.src[0]],) + rng
    else: new_src = tuple(done[s] for s in u.src)
    done[u] = u if new_src == u.src else intern_uop(UOp, u.op, u.dtype, new_src, u.arg, u.tag)
    if u.op is Ops.INDEX: idx_nodes.append((u, done[u]))
  out = done[ast]
  sub = {new: new.replace(src=(new.src[0],) + tuple(index_math(b, a) for b, a in zip(u.src[1:], new.src[1:]))) for u, new in idx_nodes}
  out = out.substitute(sub) if sub else out
  return nest_ends(out)

def canonical_range_sum(s: UOp) -> tuple[list[tuple[UOp, int]], int] | None:
  """(terms, constant) of index `s` where it is a sum of ranges as simplify leaves one (so simplify returns it unchanged): a
  left-deep chain of terms r or r*c (c > 1, r no size-1 range), one per range, in simplify's order, a nonzero constant last;
  else None."""
  from core.ir.symbolic import _order
  if s.dtype is not dtypes.index: return None
  const, u = (s.src[1].arg, s.src[0]) if s.op is Ops.ADD and s.src[1].op is Ops.CONST else (None, s)
  if const is not None and (type(const) is not int or const == 0): return None
  terms: list[tuple[UOp, int]] = []
  while True:
    t = u.src[1] if u.op is Ops.ADD else u
    if t.op is Ops.MUL and t.src[1].op is Ops.CONST and type(c := t.src[1].arg) is int and c > 1: t = t.src[0]
    else: c = 1
    if t.op is not Ops.RANGE or t.src[0].op is not Ops.CONST or t.src[0].arg < 2: return None
    terms.append((t, c))
    if u.op is not Ops.ADD: break
    u = u.src[0]
  terms.reverse()
  keys = [_order(t) for t, _ in terms]
  return (terms, const or 0) if all(a < b for a, b in zip(keys, keys[1:])) else None

def _resplit(like: UOp, terms: list[tuple[UOp, int]], const: int, old: UOp, parts: tuple[list[tuple[UOp, int]], int]) -> UOp | None:
  """The canonical sum `terms + const` with range `old` set to the sum `parts` of new ranges, as simplify builds it: old's
  term replaced by one term per new range, in simplify's order; None where old is no term or parts is no plain sum of ranges."""
  from core.ir.symbolic import _order
  new_terms, rest = parts
  if rest or len(c := [k for t, k in terms if t is old]) != 1: return None
  if any(r.op is not Ops.RANGE or r.src[0].op is not Ops.CONST or r.src[0].arg < 2 or m < 1 for r, m in new_terms): return None
  out = [(t, k) for t, k in terms if t is not old] + [(r, m * c[0]) for r, m in new_terms]
  if len({t for t, _ in out}) != len(out): return None
  return build_sum(like, sorted(out, key=lambda tk: _order(tk[0])), const)

def nest_ends(sink: UOp) -> UOp:
  """Every STORE's END chain rebuilt with one range per END, outermost first by (role, id)."""
  srcs = []
  for s in sink.src:
    rngs: list[UOp] = []
    while s.op is Ops.END:
      rngs.extend(s.src[1:])
      s = s.src[0]
    for r in sorted(rngs, key=axis_key, reverse=True): s = s.end(r)
    srcs.append(s)
  return sink.replace(src=tuple(srcs))
