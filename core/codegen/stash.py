"""Row kernels compute an expensive reduced value once: the reduction loop stashes it (in a per-thread row where the renderer
says one is cheap, else in the output row), the output loop reads it."""
from __future__ import annotations
from typing import Callable
from core.ir.dtype import AddrSpace, PtrDType, dtypes
from core.ir.ops import UOp, Ops, GroupOp, AxisType, EXP2_NONPOSITIVE, params_nbytes
from core.codegen.decompose import EXP2_SCALED, EXP2_SCALE

# values worth a store and a load per element instead of their recomputation (a softmax's exp: ~25 vector ops)
COSTLY_OPS = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW)
STASH_ARG = "stash"   # the arg of the added STORE: a plain store (never a streaming one: the output loop reads it back from cache)

def _scratch_row(nodes: list[UOp], r: UOp, e: UOp, max_bytes: int) -> UOp | None:
  """A per-thread array of one `e` per iteration of loop `r` (a DEFINE_REG), when that fits `max_bytes`, else None."""
  if r.src[0].op is not Ops.CONST or (n := r.src[0].arg) * e.dtype.itemsize > max_bytes: return None
  reg = max((u.arg + 1 for u in nodes if u.op is Ops.DEFINE_REG and isinstance(u.arg, int)), default=0)
  return UOp(Ops.DEFINE_REG, e.dtype.ptr(n, AddrSpace.REG), (), reg)

def _reduce_update(end: UOp) -> tuple[UOp, UOp] | None:
  """(update STORE, value) of an accumulator loop END(STORE(acc[0], combine(acc[0], value)), range), else None."""
  if len(end.src) != 2 or (st := end.src[0]).op is not Ops.STORE or st.src[0].op is not Ops.INDEX: return None
  if st.src[0].src[0].after_base.op is not Ops.DEFINE_REG or (upd := st.src[1]).op not in GroupOp.ALU or len(upd.src) != 2: return None
  acc = [s for s in upd.src if s.op is Ops.LOAD and s.src[0] is st.src[0]]
  return (st, upd.src[1] if acc and upd.src[0] is acc[0] else upd.src[0]) if acc else None

def _lanes(w: UOp) -> list[UOp]:
  """The nodes reached from w through elementwise ops of w's width only (lane k of each is lane k of w)."""
  todo: list[UOp] = [w]
  seen: dict[UOp, None] = {}
  while todo:
    if (u := todo.pop()) in seen or u.dtype.count != w.dtype.count: continue
    seen[u] = None
    if u.op in GroupOp.ALU: todo.extend(u.src)
  return list(seen)

def _zero(u: UOp) -> bool: return all(c.op is Ops.CONST and c.arg == 0 for c in (u.src if u.op is Ops.VECTORIZE else (u,)))

def _canonical(u: UOp) -> UOp:
  """u with its memory addresses simplified: index math built in different orders compares equal."""
  return u.substitute({i: i.replace(src=(i.src[0], i.src[1].simplify()) + i.src[2:]) for i in u.toposort() if i.op is Ops.INDEX and len(i.src) > 1})

def _inverse_sum(x: UOp, acc: UOp) -> bool:
  """x is 1 / (a sum of the lanes of accumulator `acc`) (broadcast): a factor c in every summed value is a factor 1/c in x."""
  def degree(u: UOp) -> int | None:   # of u in the accumulator's value: 1 its sums, -1 their reciprocals, None anything else
    if u.op is Ops.LOAD: return 1 if u.src[0].op is Ops.INDEX and u.src[0].src[0].after_base is acc else None
    if u.op is Ops.GEP: return degree(u.src[0])
    if u.op is Ops.RECIPROCAL: return None if (d := degree(u.src[0])) is None else -d
    if u.op in (Ops.ADD, Ops.VECTORIZE): return d if len(ds := {degree(s) for s in u.src}) == 1 and (d := ds.pop()) is not None else None
    return None
  return degree(x) == -1

def _row_scalar(v: UOp) -> UOp | None:
  """The scalar a broadcast VECTORIZE repeats (v itself where v is a scalar), else None."""
  return s if (s := v.unbroadcast()).dtype.count == 1 else None

def _fma_shift(x: UOp, r: UOp) -> UOp:
  """A softmax's EXP2_SCALED argument (a + b) * c, b and c the same for the whole loop `r` (-max and 1 / ln 2), as one multiply-add
  t = a * A + B clamped at lo: 2**(t + EXP2_SCALE) * 2**K for K = -lo - (127 + EXP2_SCALE) (decompose.fast_exp2_scaled), a factor
  that cancels in the row's output as 2**EXP2_SCALE does. B = b * c rounded is a pivot within half its ulp of max * c: t is
  -e at the max, e = b * c - B (exact in float64), which K (e rounded to an even integer) takes back out, so the row's largest
  exp is 2**(EXP2_SCALE + [-1, 1]) and its sum far from overflow. That holds while |e| <= 64 (|max| <= 2**30); above, float32
  values next to the max are at least 128 apart, so exp(x - max) is 1 at the max and 0 elsewhere in float32, and A = 2 (1 above
  2**126, where 2 * max overflows) gives exactly that: t = A * (x - max). One op less than (a + b) * c per element; the near-max
  exps of a row with |max| > 2**22 take t's rounding at |t| <= |e| (at most 2**-18 of a log2, at |max| = 2**30)."""
  if x.op is not Ops.MUL or (d := x.src[0]).op is not Ops.ADD: return x
  (a, bv), cv = d.src, x.src[1]
  if (b := _row_scalar(bv)) is None or (c := _row_scalar(cv)) is None or any(r in u.toposort() for u in (b, c)): return x
  mag = (b < 0.0).where(-b, b)
  big = mag > 2.0 ** 30
  A = big.where((mag > 2.0 ** 126).where(b.const_like(1.0), b.const_like(2.0)), c)
  B = b * A
  e = big.where(b.const_like(0.0), (b.cast(dtypes.float64) * A.cast(dtypes.float64) - B.cast(dtypes.float64)).cast(b.dtype))
  lo = -(127.0 + EXP2_SCALE) - ((e * 0.5 + 12582912.0) - 12582912.0) * 2.0   # e rounded to an even integer (|e| <= 64)
  n = x.dtype.count
  t = UOp(Ops.MULACC, x.dtype, (a, UOp.vectorize(*[A] * n), UOp.vectorize(*[B] * n)))
  return (t < (lov := UOp.vectorize(*[lo] * n))).where(lov, t)

def stash_reduced_values(sink: UOp, scratch_bytes: int = 0, scaled_exp2: bool = False, fma_shift: bool = False) -> UOp:
  """A kernel whose one output STORE (in a loop over r1) recomputes an expensive value E(r1) that a reduction loop over r (same
  extent) also consumes as E(r) stashes E(r) during the reduction and reads it back in the output loop (the row is in L1 then):
  softmax's exp runs once per element, not twice. The stash is a per-thread row where it fits `scratch_bytes` (the renderer's
  Renderer.scratch_bytes: 0 where private arrays are slow), so the output is written once and may stream past the caches (a
  stash in the output makes every line read for ownership, then written back); else the output row at r's position. Only the
  thread that reduces a row writes and reads its stash (both are loops of one thread, one row after the other), and the output
  buffer is written by this kernel alone. Where the renderer lowers EXP2_SCALED (`scaled_exp2`: Renderer.scaled_exp2) and the
  output is E times 1 / the row's sum of E, E an exp2 of x <= 0 (softmax), the reduction sums and stashes 2**EXP2_SCALE * E
  instead: the factor cancels in the output (2**63 * e times 2**-63 / sum: the same product, rounded once), and its exp2 takes
  no multiply by a constant to undo it (one Zen 3 thread, softmax 4096x1000: about 0.93x the time)."""
  nodes = list(sink.toposort())   # one walk: this runs on every kernel
  outs = [u for u in nodes if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  if len(outs) != 1 or len(outs[0].src[0].src) not in (2, 3) or any(u.op is Ops.BARRIER for u in nodes): return sink
  out = outs[0]
  buf, *addr = out.src[0].src   # the index, and a gate where the rows are padded to whole vectors (heuristic._row_pass)
  oend = next((u for u in nodes if u.op is Ops.END and u.src[0] is out and len(u.src) == 2), None)
  if oend is None or any(u.op is Ops.INDEX and u.src[0] is buf and u is not out.src[0] for u in nodes): return sink
  r1 = oend.src[1]
  for end in [u for u in nodes if u.op is Ops.END and u is not oend]:
    if (found := _reduce_update(end)) is None: continue
    st, e = found
    # a padded row's reduction adds where(lane in row, E, 0): E is stashed, under the output's gate
    if e.op is Ops.WHERE and len(addr) == 2 and _zero(e.src[2]): e = e.src[1]
    r = end.src[1]
    if r.src[0] is not r1.src[0] or e.dtype != out.src[1].dtype or not any(x.op in COSTLY_OPS for x in e.toposort()): continue
    want = _canonical(e.substitute({r: r1}))
    if r1 not in want.toposort() or (e1 := next((c for c in _lanes(out.src[1]) if c.op is e.op and _canonical(c) is want), None)) is None: continue
    if scaled_exp2 and e.op is Ops.EXP2 and e.arg == EXP2_NONPOSITIVE and st.src[1].op is Ops.ADD and (v := out.src[1]).op is Ops.MUL \
       and e1 in v.src and _inverse_sum(v.src[1] if v.src[0] is e1 else v.src[0], st.src[0].src[0].after_base):
      st = st.substitute({e: (e := e.replace(src=(_fma_shift(e.src[0], r),) if fma_shift else e.src, arg=EXP2_SCALED))})
    if (row := _scratch_row(nodes, r, e, scratch_bytes)) is not None:   # whole vectors, ungated: padded lanes are never stored out
      stash = UOp(Ops.STORE, src=(row.index(r), e), arg=STASH_ARG)
      back = row.after(new_end := UOp(Ops.GROUP, src=(stash, st)).end(r)).index(r1).load(dtype=e.dtype)
    else:
      stash = UOp(Ops.STORE, src=(buf.index(*(a.substitute({r1: r}) for a in addr)), e), arg=STASH_ARG)
      back = buf.after(new_end := UOp(Ops.GROUP, src=(stash, st)).end(r)).index(*addr).load(dtype=e.dtype)
    return sink.substitute({end: new_end, out: out.replace(src=(out.src[0], out.src[1].substitute({e1: back, end: new_end})) + out.src[2:])})
  return sink

def _rows_at(end: UOp, value: UOp, r: UOp, row: UOp) -> UOp:
  """Reduction loop `end` with loop `r` replaced by `row` in the reduced `value` (its addresses, and a pad's or a mask's test of
  the row: the next row's value), not in the accumulator's init and ranges."""
  return end.substitute({value: value.substitute({r: row})})

PIPELINE = True   # max_ahead pipelines a streamed softmax's rows (_pipelined)

def _softmax_output(body: UOp) -> tuple[UOp, UOp, UOp] | None:
  """(output STORE, its stash LOAD, the exp loop's END) of a row body END(STORE(out, stash[r1] * (1 / sum)), r1) whose exp loop
  stashes E in a per-thread row (one stash STORE and the sum's update, nothing else), else None."""
  if body.op is not Ops.END or len(body.src) != 2 or (out := body.src[0]).op is not Ops.STORE or out.src[0].op is not Ops.INDEX or \
     out.src[0].src[0].op is not Ops.PARAM or (v := out.src[1]).op is not Ops.MUL or (back := v.src[0]).op is not Ops.LOAD: return None
  if len(bi := back.src[0].src) != 2 or bi[1] is not body.src[1] or bi[0].op is not Ops.AFTER or len(bi[0].src) != 2: return None
  row, xend = bi[0].src
  if row.op is not Ops.DEFINE_REG or xend.op is not Ops.END or len(xend.src) != 2 or xend.src[0].op is not Ops.GROUP or \
     len(group := xend.src[0].src) != 2 or [s.arg == STASH_ARG for s in group] != [True, False] or group[0].src[0].src[1:] != xend.src[1:]:
    return None
  return (out, back, xend) if body.src[1] not in v.src[1].toposort() and _inverse_sum(v.src[1], group[1].src[0].src[0].after_base) else None

def _pipelined(body: UOp, r0: UOp, n: int, dep: UOp, reg: int, axis: int) -> tuple[UOp, Callable[[UOp], UOp]] | None:
  """A softmax row body (_softmax_output) software-pipelined over row loop `r0` of `n` rows: row r's exp loop stashes into half
  r % 2 of a stash of two rows and writes row r-1's output (gated off for the first row) from the other half, scaled by row
  r-1's inverse sum carried in register `reg`; the row then stores its own there. Returns the new body and the last row's output
  loop (given the row loop's END, axis `axis`), else None. `dep`: what the carried reads follow (the first row's max, before
  the row loop). The same products, so the same values bit for bit."""
  if (found := _softmax_output(body)) is None: return None
  out, back, xend = found
  buf, *addr = out.src[0].src
  r1, inv, row, (stash, acc) = body.src[1], out.src[1].src[1], back.src[0].src[0].src[0], xend.src[0].src
  if not isinstance(row.dtype, PtrDType) or (r := xend.src[1]).src[0] is not r1.src[0]: return None
  size = row.dtype.size
  rows = row.replace(dtype=row.dtype.base.ptr(2 * size, AddrSpace.REG))
  scale = UOp(Ops.DEFINE_REG, inv.dtype.ptr(1, AddrSpace.REG), (), reg)
  init = scale.index(r0.const_like(0)).store(inv.const_like(0.0))
  def output(at: UOp, ri: UOp, half: UOp, after: tuple[UOp, ...], gate: UOp | None) -> UOp:
    """The output STORE of row `at`, element `ri`, from stash half `half`, gated by `gate` too."""
    a = [x.substitute({r1: ri, r0: at}) for x in addr]
    if gate is not None: a = [a[0], gate if len(a) == 1 else a[1] & (gate if a[1].dtype.count == 1 else UOp.vectorize(*[gate] * a[1].dtype.count))]
    val = rows.after(*after).index(half * size + ri).load(dtype=back.dtype) * scale.after(*after).index(r0.const_like(0)).load(dtype=inv.dtype)
    return out.replace(src=(buf.index(*a), val) + out.src[2:])
  prev = output(r0 - 1, r, (r0 + 1) % 2, (dep, init, r0), UOp(Ops.CMPLT, dtypes.bool, (r0.const_like(0), r0)))
  new_x = UOp(Ops.END, src=(UOp(Ops.GROUP, src=(stash.replace(src=(rows.index(r0 % 2 * size + r),) + stash.src[1:]), acc, prev)), r))
  rn = r1.replace(arg=(axis, r1.arg[1]))
  # the last row's values are read after the row loop, which writes the output: its stores stay plain (one row of n)
  return scale.after(new_x).index(r0.const_like(0)).store(inv.substitute({xend: new_x})), \
    lambda top: output(r0.const_like(n - 1), rn, r0.const_like((n - 1) % 2), (top,), None).end(rn)

# A streamed row kernel's next row max runs after its output loop (max_ahead's `stream_bytes`): the output loop's streaming
# stores drain to memory slowly and the stores after them wait in order (the exp pass's stash), where the max pass, loads alone,
# runs while they drain. AVX2 code (znver3) on a 2-vCPU Xeon guest (Sapphire Rapids class), chrt -f 10, this kernel's two orders
# in one process, time after / before, medians of 41 pairs: softmax 4096x1000 2 threads 0.980, 0.974, 0.980, one 0.985, 0.971,
# 0.970; 1024x4096 0.964, 0.962; with plain stores (no stream) 0.998, 0.993. Cached outputs keep the order before (the max pass
# hides the sum's and its reciprocal's latency there): 256x1000 1.107, 1.080; 3072x256 1.021, 1.017
def max_ahead(sink: UOp, stream_bytes: int = 0) -> UOp:
  """A row kernel (one loop over rows around the rest) whose row max feeds a later reduction of the row (softmax's exps, their
  sum) takes the next row's max after this row's reductions, before its output loop, and the first row's before the row loop:
  the max's accumulator carries it to the next iteration. The exp pass no longer waits for the max pass's last steps and its
  horizontal max, and the max pass runs while the row's sum is summed up and inverted (the output loop waits for it). The last
  row reads itself again. Where the exp pass is compute-bound (Renderer.max_ahead): one Zen 5 thread, AVX2 code, softmax
  4096x1000 0.94x the time; AVX-512 code is memory-bound there and lost (1.18x: the next row's lines are still on their way).
  Where `stream_bytes` (Renderer.stream_min_bytes) is known and the kernel's buffers total that much (its output streams), the
  next row's max runs after the output loop instead."""
  if (top := sink.src[0] if len(sink.src) == 1 else None) is None or top.op is not Ops.END or len(top.src) != 2: return sink
  if (r0 := top.src[1]).op is not Ops.RANGE or r0.arg[1] is not AxisType.LOOP or r0.src[0].op is not Ops.CONST or (n := r0.src[0].arg) < 2:
    return sink
  nodes = list(sink.toposort())
  ends = [u for u in nodes if u.op is Ops.END and u is not top]
  maxes = [(e, f) for e in ends if (f := _reduce_update(e)) is not None and f[0].src[1].op is Ops.MAX]
  if len(maxes) != 1: return sink
  mend, (upd, value) = maxes[0]
  # the next row's value is made from its inputs alone: one that reads another accumulator (softmax of x - x.mean(-1): the row's
  # mean) would take this row's
  if any(u.op in (Ops.AFTER, Ops.END, Ops.DEFINE_REG, Ops.DEFINE_LOCAL) for u in value.toposort()): return sink
  acc = upd.src[0].src[0].after_base
  reads = [u for u in nodes if u.op is Ops.AFTER and u.src[0] is acc]
  inits = {u.src[1] for u in reads if len(u.src) == 3 and u.src[1].op is Ops.STORE}
  done = [u for u in reads if u.src[1:] == (mend,)]
  # the max loop sits in the row loop only, and its result is read once, after it
  if len(inits) != 1 or len(done) != 1: return sink
  init = inits.pop()
  if [s for s in init.src[2:] if s.op is Ops.RANGE] != [r0]: return sink
  later = [e for e in ends if e is not mend and e.src[1].arg[1] is AxisType.REDUCE and done[0] in e.toposort()]
  if not later: return sink
  axis = max(u.arg[0] for u in nodes if u.op is Ops.RANGE) + 1
  r2 = mend.src[1]
  first = _rows_at(mend, value, r0, r0.const_like(0)).substitute({init: init.replace(src=tuple(s for s in init.src if s is not r0)),
                                                                 r2: r2.replace(arg=(axis, r2.arg[1]))})
  carried = {done[0]: acc.after(first, r0)}
  later = [e.substitute(carried) for e in later]
  body = top.src[0].substitute(carried)
  streamed = stream_bytes > 0 and params_nbytes(nodes) >= stream_bytes
  # a streamed softmax writes row r-1's output in row r's exp loop (_pipelined), the last row's after the row loop
  tail: Callable[[UOp], UOp] | None = None
  if streamed and PIPELINE and (piped := _pipelined(body, r0, n, first, max(u.arg + 1 for u in nodes if u.op is Ops.DEFINE_REG
                                                                            and isinstance(u.arg, int)), axis + 2)) is not None:
    body, tail = piped
  # the next max waits for the row's whole body where the output streams, else for its reductions alone
  after_row = acc.after(body if streamed else later[0] if len(later) == 1 else UOp(Ops.GROUP, src=tuple(later)))
  nxt = _rows_at(mend, value, r0, (r0 < n - 1).where(r0 + 1, r0)).substitute(
    {init: init.replace(src=(init.src[0].replace(src=(after_row,) + init.src[0].src[1:]),) + init.src[1:]), r2: r2.replace(arg=(axis + 1, r2.arg[1]))})
  # else what reads the row's reductions (the output loop) waits for the next max: it runs while the sum's last steps finish
  if not streamed:
    body = body.substitute({u: u.replace(src=u.src + (nxt,)) for u in body.toposort() if u.op is Ops.AFTER and any(s in later for s in u.src[1:])})
  top = top.replace(src=(UOp(Ops.GROUP, src=(body, nxt)), r0))
  return sink.replace(src=(top,) if tail is None else (top, tail(top)))
