"""Kernel graph -> renderable graph: reductions become accumulators, loops become thread ids, index math gets a width."""
from __future__ import annotations
import functools, math, operator
from typing import Iterable
from core.ir.dtype import dtypes, AddrSpace, DType
from core.ir.ops import UOp, Ops, AxisType, reduce_op, reduce_alu, intern_uop
from core.ir.pattern import UPat, PatternMatcher, graph_rewrite
from core.helpers import prod
from core.codegen.stash import stash_reduced_values, max_ahead, COSTLY_OPS

_op_of = operator.attrgetter("op")

class RangeScopes:
  """Which loops each node lives in: a RANGE opens its loop, an END closes it."""
  def __init__(self) -> None: self.cache: dict[UOp, frozenset[UOp]] = {}
  def __call__(self, root: UOp) -> frozenset[UOp]:
    if (hit := self.cache.get(root)) is not None: return hit
    # asked in graph order (linearize), a node's sources are known: no walk
    self.fill((root,) if all(s in self.cache for s in root.src) else root.toposort(stop=self.cache))
    return self.cache[root]
  def fill(self, nodes: Iterable[UOp]) -> None:
    """Answer every node of `nodes`, in order (sources first): each from its sources, with no test or walk."""
    # (ops.union_of written inline: its call per node was most of it)
    cache, get, RANGE, END = self.cache, self.cache.get, Ops.RANGE, Ops.END
    for u in nodes:
      if u in cache: continue
      live: frozenset[UOp] = frozenset()
      for s in (src := u.src):
        if not (e := get(s)) or e is live or e <= live: continue
        live = e if live <= e else live | e
      if (op := u.op) is RANGE: live = live | {u}
      elif op is END: live = live - set(src[1:])
      cache[u] = live

def reduce_identity(op: Ops | tuple[Ops, str], dtype: DType) -> UOp:
  return UOp.const(dtype, {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtype.min}[reduce_op(op)])

class LowerCtx:
  def __init__(self, sink: UOp | None = None) -> None:
    self.scopes = RangeScopes()
    # registers the optimizer made (PACK buffers) keep their numbers; accumulators count on from there
    nodes = list(sink.toposort()) if sink is not None else []   # one walk for all the scans below
    self.ops = frozenset(map(_op_of, nodes))   # (the rules lower_kernel needs: _pm_lower)
    self.regs = max((u.arg + 1 for u in nodes if u.op is Ops.DEFINE_REG and isinstance(u.arg, int)), default=0)
    # REDUCEs over the same ranges share one loop (unrolled copies of a register-blocked reduction), so each accumulator is
    # initialised inside every loop that encloses any of them; else one copy's loop would be hoisted above another's
    self.enclosing: dict[tuple[UOp, ...], frozenset[UOp]] = {}
    # the loops each node lives in, like RangeScopes but a REDUCE closes its own ranges (it is not lowered to an END yet): for a
    # node with no REDUCE below, RangeScopes' answer (_accumulate asks these first, with no walk)
    self.live: dict[UOp, frozenset[UOp]] = {}
    live = self.live
    # (up to the last REDUCE: only theirs are asked; a kernel without one, half of a training step's, walks nothing)
    last = max((i for i, u in enumerate(nodes) if u.op is Ops.REDUCE), default=-1)
    get, RANGE, END, REDUCE = live.get, Ops.RANGE, Ops.END, Ops.REDUCE
    for u in nodes[:last + 1]:
      lv: frozenset[UOp] = frozenset()
      for s in (src := u.src):   # (ops.union_of inline, as in RangeScopes.fill)
        if not (e := get(s)) or e is lv or e <= lv: continue
        lv = e if lv <= e else lv | e
      if (op := u.op) is RANGE: lv = lv | {u}
      elif op is END or op is REDUCE:
        lv = lv - set(src[1:])
        if op is REDUCE:
          key = tuple(r for r in src[1:] if r.arg[1] is not AxisType.GROUP_REDUCE)   # the loops its accumulator runs in
          self.enclosing[key] = self.enclosing.get(key, frozenset()) | (live[src[0]] - set(key))
      live[u] = lv
    # workgroup axes (LOCAL) index a group reduction's shared buffer with its own lanes; new loops get fresh ids
    rngs = [u for u in nodes if u.op is Ops.RANGE]
    # the kernel's loops: lowering its REDUCEs keeps every one (an END, a register's store or a gate still uses it) and adds only
    # REDUCE loops (lower_group_reduce's reads), which never become thread ids: thread_ids takes them from here, not a walk
    self.ranges = rngs
    self.group_reduce = any(r.arg[1] is AxisType.GROUP_REDUCE for r in rngs)   # else gate_group_stores has nothing to gate
    self.locals = sorted((r for r in rngs if r.arg[1] is AxisType.LOCAL), key=lambda r: r.arg)
    self.next_range = max((r.arg[0] for r in rngs), default=-1) + 1
    self.shared = 0

def _accumulate(ctx: LowerCtx, op: Ops | tuple[Ops, str], v: UOp, rngs: tuple[UOp, ...]) -> UOp:
  """A register initialised inside the loops enclosing v, updated with v in the `rngs` loops, read after them."""
  # v as the lowering found it: a node of the kernel with no REDUCE below (LowerCtx.live has it), or one built from lowered parts
  if (live := ctx.live.get(v)) is None: live = ctx.scopes(v)
  outer = sorted((live - set(rngs)) | ctx.enclosing.get(rngs, frozenset()), key=lambda r: r.arg)
  acc = intern_uop(UOp, Ops.DEFINE_REG, v.dtype.ptr(1, AddrSpace.REG), (), ctx.regs)
  ctx.regs += 1
  zero = UOp.const(dtypes.index, 0)
  init = intern_uop(UOp, Ops.STORE, dtypes.void, (acc.index(zero), reduce_identity(op, v.dtype)) + tuple(outer))
  acc_in = acc.after(init, *rngs)   # reading the accumulator must stay inside the reduce loops
  upd: UOp = acc_in.index(zero).store(reduce_alu(op, acc_in.index(zero).load(), v))
  for r in sorted(rngs, key=lambda r: r.arg, reverse=True): upd = upd.end(r)
  return acc.after(upd).index(zero).load()

def _flat(rngs: list[UOp]) -> UOp:
  """The row-major position of the ranges' values (the last one fastest)."""
  out, stride = rngs[-1], rngs[-1].src[0].arg
  for r in reversed(rngs[:-1]):
    out, stride = out + r * stride, stride * r.src[0].arg
  return out

def lower_group_reduce(ctx: LowerCtx, red: UOp, groups: list[UOp]) -> UOp:
  """A reduction shared by a workgroup: its GROUP_REDUCE axes are work-item ids (map_globals). Each work-item reduces its part
  over the other axes, writes it to a slot of a shared (DEFINE_LOCAL) buffer, and after a BARRIER every work-item reduces the
  slots of its group: the same value in all of them (gate_group_stores lets one store it)."""
  v, rest = red.src[0], tuple(r for r in red.src[1:] if r not in groups)
  part = _accumulate(ctx, red.arg, v, rest) if rest else v
  lanes = ctx.locals + groups   # one slot per work-item of the group
  buf = UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(prod(r.src[0].arg for r in lanes), AddrSpace.LOCAL), (), ctx.shared)
  ctx.shared += 1
  bar = UOp(Ops.BARRIER, dtypes.void, (buf.index(_flat(lanes)).store(part),))
  reads = []
  for g in groups:
    reads.append(UOp.range(g.src[0].arg, ctx.next_range, AxisType.REDUCE))
    ctx.next_range += 1
  slots = [reads[groups.index(r)] if r in groups else r for r in lanes]
  return _accumulate(ctx, red.arg, buf.after(bar).index(_flat(slots)).load(), tuple(reads))

def lower_reduce(ctx: LowerCtx, red: UOp) -> UOp:
  """REDUCE(v, *ranges) -> a register initialised inside the enclosing loops, updated in the reduce loops, read after."""
  if groups := [r for r in red.src[1:] if r.arg[1] is AxisType.GROUP_REDUCE]: return lower_group_reduce(ctx, red, groups)
  return _accumulate(ctx, red.arg, red.src[0], red.src[1:])

pm_lower_reduce = PatternMatcher([(UPat(Ops.REDUCE, name="red"), lower_reduce)], name="lower reduce")

def _is_acc_read(u: UOp) -> bool:
  """u reads an accumulator register (LOAD(INDEX(AFTER(DEFINE_REG, ...), 0)))."""
  if u.op is not Ops.LOAD or u.src[0].op is not Ops.INDEX: return False
  return u.src[0].src[0].after_base.op is Ops.DEFINE_REG

def _sum_terms(v: UOp) -> list[UOp]:
  """The terms of an ADD tree (the unrolled parts the expander summed), left to right."""
  return _sum_terms(v.src[0]) + _sum_terms(v.src[1]) if v.op is Ops.ADD else [v]

def fuse_mulacc(upd: UOp) -> UOp | None:
  """acc + (a0*b0 + a1*b1 + ...) -> mulacc(a1, b1, mulacc(a0, b0, acc)): one fused multiply-add per product. A reduction's
  order of summation is unspecified, so the reassociation is as correct as the balanced tree it replaces."""
  acc, v = (upd.src[0], upd.src[1]) if _is_acc_read(upd.src[0]) else (upd.src[1], upd.src[0])
  if not _is_acc_read(acc) or acc is v: return None
  terms = _sum_terms(v)
  if not any(t.op is Ops.MUL for t in terms): return None
  out = acc
  for t in terms: out = intern_uop(UOp, Ops.MULACC, upd.dtype, (t.src[0], t.src[1], out)) if t.op is Ops.MUL else out + t
  return out

# for renderers with a fused multiply-add (Renderer.extra_matcher): accumulator updates of float reductions use it
pm_fuse_mulacc = PatternMatcher([
  (UPat(Ops.ADD, name="upd", custom=lambda upd: dtypes.is_float(upd.dtype) and (_is_acc_read(upd.src[0]) or _is_acc_read(upd.src[1]))),
   fuse_mulacc),
], name="fuse mulacc")

def _thread_ids(loops: list[UOp], prefix: str, ndim: int) -> tuple[dict[UOp, UOp], list[int], list[UOp]]:
  """Loops (outermost first) as hardware ids `<prefix>0..` (0 the innermost loop); with more loops than `ndim` ids the outer
  ones share one id, split back with div/mod. Returns the substitution, the id sizes and the conditions a thread must meet
  to exist (see below)."""
  groups = [loops[:len(loops) - ndim + 1]] + [[r] for r in loops[len(loops) - ndim + 1:]] if len(loops) > ndim else [[r] for r in loops]
  sub: dict[UOp, UOp] = {}
  sizes = []
  valid: list[UOp] = []
  for gi, grp in enumerate(reversed(groups)):
    # a symbolic loop end (a Variable's shape) launches its largest value; the extra threads redo the last iteration (their
    # index is clamped), so they read in bounds and store the same value to the same place: no gates, one kernel for all values.
    # An end that can be 0 has no last iteration to redo: there the extra threads keep their index and every global memory
    # access is gated on `id < end` (gate_invalid_threads)
    ext = [int(r.src[0].vmax) for r in grp]
    total = prod(ext)
    sp = UOp.special(total, f"{prefix}{gi}")
    sizes.append(total)
    stride = 1
    for r, n in zip(reversed(grp), reversed(ext)):
      i = sp if len(grp) == 1 else (sp // stride) % n
      end = r.src[0]
      if end.op is Ops.CONST: sub[r] = i
      elif end.vmin >= 1: sub[r] = (i < end).where(i, end - 1)
      else:
        sub[r] = i
        valid.append(i < end)
      stride *= n
  return sub, sizes, valid

def gate_invalid_threads(sink: UOp, valid: list[UOp]) -> UOp:
  """Every access to a global buffer (INDEX of a PARAM) gated on `valid`: a thread beyond a symbolic loop end that can be 0
  neither reads nor writes memory (a gated load gives 0)."""
  if not valid: return sink
  cond = valid[0]
  for v in valid[1:]: cond = cond & v
  sub: dict[UOp, UOp] = {}
  for idx in sink.toposort():
    if idx.op is not Ops.INDEX or idx.src[0].op is not Ops.PARAM: continue
    gate = idx.src[2] & cond if len(idx.src) > 2 else cond
    sub[idx] = idx.replace(src=idx.src[:2] + (gate,) + idx.src[3:])
  return sink.substitute(sub)

def thread_ids(sink: UOp, global_max: tuple[int, ...] | None, threads: int = 0, ranges: list[UOp] | None = None) \
    -> tuple[UOp, dict[UOp, UOp], list[UOp], tuple[int, ...], tuple[int, ...]]:
  """map_globals before its substitution: the sink with the ENDs of loops that become ids dropped, {loop: its id expression},
  the conditions a thread must meet to exist (gate_invalid_threads), and the launch and workgroup sizes. `ranges`: the kernel's
  RANGEs where the caller has them (LowerCtx.ranges; REDUCE loops may be missing), else a walk of `sink` finds them."""
  if threads > 0:
    global_max = (2 ** 31 - 1,)
    kinds: tuple[AxisType, ...] = (AxisType.GLOBAL,)
  else: kinds = (AxisType.LOOP, AxisType.GLOBAL)
  rngs = sorted({u for u in sink.toposort() if u.op is Ops.RANGE} if ranges is None else set(ranges), key=lambda r: r.arg)
  loops = [r for r in rngs if r.arg[1] in kinds] if global_max else []
  # a group's work-items innermost (lidx0): neighbours read neighbouring elements of the reduction
  lanes = [r for r in rngs if r.arg[1] is AxisType.LOCAL] + [r for r in rngs if r.arg[1] is AxisType.GROUP_REDUCE]
  if not loops and not lanes: return sink, {}, [], (1, 1, 1), (1, 1, 1)
  sub, launch, valid = _thread_ids(loops, "gidx", len(global_max)) if global_max and loops else ({}, [], [])
  lsub, local, lvalid = _thread_ids(lanes, "lidx", 3) if lanes else ({}, [], [])
  sub.update(lsub)
  # drop the ENDs of loops that became thread ids (wherever they sit in a chain); the ranges are replaced after
  def strip(u: UOp) -> UOp:
    if u.op is not Ops.END: return u
    inner = strip(u.src[0])
    keep = tuple(r for r in u.src[1:] if r not in sub)
    return inner.end(*keep) if keep else inner
  return sink.replace(src=tuple(strip(s) for s in sink.src)), sub, valid + lvalid, tuple(launch + [1] * (3 - len(launch))), \
    tuple(local + [1] * (3 - len(local)))

def map_globals(sink: UOp, global_max: tuple[int, ...] | None, threads: int = 0) -> tuple[UOp, tuple[int, ...], tuple[int, ...]]:
  """Output loops become hardware thread ids (gidx0 is the innermost loop), workgroup axes (LOCAL, GROUP_REDUCE) work-item ids
  (lidx); returns the new sink and the launch and workgroup sizes. With a thread pool (`threads` > 0) only GLOBAL ranges
  (thread blocks chosen by the optimizer) become ids; the other loops stay loops inside each block."""
  new, sub, valid, launch, local = thread_ids(sink, global_max, threads)
  return gate_invalid_threads(new.substitute(sub), valid), launch, local

def gate_group_stores(sink: UOp) -> UOp:
  """After a group reduction every work-item of the group holds the result: only the first (id 0 on each GROUP_REDUCE axis
  the stored address does not use) stores it."""
  groups = [u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.GROUP_REDUCE]
  if not groups: return sink
  sub: dict[UOp, UOp] = {}
  for st in sink.toposort():
    if st.op is not Ops.STORE or st.src[0].op is not Ops.INDEX or st.src[0].src[0].op is not Ops.PARAM: continue
    idx = st.src[0]
    if not (first := [g.eq(0) for g in groups if g not in idx.toposort()]): continue
    gate = first[0]
    for f in first[1:]: gate = gate & f
    if len(idx.src) > 2: gate = idx.src[2] & gate
    sub[st] = st.replace(src=(idx.replace(src=idx.src[:2] + (gate,) + idx.src[3:]),) + st.src[1:])
  return sink.substitute(sub) if sub else sink

def _substituted_nodes(sink: UOp, ids: dict[UOp, UOp]) -> list[UOp]:
  """The nodes of sink.substitute(ids) in graph order, each replaced node standing (after its replacement's) for its image."""
  nodes: list[UOp] = []
  for u in sink.toposort(stop=ids):   # as substitute walks: not below a replaced node
    if u in ids: nodes.extend(ids[u].toposort())
    nodes.append(u)
  return nodes

def lower_index_dtype(sink: UOp, ids: dict[UOp, UOp] | None = None, nodes: list[UOp] | None = None) -> UOp:
  """`index` math becomes int32, or int64 when some value might not fit. With `ids` ({loop: its thread id expression}, from
  thread_ids) the loops are replaced in the same rebuild, sink.substitute(ids) retyped in one walk (`nodes`: that walk's
  _substituted_nodes, where the caller has them). The width is decided on the nodes before the substitution: the same answer
  where every id has its loop's bounds (_same_bounds), as a node's bounds are a function of its sources' bounds."""
  ids = ids or {}
  if nodes is None: nodes = _substituted_nodes(sink, ids)
  big = any(not (-2**31 <= (b := u._min_max)[0] and b[1] < 2**31) for u in nodes
            if u.dtype is dtypes.index and u.op is not Ops.DEFINE_VAR and u not in ids)
  dt = dtypes.int64 if big else dtypes.int32
  # one rebuild in graph order, sources first (a rewrite pass would try a rule at every node for this one retype); vectors of
  # indices (a mask's lanes, expander._index_lanes) hold the same values as their scalar parts
  done: dict[UOp, UOp] = {}
  retyped: dict[DType, DType | None] = {}   # each dtype's new one (None: kept), asked once, not once a node
  id_of, new_of, final = ids.get, retyped.get, done.__getitem__
  for u in nodes:
    if (i := id_of(u)) is not None:
      done[u] = done[i]
      continue
    s = u.src   # (one or two sources looked up inline, as pattern._rewrite_in_order does)
    src = (done[s[0]],) if (k := len(s)) == 1 else (done[s[0]], done[s[1]]) if k == 2 else tuple(map(final, s)) if k else s
    if (new := new_of(d := u.dtype, d)) is d: new = retyped[d] = dt.vec(d.count) if d.scalar() is dtypes.index else None
    done[u] = u if new is None and src == s else intern_uop(UOp, u.op, d if new is None else new, src, u.arg, u.tag)
  return done[sink]

def _same_bounds(ids: dict[UOp, UOp]) -> bool:
  """Every thread id expression has its loop's bounds (and is no constant, which some bounds rules look at)."""
  return all(i.op is not Ops.CONST and i.dtype is r.dtype and i.vmin == r.vmin and i.vmax == r.vmax for r, i in ids.items())

DROP_GATED_WHERE = True   # drop_gated_where in lower_kernel

def _conjuncts(g: UOp) -> list[UOp]: return _conjuncts(g.src[0]) + _conjuncts(g.src[1]) if g.op is Ops.AND else [g]

def _is_zero(x: UOp) -> bool:
  """x is +0 in every lane (a gated load's default alternative)."""
  if x.op is Ops.VECTORIZE: return all(_is_zero(s) for s in x.src)
  vals = x.arg if x.op is Ops.VCONST else (x.arg,) if x.op is Ops.CONST else (1,)
  return all(v == 0 and math.copysign(1, v) > 0 for v in vals)

def drop_gated_where(w: UOp) -> UOp | None:
  """WHERE(g, LOAD(INDEX(buf, i, ... & g & ...)), 0) -> the LOAD: where g is false the load's gate is false too and it gives its
  alternative, 0 (a padded conv's tap row: the padding's select and the load's gate are one condition, and a renderer that
  branches around the load would select again after it)."""
  cond, ld, other = w.src
  if ld.op is not Ops.LOAD or ld.dtype != w.dtype or ld.src[0].op is not Ops.INDEX or len(ld.src[0].src) < 3 or not _is_zero(other): return None
  if any(a.dtype is not dtypes.void and not _is_zero(a) for a in ld.src[1:]): return None   # its alternative: 0 unless given
  g = cond.unbroadcast()
  return ld if g in _conjuncts(ld.src[0].src[2]) else None

pm_drop_gated_where = PatternMatcher([(UPat(Ops.WHERE, name="w"), drop_gated_where)], name="drop gated where")

@functools.cache
def _pm_lower(drop_where: bool, wmma: bool = True) -> PatternMatcher:
  """The reductions lowered and, with `drop_where`, the selects a gated load makes redundant dropped, in one walk of the kernel:
  map_globals (after it) only ANDs a thread's validity into global loads' gates, a condition no select of the kernel tests.
  `wmma`: the kernel has a WMMA, whose accumulator add pm_wmma_accumulate fuses; without one its rules would
  only be tried (and rejected) at every ADD. Built once: a matcher compiles its rules per op on first use."""
  from core.codegen.opt.tc import pm_wmma_accumulate
  return pm_lower_reduce + (pm_wmma_accumulate if wmma else PatternMatcher([])) + (pm_drop_gated_where if drop_where else PatternMatcher([]))

def lower_kernel(sink: UOp, global_max: tuple[int, ...] | None, threads: int = 0, scratch_bytes: int = 0,
                 scaled_exp2: bool = False, ahead: bool = False, fma_shift: bool = False, stream_bytes: int = 0) \
    -> tuple[UOp, tuple[int, ...], tuple[int, ...]]:
  """The lowered kernel, its launch size and its workgroup size; `scratch_bytes`, `scaled_exp2`, `ahead`, `fma_shift`,
  `stream_bytes`: Renderer.scratch_bytes, Renderer.scaled_exp2, Renderer.max_ahead, Renderer.fma_exp_shift and
  Renderer.stream_min_bytes (core.codegen.stash)."""
  ctx = LowerCtx(sink)
  pm = _pm_lower(DROP_GATED_WHERE, Ops.WMMA in ctx.ops)
  # a kernel with no op a rule matches (no reduction, no select: most elementwise kernels) is its own lowering: no walk
  if (roots := pm.root_ops()) is None or not roots.isdisjoint(ctx.ops): sink = graph_rewrite(sink, pm, ctx, name="lower reduce")
  if ctx.group_reduce: sink = gate_group_stores(sink)
  sink, ids, valid, gsize, lsize = thread_ids(sink, global_max, threads, ctx.ranges)
  # map_globals' substitution goes in with the retype (one rebuild, not two) where nothing between would look at the ids: no
  # thread gates to add and no costly value for stash_reduced_values (which changes nothing without one)
  nodes = _substituted_nodes(sink, ids)
  if valid or not _same_bounds(ids) or any(map(COSTLY_OPS.__contains__, map(_op_of, nodes))):   # (C loops: a test a node)
    sink, ids = stash_reduced_values(gate_invalid_threads(sink.substitute(ids), valid), scratch_bytes, scaled_exp2, fma_shift), {}
    if ahead: sink = max_ahead(sink, stream_bytes)
    nodes = _substituted_nodes(sink, ids)
  return lower_index_dtype(sink, ids, nodes), gsize, lsize
