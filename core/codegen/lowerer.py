"""Kernel graph -> renderable graph: reductions become accumulators, loops become thread ids, index math gets a width."""
from __future__ import annotations
from core.ir.dtype import dtypes, AddrSpace, DType
from core.ir.ops import UOp, Ops, AxisType
from core.ir.pattern import UPat, PatternMatcher, graph_rewrite
from core.helpers import prod

class RangeScopes:
  """Which loops each node lives in: a RANGE opens its loop, an END closes it."""
  def __init__(self) -> None: self.cache: dict[UOp, frozenset[UOp]] = {}
  def __call__(self, root: UOp) -> frozenset[UOp]:
    for u in root.toposort(gate=lambda x: x not in self.cache):
      if u in self.cache: continue
      live = frozenset().union(*(self.cache[s] for s in u.src)) if u.src else frozenset()
      if u.op is Ops.RANGE: live = live | {u}
      elif u.op is Ops.END: live = live - set(u.src[1:])
      self.cache[u] = live
    return self.cache[root]

def reduce_identity(op: Ops, dtype: DType) -> UOp:
  return UOp.const(dtype, {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtype.min}[op])

def _combine(op: Ops, acc: UOp, x: UOp) -> UOp: return acc + x if op is Ops.ADD else acc * x if op is Ops.MUL else acc.maximum(x)

class LowerCtx:
  def __init__(self, sink: UOp | None = None) -> None:
    self.scopes = RangeScopes()
    # registers the optimizer made (PACK buffers) keep their numbers; accumulators count on from there
    self.regs = max((u.arg + 1 for u in (sink.toposort() if sink is not None else ()) if u.op is Ops.DEFINE_REG and isinstance(u.arg, int)),
                    default=0)
    # REDUCEs over the same ranges share one loop (unrolled copies of a register-blocked reduction), so each accumulator is
    # initialised inside every loop that encloses any of them; else one copy's loop would be hoisted above another's
    self.enclosing: dict[tuple[UOp, ...], frozenset[UOp]] = {}
    live: dict[UOp, frozenset[UOp]] = {}
    for u in (sink.toposort() if sink is not None else ()):
      # like RangeScopes, but a REDUCE closes its own ranges (it is not lowered to an END yet)
      lv = frozenset().union(*(live[x] for x in u.src)) if u.src else frozenset()
      if u.op is Ops.RANGE: lv = lv | {u}
      elif u.op in (Ops.END, Ops.REDUCE): lv = lv - set(u.src[1:])
      live[u] = lv
      if u.op is Ops.REDUCE:
        key = u.src[1:]
        self.enclosing[key] = self.enclosing.get(key, frozenset()) | (live[u.src[0]] - set(key))

def lower_reduce(ctx: LowerCtx, red: UOp) -> UOp:
  """REDUCE(v, *ranges) -> a register initialised inside the enclosing loops, updated in the reduce loops, read after."""
  v, rngs = red.src[0], red.src[1:]
  outer = sorted((ctx.scopes(v) - set(rngs)) | ctx.enclosing.get(rngs, frozenset()), key=lambda r: r.arg)
  acc = UOp(Ops.DEFINE_REG, red.dtype.ptr(1, AddrSpace.REG), (), ctx.regs)
  ctx.regs += 1
  zero = UOp.const(dtypes.index, 0)
  init = UOp(Ops.STORE, dtypes.void, (acc.index(zero), reduce_identity(red.arg, red.dtype)) + tuple(outer))
  acc_in = acc.after(init, *rngs)   # reading the accumulator must stay inside the reduce loops
  upd: UOp = acc_in.index(zero).store(_combine(red.arg, acc_in.index(zero).load(), v))
  for r in sorted(rngs, key=lambda r: r.arg, reverse=True): upd = upd.end(r)
  return acc.after(upd).index(zero).load()

pm_lower_reduce = PatternMatcher([(UPat(Ops.REDUCE, name="red"), lower_reduce)], name="lower reduce")

def _is_acc_read(u: UOp) -> bool:
  """u reads an accumulator register (LOAD(INDEX(AFTER(DEFINE_REG, ...), 0)))."""
  if u.op is not Ops.LOAD or u.src[0].op is not Ops.INDEX: return False
  b = u.src[0].src[0]
  while b.op is Ops.AFTER: b = b.src[0]
  return b.op is Ops.DEFINE_REG

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
  for t in terms: out = UOp(Ops.MULACC, upd.dtype, (t.src[0], t.src[1], out)) if t.op is Ops.MUL else out + t
  return out

# for renderers with a fused multiply-add (Renderer.extra_matcher): accumulator updates of float reductions use it
pm_fuse_mulacc = PatternMatcher([
  (UPat(Ops.ADD, name="upd", custom=lambda upd: dtypes.is_float(upd.dtype) and (_is_acc_read(upd.src[0]) or _is_acc_read(upd.src[1]))),
   fuse_mulacc),
], name="fuse mulacc")

def map_globals(sink: UOp, global_max: tuple[int, ...] | None, threads: int = 0) -> tuple[UOp, tuple[int, ...]]:
  """Output loops become hardware thread ids (gidx0 is the innermost loop); returns the new sink and the launch size.
  With a thread pool (`threads` > 0) only GLOBAL ranges (thread blocks chosen by the optimizer) become ids; the other
  loops stay loops inside each block."""
  if threads > 0:
    global_max = (2 ** 31 - 1,)
    kinds: tuple[AxisType, ...] = (AxisType.GLOBAL,)
  else: kinds = (AxisType.LOOP, AxisType.GLOBAL)
  if not global_max: return sink, (1, 1, 1)
  loops = sorted({u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] in kinds}, key=lambda r: r.arg)
  if not loops: return sink, (1, 1, 1)
  ndim = len(global_max)
  # too many loops for the hardware dims: the outer ones share one id, split back with div/mod
  groups = [loops[:len(loops) - ndim + 1]] + [[r] for r in loops[len(loops) - ndim + 1:]] if len(loops) > ndim else [[r] for r in loops]
  sub: dict[UOp, UOp] = {}
  launch = []
  for gi, grp in enumerate(reversed(groups)):
    total = prod(r.src[0].arg for r in grp)
    sp = UOp.special(total, f"gidx{gi}")
    launch.append(total)
    stride = 1
    for r in reversed(grp):
      sub[r] = sp if len(grp) == 1 else (sp // stride) % r.src[0].arg
      stride *= r.src[0].arg
  # drop the ENDs of loops that became thread ids (wherever they sit in a chain), then replace the ranges
  def strip(u: UOp) -> UOp:
    if u.op is not Ops.END: return u
    inner = strip(u.src[0])
    keep = tuple(r for r in u.src[1:] if r not in sub)
    return inner.end(*keep) if keep else inner
  new = sink.replace(src=tuple(strip(s) for s in sink.src))
  return new.substitute(sub), tuple(launch + [1] * (3 - len(launch)))

def lower_index_dtype(sink: UOp) -> UOp:
  """`index` math becomes int32, or int64 when some value might not fit."""
  idx_nodes = [u for u in sink.toposort() if u.dtype is dtypes.index]
  big = any(not (-2**31 <= u.vmin and u.vmax < 2**31) for u in idx_nodes if u.op is not Ops.DEFINE_VAR)
  dt = dtypes.int64 if big else dtypes.int32
  return graph_rewrite(sink, PatternMatcher([(UPat(dtype=dtypes.index, name="x"), lambda x: x.replace(dtype=dt))]), name="index dtype")

def lower_kernel(sink: UOp, global_max: tuple[int, ...] | None, threads: int = 0) -> tuple[UOp, tuple[int, ...]]:
  sink = graph_rewrite(sink, pm_lower_reduce, LowerCtx(sink), name="lower reduce")
  sink, gsize = map_globals(sink, global_max, threads)
  return lower_index_dtype(sink), gsize
