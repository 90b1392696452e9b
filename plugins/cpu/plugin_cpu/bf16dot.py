"""bfloat16 products summed in float32 on the x86 bf16 dot-product instruction (AVX512_BF16 vdpbf16ps), for the host LLVM renderer.

A bf16 x bf16 -> float32 reduction that the optimizer unrolled by 2 along its reduce axis adds, per accumulator update, two
widened products of 16-lane bf16 vectors: acc + (f32(x0*y0) + f32(x1*y1)). vdpbf16ps computes, per float32 lane i,
acc[i] + a[2i]*b[2i] + a[2i+1]*b[2i+1] from 32-lane bf16 vectors, so with a = (x0, x1) and b = (y0, y1) interleaved lane by lane it
is that update in one instruction. The products are exact, where the plain path rounds each to bf16 before widening (the same
freedom a tensor core takes); the instruction treats bf16 denormals as zero. WMMA carries the operation (its third source is the
accumulator, which pm_wmma_accumulate folds in)."""
from __future__ import annotations
import os
from collections.abc import Iterable
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.codegen.opt.tc import pm_wmma_accumulate
from plugin_cpu.compiler import host_flags

DOT = "x86_dpbf16ps"   # the WMMA arg
LANES = 16             # float32 lanes of one zmm accumulator
INTRINSIC = "llvm.x86.avx512bf16.dpbf16ps.512"
DECLARE = f"declare <16 x float> @{INTRINSIC}(<16 x float>, <32 x bfloat>, <32 x bfloat>)"

def bf16_dot(flags: frozenset[str]) -> bool:
  """A CPU with these features (compiler.arch_flags) has AVX512_BF16 and CPU_BF16_DOT is not 0 (0 masks the feature off: the
  plain path, as on a CPU without it)."""
  return os.getenv("CPU_BF16_DOT", "").strip() != "0" and "avx512_bf16" in flags

def host_bf16_dot() -> bool: return bf16_dot(host_flags())

def _widened(v: UOp) -> UOp | None:
  """A plain 16-lane bf16 load as the low half of a 32-lane load whose upper lanes are masked off (they read nothing and are
  zero); None for anything else."""
  if v.op is not Ops.LOAD or len(v.src) != 1 or v.src[0].op is not Ops.INDEX or len(v.src[0].src) != 2: return None
  w = dtypes.bfloat16.vec(2 * LANES)
  return UOp(Ops.LOAD, w, (v.src[0].replace(src=v.src[0].src + (_low_half(),)), UOp.const(w, 0.0)))

def _low_half() -> UOp: return UOp.vectorize(*[UOp.const(dtypes.bool, i < LANES) for i in range(2 * LANES)])

def _lanes(a: UOp, b: UOp) -> UOp:
  """(a[0], b[0], a[1], b[1], ...) of two vectors of LANES lanes."""
  return UOp(Ops.VECTORIZE, a.dtype.scalar().vec(2 * LANES), tuple(v for i in range(LANES) for v in (a.gep(i), b.gep(i))))

def _interleave(a: UOp, b: UOp) -> UOp:
  """The 32-lane operand (a[0], b[0], a[1], b[1], ...) of two 16-lane vectors. Two loads are read as full 32-lane registers
  first (_widened): LLVM widened each 16-lane load by a 256-bit broadcast load (vbroadcastf64x4) in front of the interleave's
  vpermt2w, which held a bf16 product at about 70% of the dot product's rate. One Zen 5 thread, CPU time, medians of 11: 1024^2
  324 -> 394 GFLOP/s, 2048^2 339 -> 402 (the kernel's IR with no interleave at all, a timing bound: 414)."""
  if (wa := _widened(a)) is not None and (wb := _widened(b)) is not None: a, b = wa, wb
  return _lanes(a, b)

def _pair(c0: UOp, c1: UOp, m0: UOp, m1: UOp) -> UOp | None:
  """f32(x0*y0) + f32(x1*y1) over 16-lane bf16 vectors -> one dot-product step with a zero accumulator."""
  bf, f32 = dtypes.bfloat16.vec(LANES), dtypes.float32.vec(LANES)
  if not (m0.dtype == m1.dtype == bf and c0.dtype == c1.dtype == f32): return None
  return UOp(Ops.WMMA, f32, (_interleave(m0.src[0], m1.src[0]), _interleave(m0.src[1], m1.src[1]), UOp.const(f32, 0.0)), DOT)

def _offset(i: UOp) -> tuple[UOp, int]:
  """An index as (terms, constant): base + c, or (i, 0)."""
  return (i.src[0], i.src[1].arg) if i.op is Ops.ADD and i.src[1].op is Ops.CONST else (i, 0)

def _reg(idx: UOp) -> UOp | None:
  """The bf16 DEFINE_REG that INDEX `idx` addresses (through an AFTER), else None."""
  b = idx.src[0].src[0] if idx.src[0].op is Ops.AFTER else idx.src[0]
  return b if b.op is Ops.DEFINE_REG and b.dtype.base is dtypes.bfloat16 else None

def _interleaved_panel(r: UOp, rows: list[tuple[UOp, UOp, UOp]], topo: Iterable[UOp], users: dict[UOp, list[UOp]]) -> dict[UOp, UOp]:
  """_pairs_packed's replacements for panel `r` read by `rows` (interleave, row-0 load, row-1 load); {} where its reads or its
  copy's writes are anything else: other reads, rows not a whole vector of a pair S apart, gated or other-width writes."""
  steps = {_offset(lb.src[0].src[1])[1] - _offset(la.src[0].src[1])[1] for _, la, lb in rows}
  if len(steps) != 1 or (S := steps.pop()) <= 0 or S % LANES: return {}
  def phys(i: UOp) -> tuple[UOp, int, int] | None:
    """(base, interleaved offset, row 0 or 1) of panel index i, where i starts a whole row vector of a pair S apart."""
    b, o = _offset(i)
    return None if b.const_factor() % (2 * S) or o % S + LANES > S else (b, o // (2 * S) * 2 * S + o % S * 2, o // S % 2)
  loads = {ld for _, la, lb in rows for ld in (la, lb)}
  vecs = {v for v, _, _ in rows}
  if any(len(ld.src[0].src) != 3 or ld.src[0].src[2] is not _low_half() for ld in loads) or \
     any(g.op is not Ops.GEP or not set(users.get(g, [])) <= vecs for ld in loads for g in users.get(ld, [])): return {}
  reads: dict[UOp, UOp] = {}
  for v, la, lb in rows:
    pa, pb = phys(la.src[0].src[1]), phys(lb.src[0].src[1])
    if pa is None or pb is None or pa[0] is not pb[0] or pa[2] != 0: return {}
    reads[v] = la.replace(src=(la.src[0].src[0].index(pa[0] + pa[1] if pa[1] else pa[0]),))
  writes: dict[tuple[UOp, int], list[UOp]] = {}
  for st in topo:
    if st.op is not Ops.STORE or _reg(st.src[0]) is not r: continue
    if len(st.src[0].src) != 2 or st.src[1].dtype != dtypes.bfloat16.vec(LANES) or (p := phys(st.src[0].src[1])) is None: return {}
    writes.setdefault(p[:2], []).append(st)
  pairs = {k: sorted(sts, key=lambda st: _offset(st.src[0].src[1])[1]) for k, sts in writes.items()}
  if any(len(sts) != 2 or [(p := phys(st.src[0].src[1])) and p[2] for st in sts] != [0, 1] for sts in pairs.values()): return {}
  if not all(u in {x.src[0] for x in loads} | {st.src[0] for sts in pairs.values() for st in sts}
             for u in topo if u.op is Ops.INDEX and _reg(u) is r): return {}
  stores = {st: r.index(b + o if o else b).store(_lanes(s0.src[1], s1.src[1])) for (b, o), (s0, s1) in pairs.items() for st in (s0, s1)}
  # the reads wait for the new copy: their AFTER takes the new stores (substitute does not walk into replacements)
  return {**stores, **{v: ld.replace(src=(ld.src[0].replace(src=(ld.src[0].src[0].substitute(stores),) + ld.src[0].src[1:]),))
                       for v, ld in reads.items()}}

def _pairs_packed(sink: UOp) -> UOp | None:
  """A packed panel (a DEFINE_REG filled by PACK's copy) whose rows only feed the dot product's interleave, the unrolled
  reduce's two rows S elements apart (PACK puts the unroll axis outermost among the register axes), is stored interleaved
  instead: its copy writes each pair of rows as one 32-lane interleave and the reduce loop reads one 32-lane register, with no
  shuffle. The copy runs once per panel, the reads once per row tile. On Zen 4 a zmm vpermt2w takes the FP pipes vdpbf16ps
  needs: a loop of 16 vdpbf16ps (one a cycle: 230 GFLOP/s on a core) ran at 231 GFLOP/s, with the two interleaves of its
  column vectors 182. The matmul_bf16 kernel (1024^3), one thread, CPU time, A/B interleaved in one process: 173 -> 218
  GFLOP/s, the same bits."""
  topo = sink.toposort()
  rows: dict[UOp, list[tuple[UOp, UOp, UOp]]] = {}   # panel -> (interleave, its row-0 load, its row-1 load)
  for v in topo:
    if v.op is Ops.VECTORIZE and len(v.src) == 2 * LANES and v.src[0].op is v.src[1].op is Ops.GEP:
      la, lb = v.src[0].src[0], v.src[1].src[0]
      if la.op is lb.op is Ops.LOAD and la.dtype.count == 2 * LANES and v is _lanes(la, lb) and (r := _reg(la.src[0])) is not None \
         and _reg(lb.src[0]) is r:
        rows.setdefault(r, []).append((v, la, lb))
  if not rows: return None   # (every kernel passes here: the users below only where a panel is read so)
  users: dict[UOp, list[UOp]] = {}
  for u in topo:
    for x in u.src: users.setdefault(x, []).append(u)
  sub = {k: x for r, rs in rows.items() for k, x in _interleaved_panel(r, rs, topo, users).items()}
  return sink.substitute(sub) if sub else None

pm_bf16_dot = PatternMatcher([
  (UPat(Ops.ADD, src=(UPat(Ops.CAST, name="c0", src=(UPat(Ops.MUL, name="m0"),)), UPat(Ops.CAST, name="c1", src=(UPat(Ops.MUL, name="m1"),)))),
   _pair),
  (UPat(Ops.SINK, name="sink"), _pairs_packed),
]) + pm_wmma_accumulate

def render_dot(ctx: object, x: UOp) -> str | None:
  """The LLVM call of one dot-product step (the renderer declares the intrinsic when the kernel uses it)."""
  if x.arg != DOT: return None
  a, b, c = (ctx[s] for s in x.src)  # type: ignore[index]
  ctx.declares[DECLARE] = None  # type: ignore[attr-defined]
  return f"{ctx[x]} = call <16 x float> @{INTRINSIC}(<16 x float> {c}, <32 x bfloat> {a}, <32 x bfloat> {b})"  # type: ignore[index]
