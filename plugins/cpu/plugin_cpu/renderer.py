"""The CPU plugin's renderers: what both share (the host's threads, vectors, caches and rules) and the host LLVM IR renderer; the
C renderer is plugin_cpu/c_renderer.py, imported only where DEV asks for it (an LLVM start skips core's C codegen). Kernels are
plain functions where every axis is a loop."""
from __future__ import annotations
import copy, os
from collections import Counter
from typing import TYPE_CHECKING, Callable, TypeVar
from core.helpers import host_machine
from core.ir.dtype import AddrSpace, PtrDType, dtypes
from core.ir.ops import UOp, Ops, AxisType, EXP2_NONPOSITIVE
from core.ir.pattern import PatternMatcher, UPat
from core.device.renderer import Renderer
from core.codegen.llvm_ir import HostLLVMRenderer, Param, llvm_rewrite, _masked_intrinsic, _render_end, _render_load, _render_store, \
  _shuffle_sources
from core.codegen.lowerer import pm_fuse_mulacc
from core.codegen.opt.heuristic import big_l2
from core.codegen.decompose import EXP2_SCALED, fast_exp2, fast_exp2_floor, fast_exp2_nonpositive, fast_exp2_scaled, pm_vector_math
from plugin_cpu.compiler import arch_flags, host_flags, host_vendor, simd_bytes, x86_fma
from plugin_cpu.streaming import NT_ARG, NT_MIN_BYTES, _known_align, buffer_tested, cache_bytes, host_streams, pm_streaming_stores, store_width, \
  stream_width
from core.codegen.linearize import has_shuffle_network, is_shuffle
from plugin_cpu.bf16dot import bf16_dot, pm_bf16_dot, render_dot
from plugin_cpu.amx import amx_bf16, match_matmul, render_matmul
from plugin_cpu.prefetch import index_step, prefetch_offsets, line_offsets, loop_deps
from plugin_cpu.peel import peel_tail_iterations
from plugin_cpu.tile_rows import ROW_ARG, pm_store_rows
from plugin_cpu.load_rows import RowLoads, pm_load_rows
if TYPE_CHECKING: from plugin_cpu.c_renderer import CPUCRenderer

# bf16: gcc before 13 has __bf16 only as a storage type, so the C renderer leaves it to codegen's decompositions
_HOST_DTYPES = frozenset((dtypes.bool,) + dtypes.ints + (dtypes.float16, dtypes.float32, dtypes.float64))

def host_threads() -> int:
  """Threads a kernel's blocks run on: $CPU_THREADS when set (1 turns threading off), else the CPUs this process may use.
  The pool in native/pool.c reads the same setting."""
  if (env := os.getenv("CPU_THREADS", "").strip()):
    try:
      if (n := int(env)) >= 1: return n
    except ValueError: pass
  try: return len(os.sched_getaffinity(0))
  except (AttributeError, OSError): return os.cpu_count() or 1

def host_vector_regs(simd_bytes: int) -> int:
  """SIMD registers a kernel may hold values in: 32 with AVX-512 (zmm0-31) and on AArch64 (v0-31), 16 on other x86-64 (the
  ymm/xmm registers of AVX2, AVX and SSE). The optimizer sizes matmul register tiles by it."""
  return 32 if simd_bytes == 64 or host_machine() == "aarch64" else 16

# renderer.threads tells the optimizer how many blocks to cut the outer loop into; 0 (a single thread) means don't
THREADS = host_threads()
L2_BYTES = cache_bytes(2)   # the per-core cache a matmul's group of packed panels should fit (heuristic.mm_panel_group)
# a row kernel's stash of its exps (core.codegen.stash) is a per-thread array up to half the L1 data cache (it stays there between
# the reduction and the output loop, beside the input row the reduction reads twice); longer rows stash in the output
SCRATCH_BYTES = (cache_bytes(1) or 32 << 10) // 2
STREAM_MIN_BYTES = NT_MIN_BYTES if host_streams() else 0   # kernels whose buffers total this much stream their stores (opt.copy)
PREFETCH = os.getenv("CPU_PREFETCH", "1") != "0"   # the next row's prefetch in row kernels (plugin_cpu/prefetch.py); 0 for comparisons

# both renderers run the same rules before rendering: FMA for reduction updates, float32 exp2/log2 as vector arithmetic (libm
# would run once per lane), and (x86-64) which stores stream past the caches
def extra_rules(simd: int) -> PatternMatcher:
  return pm_fuse_mulacc + pm_vector_math + pm_streaming_stores(NT_MIN_BYTES, simd) if host_streams() else pm_fuse_mulacc + pm_vector_math

def _check_block(x: UOp) -> None:
  if x.arg != "gidx0": raise NotImplementedError(f"the CPU runs one-dimensional launches: no thread id {x.arg} (only gidx0)")

def narrow_flags(flags: frozenset[str], simd: int) -> frozenset[str]:
  """`flags` without the features of vectors wider than `simd` bytes: AVX-512's and AMX's below 64 (an AVX2 CPU), AVX's and FMA's
  below 32."""
  if simd < 64: flags = frozenset(f for f in flags if not f.startswith(("avx512", "amx")))   # AMX CPUs have AVX-512
  return flags - {"avx", "avx2", "fma"} if simd < 32 else flags

R = TypeVar("R", "CPUCRenderer", "CPULLVMRenderer")

def _narrowed(rnd: R, simd: int) -> R:
  """A copy of `rnd` rendering for a CPU like its target but with vectors of at most `simd` bytes, with that CPU's rules: the
  optimizer tests' AVX2 renderer on an AVX-512 host thus renders exp2 without vscalefps, as an AVX2 host does."""
  out = copy.copy(rnd)
  out.target(narrow_flags(rnd.flags, simd))
  return out

NT_MD = "!{i32 1}"   # the !nontemporal metadata: a node holding i32 1, as the LangRef asks

def _llvm_nt_branch(ctx: CPULLVMRenderer, c: str, t: str, v: str, p: str, w: int, plain: str) -> str:
  """A streaming store of `v` (type `t`) at `p` where `c` holds, else `plain`."""
  k = ctx.fresh_label("nt")
  return (f"br i1 {c}, label %{k}, label %{k}.plain\n{ctx.label(k)}\n  store {t} {v}, ptr {p}, align {w}, !nontemporal {NT_MD}\n"
          f"  br label %{k}.done\n{ctx.label(k + '.plain')}\n  {plain}\n  br label %{k}.done\n{ctx.label(k + '.done')}")

def unchecked_streams(uops: list[UOp], simd_bytes: int) -> frozenset[UOp]:
  """The streamed STOREs that need no test of their own in a kernel holding a transposing tile (a shuffle network): ungated, at
  an index a known multiple of their width, so aligned exactly where their buffer is (the kernel is versioned on that, once).
  A test per store split the tile's block, and LLVM schedules and allocates registers per block (AVX2 4096^2, rows loaded a
  register at a time: 34 ymm spills per tile, 12 without). AVX-512's tile (a zmm per row) spilled no more, but in a
  transposing copy its 16 tests and branches per tile cost time: one Zen 4 thread, thread time, A/B in one process, medians
  of 15-21, GB/s (our copy kernel alike 43-55): 4096^2 33.1 -> 35.4, 2048^2 38.0 -> 39.5, 8192x1024 32.1 -> 34.9, NHWC ->
  NCHW 32x56x56x64 29.9 -> 31.7, NCHW -> NHWC 32x64x56x56 49.8 -> 50.3; 2 threads (wall at real-time priority, medians of
  39-59, copy 87-107): 62.0 -> 63.3 and 61.7 -> 62.0, 67.4 -> 68.0, 59.9 -> 59.9, 65.8 -> 66.8, 104.2 -> 103.5 (even)."""
  streamed = [x for x in uops if x.op is Ops.STORE and x.arg == NT_ARG and len(x.src[0].src) < 3 and
              stream_width(x.src[1].dtype.itemsize, simd_bytes, _known_align(x.src[0].src[1], x.src[0].src[0].dtype.base.itemsize))
              == store_width(x, simd_bytes)]
  if not streamed or not has_shuffle_network(uops): return frozenset()
  # rows loaded as wide as the stores (AVX-512's tile): only a transposing copy, every streamed value the network's own; a * a.T
  # (a load along the output row too, multiplied in) ran slower so (one Zen 4 thread, 2048^2, 15.9 -> 14.0 GB/s)
  if min((u.dtype.count for u in uops if u.op is Ops.LOAD), default=0) >= max(x.src[1].dtype.count for x in streamed) and \
     not all(is_shuffle(x.src[1]) for x in streamed): return frozenset()
  return frozenset(streamed)

def _llvm_stream_store(ctx: CPULLVMRenderer, x: UOp) -> str:
  """A STORE marked NT_ARG: a streaming store (split by LLVM into instructions of `w` bytes) when the address is aligned to `w`
  and a gate is true, else the plain (gated) store (LLVM splits a streaming store it can't prove aligned into 8-byte pieces,
  and one declared aligned that isn't faults). A gate per lane is tested per `w`-byte piece: the last vector of a padded row
  streams its whole pieces, as a masked plain store would read its line in, then the next row's streaming store over that
  cached line would write it out at once (softmax 4096x1000, 16 lanes: half a vector on)."""
  idx, val = x.src[0], x.src[1]
  w, t, p, v = store_width(x, ctx.simd_width), ctx.mem_ty(val.dtype), ctx[idx], ctx[val]
  # the copy for misaligned buffers (<name>_unaligned) stores these plainly: no streaming store, so no SFENCE for them
  if x in ctx.unchecked and ctx.plain_copy: return _render_store(ctx, x)
  ctx.streams = True
  if x in ctx.unchecked: return f"store {t} {v}, ptr {p}, align {w}, !nontemporal {NT_MD}"
  a, m, c = ctx.tmp(), ctx.tmp(), ctx.tmp()
  # a store gated per lane at an index a known multiple of its width tests its buffer (LLVM hoists that, unswitches the loop)
  at = ctx[idx.src[0]] if buffer_tested(x, ctx.simd_width) else p
  out = f"{a} = ptrtoint ptr {at} to i64\n  {m} = and i64 {a}, {w - 1}\n  {c} = icmp eq i64 {m}, 0\n  "
  if len(idx.src) < 3: return out + _llvm_nt_branch(ctx, c, t, v, p, w, _render_store(ctx, x))
  if (g := idx.src[2]).dtype.count == 1:
    both = ctx.tmp()
    return out + f"{both} = and i1 {c}, {ctx[g]}\n  " + _llvm_nt_branch(ctx, both, t, v, p, w, _render_store(ctx, x))
  lanes = w // val.dtype.scalar().itemsize
  pt, mt = val.dtype.scalar().vec(lanes), f"<{lanes} x i1>"
  ctx.declares[f"declare void {(name := _masked_intrinsic('store', pt))}({ctx.ty(pt)}, ptr, i32, {mt})"] = None
  for j in range(0, val.dtype.count, lanes):
    sel = ", ".join(f"i32 {i}" for i in range(j, j + lanes))
    pv, pm, pp, bits, on, ok = [ctx.tmp() for _ in range(6)]
    out += (f"{pv} = shufflevector {ctx.ty(val.dtype)} {v}, {ctx.ty(val.dtype)} poison, <{lanes} x i32> <{sel}>\n"
            f"  {pm} = shufflevector {ctx.ty(g.dtype)} {ctx[g]}, {ctx.ty(g.dtype)} poison, <{lanes} x i32> <{sel}>\n"
            f"  {pp} = getelementptr {ctx.mem_ty(val.dtype.scalar())}, ptr {p}, i64 {j}\n"
            f"  {bits} = bitcast {mt} {pm} to i{lanes}\n  {on} = icmp eq i{lanes} {bits}, -1\n  {ok} = and i1 {c}, {on}\n  ")
    some, k = ctx.tmp(), ctx.fresh_label("masked")
    plain = (f"{some} = icmp ne i{lanes} {bits}, 0\n  br i1 {some}, label %{k}, label %{k}.done\n{ctx.label(k)}\n"
             f"  call void {name}({ctx.ty(pt)} {pv}, ptr {pp}, i32 {val.dtype.scalar().itemsize}, {mt} {pm})\n"
             f"  br label %{k}.done\n{ctx.label(k + '.done')}")
    out += _llvm_nt_branch(ctx, ok, ctx.ty(pt), pv, pp, w, plain) + "\n  "
  return out.rstrip()

PREFETCH_DECL = "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)"

def _llvm_prefetch_load(ctx: CPULLVMRenderer, x: UOp) -> str | None:
  """A LOAD that also prefetches (plugin_cpu/prefetch.py): the load, then read prefetches `off` elements on (its locality hint),
  one per cache line of the vector (plain getelementptrs, as the address may lie past the buffer: a prefetch never faults); a
  spread one in a block of its own, branched to where its reduce and row-block indices agree under the mask."""
  if (pf_at := ctx.prefetch.get(x)) is None: return None
  off, loc, gate = pf_at
  ctx.declares[PREFETCH_DECL] = None
  out = _render_load(ctx, x)
  if gate is not None:
    red, row, mask = gate
    a, b, c, k = ctx.tmp(), ctx.tmp(), ctx.tmp(), ctx.fresh_label("prefetch")
    t = ctx.ty(red.dtype)
    # (a constant row: the reduce index's place in its line, compared as it is)
    out += f"\n  {a} = and {t} {ctx[red]}, {mask}" + (f"\n  {b} = and {t} {ctx[row]}, {mask}" if isinstance(row, UOp) else "")
    out += (f"\n  {c} = icmp eq {t} {a}, {b if isinstance(row, UOp) else row}\n"
            f"  br i1 {c}, label %{k}, label %{k}.done\n{ctx.label(k)}")
  for o in line_offsets(x, off):
    p = ctx.tmp()
    out += (f"\n  {p} = getelementptr {ctx.mem_ty(x.src[0].src[0].dtype.base)}, ptr {ctx[x.src[0]]}, i64 {o}\n"
            f"  call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 {loc}, i32 1)")
  if gate is not None: out += f"\n  br label %{k}.done\n{ctx.label(k + '.done')}"
  return out

# A pack's copy runs once a panel: LLVM unrolling its loops fully (a 1x1 stride-2 conv's copied row of 14 or 28 pixels) or
# analysing them for it (the stem's copy loops around its 7 taps) took a large share of their compile for no speed. Those of
# more than COPY_UNROLL_MAX steps, or with loops inside, are marked not to be unrolled; shorter innermost ones may still be (the
# stem's 7 taps unrolled ran 1.5% faster in AVX2 code, a 3x3 conv's 3-step kh copy 3.5% in a training kernel)
NO_UNROLL_MD = '!{!"llvm.loop.unroll.disable"}'
COPY_NO_UNROLL = True   # _llvm_copy_end on (a switch for comparisons)
COPY_UNROLL_MAX = 8
KERNEL_COPY_NO_UNROLL = True   # stream_copy_loops too (a switch for comparisons)
# A plain copy kernel's loops with loops inside are marked too: LLVM fully unrolled the 3 channels of ResNet-18's padded input
# copy (E_8_3_224_224) and unrolled its 224-row loop by 2, six copies of the row loop for IndVarSimplify, LSR and IV users to
# analyse (~3/4 of its compile), for no speed (a row of 14 vector copies a step either way)
STREAM_OUTER_NO_UNROLL = True   # (a switch for comparisons)
# A reduce loop of more than NEST_UNROLL_MAX and at most COPY_UNROLL_MAX steps around loops of at most COPY_UNROLL_MAX (the
# stem's 7 kh taps around its 7 kw taps) is marked too: LLVM unrolls the kw taps, costs out unrolling the kh loop around them
# (a sixth of the stem's compile) and keeps it rolled, the same object. Wider bounds changed objects and lost speed: a 3x3
# conv's 3 kh taps (1.01-1.09x, AVX2 code too), a channel loop around them, a 2-step loop around a reduce, an 8-step batch sum.
NEST_NO_UNROLL = True   # (a switch for comparisons)
NEST_UNROLL_MAX = 4
# A copy step that loads the rows of two or more output vectors (load_rows: a 3x3 conv's 32-channel weight panel, 32 masked rows
# and 74 shuffles a kh step) is marked too: LLVM never unrolls its 3 steps (the objects are the same), but costs out doing so,
# ~1.3% of the conv's compile. One vector's rows (a 16-channel panel's 85-instruction step) LLVM does unroll, and rolled that
# ran 1.043x the time in a training kernel whose copy is a large share (r_8_512_7_7), so it is left to LLVM.
ROW_COPY_NO_UNROLL = True   # (a switch for comparisons)
ROW_COPY_VECTORS = 2

def row_copy_loops(uops: list[UOp], deps: dict[UOp, frozenset[UOp]], simd_bytes: int) -> frozenset[UOp]:
  """A pack's copy loops (AxisType.OUTER) whose step loads the rows (load_rows' ROW_ARG loads) of ROW_COPY_VECTORS vectors or more."""
  rows: Counter[UOp] = Counter()
  need = 0
  for u in uops:
    if u.op is Ops.LOAD and u.arg == ROW_ARG:
      rows.update(r for r in deps[u] if r.arg[-1] is AxisType.OUTER)
      need = ROW_COPY_VECTORS * simd_bytes // u.dtype.scalar().itemsize   # a row per lane of the vectors the copy fills
  return frozenset(r for r, n in rows.items() if n >= need) if ROW_COPY_NO_UNROLL and need else frozenset()

# A register tile's reduce loop with 16 vector registers (AVX2's 2 x 6: 12 FMAs a step, 2 panel loads, 6 broadcasts) is unrolled
# by LLVM's own cost model twice: 24 FMAs an iteration beside its index updates and two compare-and-branches, which on an Intel
# core issue to ports the FMAs need (0 and 1 take integer ALU and branch uops too): the 2-thread matmul ran at ~85% of the FMA
# peak loop. Marked llvm.loop.unroll.count so an iteration holds FMA_UNROLL_FMAS FMAs (8 steps), the loop control is a quarter
# as much. That 2-core Intel guest, AVX2 code (DEV=CPU:LLVM:znver3), A/B in one process, medians of 9-11, one thread (thread
# time, % of the 8-lane FMA peak loop timed between), the IR marked by hand: 1024^3 x2 (LLVM's) 86.8%, x4 88.9%, x8 93.4%, x16
# 93.7%; 2048^3 87.0%, 89.8%, 94.4%; this rule (with the loop around kept rolled) 1.091x and 1.081x the speed; 2 threads (wall,
# real-time priority, 61 pairs) 0.915x and 0.917x the time, GPT-2 block products 0.83-1.01x, ResNet-18's 1x1 convs
# 0.94-1.01x. A Zen issues integer and FP work to pipes of their own, where the loop control takes no FMA slot either way (the
# Zen 3's 2 FMA pipes, 4 ALUs). Count 4 (16-FMA steps, 1 x 8 rows x 2 images and the like) was mixed (0.91-1.20x: a conv's
# weight gradient with gathered rows 1.20x), hence FMA_UNROLL_MIN. AVX-512's 4 x 6 tile (24 FMAs a step) ran the same unrolled
# x4 or x8 (1.007, 1.000): targets with FMA_UNROLL_BELOW_REGS vector registers or more keep LLVM's choice.
FMA_UNROLL_FMAS = 96
FMA_UNROLL_BELOW_REGS = 32
FMA_UNROLL_MIN = 8
FMA_ROLL_AROUND = True   # the loops around them kept rolled (a switch for comparisons)

def _tile_fmas(uops: list[UOp], deps: dict[UOp, frozenset[UOp]], r: UOp) -> int:
  """The vector FMAs of an outer-product register tile in loop `r`: multiply-adds of a vector by a broadcast value into an
  accumulator (a load of a register buffer, or such an FMA: a reduce the heuristic unrolled), counted where a multiplicand feeds
  more than one of them. Not a dot product's vectors along the reduce (an x @ W.T of 8 rows streaming W from memory, two vector
  loads an FMA), nor a variance's d*d + acc, nor an exp's polynomial."""
  fmas: set[UOp] = set()
  for u in uops:
    if u.op is Ops.MULACC and u.dtype.count > 1 and r in deps.get(u, ()) and any(s.unbroadcast() is not s for s in u.src[:2]) and \
       (u.src[2] in fmas or (u.src[2].op is Ops.LOAD and u.src[2].src[0].op is Ops.INDEX and u.src[2].src[0].src[0].op is Ops.DEFINE_REG)):
      fmas.add(u)
  uses = Counter(s for u in fmas for s in u.src[:2])
  return len(fmas) if any(n > 1 for n in uses.values()) else 0

def fma_unroll_loops(uops: list[UOp], deps: dict[UOp, frozenset[UOp]], simd_regs: int) -> tuple[dict[UOp, int], frozenset[UOp]]:
  """The innermost reduce loops of a register tile's FMAs (_tile_fmas) and the count each is unrolled by: the most steps, a
  power of two dividing its constant trip count, whose FMAs fit FMA_UNROLL_FMAS, where that is FMA_UNROLL_MIN or more; only on
  targets with fewer than FMA_UNROLL_BELOW_REGS vector registers (`simd_regs`). With them the loops directly around those, to
  be kept rolled (FMA_ROLL_AROUND): LLVM fully unrolled a matmul's 4-panel group loop around the unrolled body (32 copies of the
  step); rolled, 1024^3's kernel compiles in 44 ms where it took 70 unmarked and 111 unrolled so, and runs as fast (one thread,
  1.091x / 1.096x the speed of unmarked; 2048^3 1.081x / 1.059x)."""
  if not FMA_UNROLL_FMAS or not 0 < simd_regs < FMA_UNROLL_BELOW_REGS: return {}, frozenset()
  out: dict[UOp, int] = {}
  open_: list[UOp] = []
  parent: dict[UOp, UOp] = {}   # the loop each loop opened inside, innermost
  for u in uops:
    if u.op is Ops.RANGE:
      if open_: parent[u] = open_[-1]
      open_.append(u)
    elif u.op is Ops.END: open_ = [r for r in open_ if r not in u.src[1:]]
  inner = set(parent.values())   # loops with a loop opened inside them
  for r in uops:
    if r.op is not Ops.RANGE or r.arg[-1] is not AxisType.REDUCE or r in inner or r.src[0].op is not Ops.CONST: continue
    if not (fmas := _tile_fmas(uops, deps, r)): continue
    n = 1
    while (n * 2) * fmas <= FMA_UNROLL_FMAS and r.src[0].arg % (n * 2) == 0: n *= 2
    if n >= FMA_UNROLL_MIN and r.src[0].arg > n: out[r] = n
  return out, frozenset(parent[r] for r in out if r in parent and FMA_ROLL_AROUND)

def stream_copy_loops(uops: list[UOp]) -> frozenset[UOp]:
  """The loops of a kernel whose every store stores a load as it is, neither gated (a pad's copy), along which each load and
  store steps by its width: a contiguous stream, whose loop costs nothing beside its loads and stores. Not unrolled, a loop of
  one masked row a step (a 1x1 stride-2 conv's input rows) ran 1.2% slower, a row's masked last vector (AVX2) 5%."""
  if not (stores := [u for u in uops if u.op is Ops.STORE]) or any(st.src[1].op is not Ops.LOAD for st in stores): return frozenset()
  if any(len(i.src) > 2 for st in stores for i in (st.src[0], st.src[1].src[0])): return frozenset()
  return frozenset(r for r in uops if r.op is Ops.RANGE and
                   all(index_step(i.src[1], r) == st.src[1].dtype.count for st in stores for i in (st.src[0], st.src[1].src[0])))

def _llvm_copy_end(ctx: CPULLVMRenderer, x: UOp) -> str | None:
  """The END of copy loops (a pack's, AxisType.OUTER, or stream_copy_loops and the loops around them in a plain copy kernel:
  STREAM_OUTER_NO_UNROLL), of loops with loops inside (NEST_NO_UNROLL) and of those around a register tile's unrolled reduce
  (fma_unroll_loops) with each back edge marked llvm.loop.unroll.disable, and of that reduce with its llvm.loop.unroll.count."""
  def many(r: UOp, n: int = COPY_UNROLL_MAX) -> bool: return r.src[0].op is not Ops.CONST or r.src[0].arg > n
  def inner(r: UOp) -> bool: return any(o > ctx.open_order[r] for o in ctx.open_order.values())   # loops opened after it, open
  # (a stream's innermost loops of at most COPY_UNROLL_MAX steps are left to LLVM, which unrolls them fully)
  def window(r: UOp) -> bool:   # a reduce of more than NEST_UNROLL_MAX taps around loops of at most COPY_UNROLL_MAX: a 7x7 window
    return r.arg[-1] is AxisType.REDUCE and inner(r) and many(r, NEST_UNROLL_MAX) and not many(r) and \
      not any(many(o) for o, n in ctx.open_order.items() if n > ctx.open_order[r])
  copies = [r for r in x.src[1:] if r.op is Ops.RANGE and r.arg[-1] is AxisType.OUTER and (many(r) or inner(r) or r in ctx.row_copies)]
  outer = [r for r in x.src[1:] if r.op is Ops.RANGE and (r in copies or
                                                            (r in ctx.stream_copies and many(r) and not inner(r)) or
                                                            (STREAM_OUTER_NO_UNROLL and bool(ctx.stream_copies) and inner(r)) or
                                                            (NEST_NO_UNROLL and window(r)))] if COPY_NO_UNROLL else []
  outer += [r for r in x.src[1:] if r in ctx.fma_rolled and r not in outer]
  counted = [r for r in x.src[1:] if r in ctx.fma_unroll and r not in outer]
  if not outer and not counted: return None
  out = _render_end(ctx, x)
  ctx.trailer.setdefault(f"!0 = {NO_UNROLL_MD}", None)
  for r in outer:
    n = sum(t.startswith("!") for t in ctx.trailer)
    ctx.trailer[f"!{n} = distinct !{{!{n}, !0}}"] = None
    out = out.replace(f"br label %{ctx.loop_label[r]}.head\n", f"br label %{ctx.loop_label[r]}.head, !llvm.loop !{n}\n")
  for r in counted:
    n = sum(t.startswith("!") for t in ctx.trailer)
    ctx.trailer[f"!{n} = !{{!\"llvm.loop.unroll.count\", i32 {ctx.fma_unroll[r]}}}"] = None
    ctx.trailer[f"!{n + 1} = distinct !{{!{n + 1}, !{n}}}"] = None
    out = out.replace(f"br label %{ctx.loop_label[r]}.head\n", f"br label %{ctx.loop_label[r]}.head, !llvm.loop !{n + 1}\n")
  return out

def _offset_add_parts(i: UOp) -> tuple[UOp, UOp] | None:
  """(the base, the constant) of an int32 ADD whose second source is a constant: the addresses the rules below write."""
  return (i.src[0], i.src[1]) if i.op is Ops.ADD and i.dtype.scalar() is dtypes.int32 and len(i.src) == 2 and i.src[1].op is Ops.CONST else None

def _llvm_lane_index(ctx: CPULLVMRenderer, x: UOp) -> str | None:
  """The address at a 32-bit index plus a constant of a tile's lane (lane_indices), of a scalar load in a reduce loop
  (index_offsets) or of an ungated vector load or a vector store (vector_offsets): _llvm_offset_index's two GEPs, so a tile's lanes step from one
  address. Other INDEXes keep the i32 sum. Each lane's own i32 sum made LLVM's loop passes grow with their square (an AVX-512 3x3
  conv's 224 lane stores); one GEP each at (the index widened + the offset) in i64 left the instruction selector's DAG combiner
  to take every lane's sum apart again (visitADD, SimplifyDemandedBits): ResNet-18 b8 inference compiles in 0.91-0.93x the time.
  Gated lanes (a branch around each) keep that i64 sum: from one address, bench --quick's E_4_8_16_16 took 1.02x the time."""
  # the sets first: most INDEXes are in none (a rule of the node alone, called directly: it tests the index's shape itself)
  if len(x.src) < 2 or not (x in ctx.lane_indices or x.src[1] in ctx.offset_adds or x in ctx.offset_vectors) or \
     (parts := _offset_add_parts(x.src[1])) is None: return None
  base, off = parts
  if x in ctx.lane_indices and len(x.src) > 2 and x.src[2].dtype.count == 1:   # (a row's gate per lane is constant)
    w, s = ctx.tmp(), ctx.tmp()
    return (f"{w} = sext i32 {ctx[base]} to i64\n  {s} = add nsw i64 {w}, {off.arg}\n"
            f"  {ctx[x]} = getelementptr inbounds {ctx.mem_ty(x.src[0].dtype.base)}, {ctx.ptr_ty(x.src[0].dtype)} {ctx[x.src[0]]}, i64 {s}")
  return _llvm_offset_index(ctx, x, base, off)

def _llvm_offset_index(ctx: CPULLVMRenderer, x: UOp, base: UOp, off: UOp) -> str:
  """An address at a 32-bit index plus a constant (_llvm_lane_index's: a tile's lane, a scalar load's in a reduce loop, an
  ungated vector load's) as the buffer at the index, then the constant in i64 from there: a batchnorm gradient's 16 channels
  read one by one at stride 49 are then one address and 16 displacements to LLVM's loop passes (IndVarSimplify,
  LoopLoadElimination, LSR), where each lane's i32 sum was an address they widened and rewrote of its own. Neither GEP is
  inbounds (as prefetch addresses are not): the index alone may lie outside the buffer (a padded window's tap loop: the pixel
  plus the tap, then -row-1), and an inbounds GEP outside its object is poison, the load's address with it. The machine code
  is the same without: ResNet-18 b8 inference and training step, the 92 kernels with such addresses native and 93 in znver3
  code, byte for byte."""
  t, pt = ctx.mem_ty(x.src[0].dtype.base), ctx.ptr_ty(x.src[0].dtype)
  # the lanes of a tile in one block share the buffer-at-index GEP (it dominates the rest of its block): a 3x3 conv's 224
  # lane stores and 96 panel loads wrote one each, for LLVM to parse and merge again
  lane = f"{ctx[x]} = getelementptr {t}, {pt} {{}}, i64 {off.arg}"
  if (b := ctx.base_geps.get(key := (ctx.block, x.src[0], base))) is not None: return lane.format(b)
  b = ctx.base_geps[key] = ctx.tmp()
  return f"{b} = getelementptr {t}, {pt} {ctx[x.src[0]]}, i32 {ctx[base]}\n  " + lane.format(b)

def _in_reduce(deps: dict[UOp, frozenset[UOp]], idx: UOp) -> bool: return any(r.arg[-1] is AxisType.REDUCE for r in deps.get(idx, ()))

def lane_indices(uops: list[UOp], deps: dict[UOp, frozenset[UOp]]) -> frozenset[UOp]:
  """The INDEXes of a tile's lanes, which _llvm_lane_index addresses from their index: those of scalar stores, of scalar loads
  whose index depends on no reduce loop (`deps`: prefetch.loop_deps) and of a tile's row stores and loads (tile_rows: 32 in a
  3x3 conv, as i32 sums took IndVarSimplify, IV users and LoopIdiomRecognize 42 ms, so addressed 8; load_rows)."""
  return frozenset(u.src[0] for u in uops if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and
                   ((u.src[1] if u.op is Ops.STORE else u).dtype.count == 1 and (u.op is Ops.STORE or not _in_reduce(deps, u.src[0].src[1])) or
                    u.arg == ROW_ARG))

def unused_values(ctx: CPULLVMRenderer, uops: list[UOp]) -> frozenset[UOp]:
  """Values whose readers take their parts, not the value, which _llvm_unused renders as nothing: GEPs of one lane that only
  VECTORIZEs rendered as one shufflevector read (llvm_ir._shuffle_sources: those take the lanes' vectors; a register
  transpose's, tile_rows' and load_rows': 2112 of the 3059 instructions of a 3x3 conv with a residual add, extractelements
  for LLVM to parse and delete), and 32-bit (index + constant) adds that only INDEXes addressed from their base read
  (_llvm_lane_index: 76 more). Not bool lanes: a load's or store's gate may be read through a VECTORIZE of one lane
  (_render_load). Needs the renderer's lane_indices, offset_adds and offset_vectors; fills its shuffles (_llvm_shuffle)."""
  read: set[UOp] = set()
  maybe: list[UOp] = []
  lanes, offset, shuffles = ctx.lane_indices, ctx.offset_vectors, ctx.shuffles
  for u in uops:
    if (op := u.op) is Ops.GEP:
      if len(u.arg) == 1 and u.dtype is not dtypes.bool: maybe.append(u)
    elif op is Ops.ADD:
      if u.dtype is dtypes.int32 and u.src[1].op is Ops.CONST: maybe.append(u)
    elif op is Ops.VECTORIZE:
      if u.src[0].op is Ops.GEP and (sh := _shuffle_sources(u)) is not None:
        shuffles[u] = sh
        continue
    elif op is Ops.INDEX and len(u.src) > 1 and (u in lanes or u.src[1] in ctx.offset_adds or u in offset) and \
         _offset_add_parts(u.src[1]) is not None:
      read.add(u.src[0])
      read.update(u.src[2:])
      continue
    read.update(u.src)
  return frozenset(u for u in maybe if u not in read)

def _llvm_unused(ctx: CPULLVMRenderer, x: UOp) -> str | None: return "" if x in ctx.unused else None

# The X86 instruction selector combines each shuffle with the shuffles below it (combineX86ShufflesRecursively), a search that
# grows with the chain's depth: a 16x16 register transpose (4 stages of 16 shuffles: pack._row_loop's AVX-512 panel copies) took
# ~7.5 ms of compile, ~3.7 ms with its chains cut in two halves. Only stages count (shuffles of vectors as wide as they are):
# a 3x3 conv's weight copy (4-wide transposes of 3-float rows, joined into 16 lanes) cut where its joins were counted took 11-17
# more instructions and ran ~0.8% slower. Only a pack's panel copy is cut (its shuffles stored to a register buffer): cut, the
# training step's weight transposes (E_128_256: a 2-step loop LLVM then kept) ran up to 1.18x the time, its NHWC permute 0.91x.
# SHUFFLE_CUT_DEPTH is the halves' depth; 0: no cut (a switch for comparisons).
SHUFFLE_CUT_DEPTH = 2
SHUFFLE_CUT_BITS = (128, 256, 512)   # vector registers ("v": xmm, ymm, zmm)

def shuffle_cuts(uops: list[UOp], shuffles: dict[UOp, tuple[list[UOp], list[int]]]) -> frozenset[UOp]:
  """The stages (unused_values' ctx.shuffles of vectors as wide as they are) of a panel copy SHUFFLE_CUT_DEPTH deep on a chain
  of stages, counted from its last cut, that SHUFFLE_CUT_DEPTH more stages read in turn: _llvm_shuffle passes each through an
  empty asm, which the selector does not see through."""
  if not SHUFFLE_CUT_DEPTH: return frozenset()
  panel = {u.src[1] for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and
           isinstance(b := u.src[0].src[0].dtype, PtrDType) and b.addrspace == AddrSpace.REG}
  readers: dict[UOp, list[UOp]] = {}
  for x, (srcs, _) in shuffles.items():
    for s in srcs: readers.setdefault(s, []).append(x)
  def stage(x: UOp) -> bool: return shuffles[x][0][0].dtype == x.dtype
  above: dict[UOp, int] = {}   # the longest chain of stages reading x
  for x in reversed(shuffles):   # (the kernel's order: a shuffle's sources come first)
    above[x] = max((int(stage(r)) + above[r] for r in readers.get(x, ())), default=0)
    if x in panel or any(r in panel for r in readers.get(x, ())): panel.add(x)
  depth: dict[UOp, int] = {}
  cuts: set[UOp] = set()
  for x, (srcs, _) in shuffles.items():
    if not stage(x): continue
    depth[x] = d = 1 + max((depth.get(s, 0) for s in srcs if s not in cuts), default=0)
    if d >= SHUFFLE_CUT_DEPTH and above[x] >= SHUFFLE_CUT_DEPTH and x in panel and x.dtype.itemsize * 8 in SHUFFLE_CUT_BITS: cuts.add(x)
  return frozenset(cuts)

def _llvm_shuffle(ctx: CPULLVMRenderer, x: UOp) -> str | None:
  """A VECTORIZE of lanes of one or two vectors, from what unused_values found (ctx.shuffles): the shufflevector llvm_ir's
  _render_vectorize writes, without looking again; at a cut (shuffle_cuts) through an empty asm of the register it is in."""
  if (sh := ctx.shuffles.get(x)) is None: return None
  srcs, mask = sh
  st, out = ctx.ty(srcs[0].dtype), ctx.tmp() if x in ctx.shuffle_cuts else ctx[x]
  sv = (f"{out} = shufflevector {st} {ctx[srcs[0]]}, {st} {ctx[srcs[1]] if len(srcs) > 1 else 'poison'}, "
        f"<{len(mask)} x i32> <{', '.join(f'i32 {m}' for m in mask)}>")
  if out == ctx[x]: return sv
  t = ctx.ty(x.dtype)
  return f'{sv}\n  {ctx[x]} = call {t} asm "", "=v,0"({t} {out})'

def _llvm_index_offset(ctx: CPULLVMRenderer, x: UOp) -> str | None:
  """A load's or store's 32-bit index plus a constant as an add without signed wrap (nsw), as no index into a buffer wraps: a tile's
  lanes read one by one in a reduce loop (a pooled sum's 16 channels at stride 49, a batchnorm gradient's) are then one
  induction variable plus constant offsets to LLVM's loop passes (IndVarSimplify, IV users, LoopLoadElimination), not an
  address each (lane stores' addresses: _llvm_lane_index). Vector loads' and stores' too (index_adds)."""
  # (nsw_adds holds only int32 adds of a constant: _offset_add)
  if x in ctx.unused: return ""
  return f"{ctx[x]} = add nsw i32 {ctx[x.src[0]]}, {ctx[x.src[1]]}" if x in ctx.nsw_adds else None

def _offset_add(i: UOp) -> bool: return i.dtype == dtypes.int32 and _offset_add_parts(i) is not None   # (scalar only)

def index_offsets(uops: list[UOp]) -> frozenset[UOp]:
  """The 32-bit (index + constant) adds that index a scalar load: _llvm_index_offset writes them nsw."""
  return frozenset(u.src[0].src[1] for u in uops if u.op is Ops.LOAD and u.dtype.count == 1 and u.src[0].op is Ops.INDEX and
                   _offset_add(u.src[0].src[1]))

def index_adds(uops: list[UOp]) -> frozenset[UOp]:
  """The 32-bit (index + constant) adds that index any load or store, which _llvm_index_offset writes nsw too (they keep their
  i32 sum as the address: vector_offsets says where the GEPs' form costs time), where IndVarSimplify and LSR otherwise prove
  a sum never wraps before they rewrite it: ResNet-18 b8 inference's 3x3/2 max pool (its window rows' loads) compiled in
  0.39x the time, its 1x1 stride-2 convs (masked input loads) in 0.67x and 0.74x, with the kernels as fast."""
  return frozenset(u.src[1] for u in uops if u.op is Ops.INDEX and len(u.src) > 1 and _offset_add(u.src[1]))

def vector_offsets(uops: list[UOp], deps: dict[UOp, frozenset[UOp]], stores: bool = True) -> frozenset[UOp]:
  """The INDEXes of ungated vector loads outside reduce loops at a 32-bit index plus a constant, which _llvm_offset_index
  addresses too: the stem conv's image rows staged into its panel (8 loads at 15, 460, ... 1395 floats from one index) were 8
  addresses that LLVM's loop passes widened and rewrote each (its compile 0.20 -> 0.09 s). A gated load keeps the i32 sum: the
  3x3/2 max pool's window rows above the image, loaded under a branch, so addressed made it 1.24-1.29x slower, with the same
  vector instructions and fewer scalar ones (its masked loads alone so addressed: 1.08x). So does a load in a reduce loop: with
  fewer address instructions LLVM unrolled a small weight-gradient sum (r_12_4_4_64) once more, 1.06x slower."""
  return frozenset(u.src[0] for u in uops if (u.op is Ops.LOAD and u.dtype.count > 1 and len(u.src[0].src) == 2 or stores and _vector_store(u)) and
                   u.src[0].op is Ops.INDEX and _offset_add(u.src[0].src[1]) and not _in_reduce(deps, u.src[0].src[1]))

def _vector_store(u: UOp) -> bool:
  """A vector store, plain or masked (a gate per lane: one address, no branch), which vector_offsets addresses too: a 1x1
  stride-2 conv's 16 output rows 196 floats apart (stored twice: zeros, then the sums) were 16 i32 sums that IndVarSimplify,
  IV users and LSR took 44 of its 80 ms on; so addressed its compile took 0.79x the time, the panel stores of the 3x3 convs'
  weight gathers 0.84-0.91x, and the kernels ran as fast (ResNet-18 b8 inference: 24 kernels, 0.99-1.006x)."""
  return u.op is Ops.STORE and u.src[1].dtype.count > 1 and (len(u.src[0].src) == 2 or u.src[0].src[2].dtype.count > 1)

# AVX-512's vscalefps is p * 2**n in one instruction, where exp2's 2**n from the float's bits takes 4 integer ops and a second
# multiply (decompose.fast_exp2's `scale`): float32 vectors of 4 and 8 lanes (avx512vl) and of 16 or a power-of-two multiple of
# 16 (avx512f: an elementwise kernel's 32 and 64 lanes are rendered as 16-lane pieces, which LLVM keeps in separate registers)
SCALEF_ARG = "scalef"

def scalef_lanes(flags: frozenset[str]) -> frozenset[int]:
  """The float32 vector widths whose exp2 takes vscalefps on a CPU with `flags` (compiler.arch_flags): none without AVX-512."""
  if "avx512f" not in flags or host_machine() == "aarch64": return frozenset()
  return frozenset({16, 32, 64, 128} | ({4, 8} if "avx512vl" in flags else set()))

def _scalef(p: UOp, n: UOp) -> UOp: return UOp(Ops.CUSTOM, p.dtype, (p, n), SCALEF_ARG)
# with AVX-512DQ, exp2's n and f = x - n take one instruction each, vrndscaleps (llvm.roundeven) and vreduceps, and no clamp
# (decompose.fast_exp2's `split`), where the clamp's two compares, an add and two subtracts took five: one Zen 5 thread, softmax
# 4096x1000's kernel, hand-edited IR A/B, medians of 21: rounding alone 1.036 -> 0.976 ms, with vreduceps 0.894 -> 0.827
ROUNDEVEN_ARG, REDUCE_ARG = "roundeven", "reduce"
def _split(x: UOp) -> tuple[UOp, UOp]: return UOp(Ops.CUSTOM, x.dtype, (x,), ROUNDEVEN_ARG), UOp(Ops.CUSTOM, x.dtype, (x,), REDUCE_ARG)
# An exp2 of a product x = a * b <= 0 (softmax's (x - max) * 1/ln 2) takes t = a * b + 1/2 in the multiply's place and f = t -
# floor(t) by vreduceps rounding down, and vscalefps floors t itself (decompose.fast_exp2_floor): no vrndscaleps, which is two
# uops on Intel's AVX-512 cores (on AMD's one: one instruction less either way, the FMA in the multiply's place). A 2-vCPU
# Xeon guest (Sapphire Rapids class), load 10-12, off/on in one process, medians [quartiles] of per-pair ratios: softmax
# 128x1000's kernel (L2-resident, compute-bound), one thread, CPU time: 0.911 [0.847-0.957], 0.878 [0.799-1.024] the time;
# 2 threads, wall (memory-bound): softmax 4096x1000 0.983 [0.971-1.005], GPT-2 block's attention softmaxes 0.938, 0.947, 0.993,
# sdpa's 0.960, the MLP's loss 0.998
FLOOR_ARG = "reduce_floor"
EXP2_FLOOR = True   # fast_exp2_floor on (a switch for comparisons)
def _frac(t: UOp) -> UOp: return UOp(Ops.CUSTOM, t.dtype, (t,), FLOOR_ARG)

def _exp2_scalef(x: UOp, split: bool) -> UOp:
  if split and EXP2_FLOOR and x.arg == EXP2_NONPOSITIVE and (e := fast_exp2_floor(x.src[0], _scalef, _frac)) is not None: return e
  return fast_exp2(x.src[0], _scalef, _split if split else None, x.arg == EXP2_NONPOSITIVE)

def pm_exp2_scalef(lanes: frozenset[int], split: bool = False) -> PatternMatcher:
  """exp2 of float32 vectors of `lanes` by vscalefps, its argument split by vrndscaleps and vreduceps where `split` (AVX-512DQ)."""
  # (an EXP2_SCALED, 2**63 times exp, takes the bits path: target() makes none where these rules are). An exp2 of x <= 0 (a
  # softmax's) takes fast_exp2_nonpositive's degree-5 polynomial, as the bits path does (the same values bit for bit): one FMA
  # less of the 12 vector ops an exp takes here. One Zen 4 thread, softmax 512x1000's kernel (L3-resident, compute-bound),
  # interleaved A/B by thread time at load 8: 0.155 -> 0.147 ms (min), the pairs' median ratio 0.92-0.95
  return PatternMatcher([(UPat(Ops.EXP2, name="x", custom=lambda x: x.dtype.scalar() is dtypes.float32 and x.dtype.count in lanes
                                                             and x.arg != EXP2_SCALED),
                          lambda x: _exp2_scalef(x, split))],
                        name="exp2 by vscalefps")

# Ops.MAX returns a NaN operand (like the reference ALU): LLVM renders `a > b || isnan(a) ? a : b` as two compares into masks, an
# or and a blend. On AVX-512 it is vmaxps (a > b ? a : b, else b: b's NaN and ties) and vfixupimmps putting a back where a is a
# NaN: the same value in two instructions (one Zen 5 thread, softmax 4096x1000's kernel, whose row max takes 63 of them a row:
# 1.06 -> 0.93 ms; vmaxps alone, NaNs not kept, 0.88). Same widths as vscalefps.
MAX_FIXUP_ARG = "max_fixup"

def pm_max_fixup(lanes: frozenset[int], arg: str = MAX_FIXUP_ARG) -> PatternMatcher:
  # a MAX_NO_NAN max (arg) needs no NaN fix-up: llvm_ir renders it `a > b ? a : b`, which is vmaxps
  return PatternMatcher([(UPat(Ops.MAX, name="x", custom=lambda x: x.arg is None and x.dtype.scalar() is dtypes.float32 and x.dtype.count in lanes),
                          lambda x: UOp(Ops.CUSTOM, x.dtype, x.src, arg))], name=f"max by vmaxps and {arg}")

# Without AVX-512 the same vmaxps with a NaN first operand blended back, vcmpunordps + vblendvps: three instructions where the
# compare form took four (one Zen 5 thread, AVX2 code for znver3, medians of 9: softmax 4096x1000, whose row max is 125 vector
# maxes a row, 1.61 -> 1.56 ms; a row max of 1000x1000 62 -> 46 us). Vectors of 4 and 8 lanes, and multiples of 8 as pieces.
MAX_BLEND_ARG = "max_blend"

def max_blend_lanes(flags: frozenset[str]) -> frozenset[int]:
  """The float32 vector widths whose max takes vmaxps + a NaN blend on an x86 CPU with AVX and no AVX-512F."""
  if "avx" not in flags or "avx512f" in flags or host_machine() == "aarch64": return frozenset()
  return frozenset({4, 8, 16, 32, 64, 128})

# Without AVX-512, exp2 takes its n = roundeven(x) from vroundps, not r - 1.5*2**23 after r = x + 1.5*2**23 (decompose's fast_exp2
# and _exp2_nonpositive_times): the same n, one op each, but f = x - n no longer waits on r's add (3 dependent ops -> 2). AVX2 code
# (znver3) on one Zen 5 thread, A/B in one process, medians of 31 (IQR of pair ratios): softmax 4096x1000's kernel 0.979x
# (0.977-0.980), 256x1000 0.977x, log_softmax 4096x1000 0.977x, a causal 12x256x256 softmax 0.987x; 64x1024 exp 0.986x, sigmoid
# 0.982x, gelu 0.982x; the same values. That is a Zen's one-uop vroundps; an Intel core's (Haswell to Golden Cove) is two uops
# on the ports of the FMAs and multiplies, which bind this exp, where the add it saves runs on port 1 or, from Golden Cove, 5:
# there exp2 keeps decompose's adds (EXP2_ROUNDPS off). AVX2 code (znver3) on a 2-vCPU Xeon guest (Sapphire Rapids class),
# softmax 4096x1000's kernel, both forms in one process, speed without / with vroundps, medians of 41 pairs [quartiles]: 2 threads
# sampled in turn with the copy loop 1.026 [1.016-1.049], 1.038 [1.023-1.065] (0.86 -> 0.89, 0.93 -> 0.97 of the loop); one
# thread, CPU time, 1.034, 1.017
EXP2_ROUNDPS = host_vendor() != "GenuineIntel"

def pm_exp2_roundeven(lanes: frozenset[int]) -> PatternMatcher:
  """float32 exp2 in vectors of `lanes` with n rounded by llvm.roundeven (SSE4.1's roundps, which every AVX CPU has)."""
  def rnd(v: UOp) -> UOp: return UOp(Ops.CUSTOM, v.dtype, (v,), ROUNDEVEN_ARG)
  def ok(x: UOp) -> bool: return x.dtype.scalar() is dtypes.float32 and x.dtype.count in lanes
  return PatternMatcher([(UPat(Ops.EXP2, arg=EXP2_SCALED, name="x", custom=ok), lambda x: fast_exp2_scaled(x.src[0], rnd)),
                         (UPat(Ops.EXP2, arg=EXP2_NONPOSITIVE, name="x", custom=ok), lambda x: fast_exp2_nonpositive(x.src[0], rnd)),
                         (UPat(Ops.EXP2, name="x", custom=lambda x: ok(x) and x.arg is None), lambda x: fast_exp2(x.src[0], rnd=rnd))],
                        name="exp2 by roundps")

def llvm_rules(flags: frozenset[str], simd: int) -> PatternMatcher:
  """The LLVM renderer's rules before rendering: exp2 by vscalefps and max by vmaxps + vfixupimmps on AVX-512 (vmaxps and a NaN
  blend, and exp2 rounded by vroundps where EXP2_ROUNDPS, on AVX), then extra_rules' (and the bf16 dot product's where the target has it)."""
  rules = pm_exp2_scalef(lanes, "avx512dq" in flags) + extra_rules(simd) if (lanes := scalef_lanes(flags)) else extra_rules(simd)
  if lanes: rules = pm_max_fixup(lanes) + rules
  elif blend := max_blend_lanes(flags):
    rules = pm_max_fixup(blend, MAX_BLEND_ARG) + (pm_exp2_roundeven(blend) + rules if EXP2_ROUNDPS else rules)
  # a conv tile's rows under masks: stored (tile_rows) and loaded (load_rows)
  if "avx512f" in flags: rules = pm_store_rows(host_vector_regs(simd)) + pm_load_rows + rules
  return pm_bf16_dot + rules if bf16_dot(flags) else rules

def _vector_pieces(ctx: CPULLVMRenderer, x: UOp, call: Callable[[str, str, str, int], list[str]], piece: int = 16) -> str:
  """x = f(src0[, src1]) rendered by `call(out, a, b, lanes)` (its lines; b is "" for one source) on pieces of at most `piece`
  lanes, joined back."""
  n, w = x.dtype.count, min(x.dtype.count, piece)
  t = ctx.ty(x.dtype)
  if n == w: return "\n  ".join(call(ctx[x], ctx[x.src[0]], ctx[x.src[1]] if len(x.src) > 1 else "", w))
  def lanes(a: int, b: int) -> str: return ", ".join(f"i32 {k}" for k in range(a, b))
  lines, parts = [], []
  for j in range(0, n, w):
    ins, o = [ctx.tmp() for _ in x.src], ctx.tmp()
    lines += [f"{v} = shufflevector {t} {ctx[s]}, {t} poison, <{w} x i32> <{lanes(j, j + w)}>" for v, s in zip(ins, x.src)]
    lines += call(o, ins[0], ins[1] if len(ins) > 1 else "", w)
    parts.append(o)
  while len(parts) > 1:   # pieces joined pairwise: 16 + 16 lanes, then 32 + 32, ...
    joined = [ctx[x] if len(parts) == 2 else ctx.tmp() for _ in parts[::2]]
    lines += [f"{o} = shufflevector <{w} x float> {a}, <{w} x float> {b}, <{2 * w} x i32> <{lanes(0, 2 * w)}>"
              for o, a, b in zip(joined, parts[::2], parts[1::2])]
    parts, w = joined, 2 * w
  return "\n  ".join(lines)

def _masked_form(w: int) -> tuple[str, str]:
  """The mask type of a w-lane float32 AVX-512 intrinsic and its 512-bit form's last argument (4: the current rounding mode)."""
  return ("i16", ", i32 4") if w == 16 else ("i8", "")

def _llvm_masked(op: str, imm: int | None = None) -> Callable[[CPULLVMRenderer, UOp], str]:
  """Renders x by AVX-512's masked `op`.ps intrinsic, all lanes on: of (src0, src1), or of (src0, the immediate `imm`)."""
  def render(ctx: CPULLVMRenderer, x: UOp) -> str:
    def call(out: str, a: str, b: str, w: int) -> list[str]:
      wt, (mask, rnd) = f"<{w} x float>", _masked_form(w)
      name, (bt, bv) = f"@llvm.x86.avx512.mask.{op}.ps.{w * 32}", (wt, b) if imm is None else ("i32", str(imm))
      ctx.declares[f"declare {wt} {name}({wt}, {bt}, {wt}, {mask}{', i32' if rnd else ''})"] = None
      return [f"{out} = call {wt} {name}({wt} {a}, {bt} {bv}, {wt} zeroinitializer, {mask} -1{rnd})"]
    return _vector_pieces(ctx, x, call)
  return render

def _llvm_roundeven(ctx: CPULLVMRenderer, x: UOp) -> str:
  t = ctx.ty(x.dtype)
  return f"{ctx[x]} = call {t} {ctx.intrinsic('roundeven', x.dtype, 1)}({t} {ctx[x.src[0]]})"

# vfixupimmps's table per lane: a quiet (token 0) or signalling (token 1) NaN in the classified operand gives that operand as it is
# (response 1), every other class keeps the destination (response 0)
_NAN_TO_SRC = 0x11

def _llvm_max_fixup(ctx: CPULLVMRenderer, x: UOp) -> str:
  def call(out: str, a: str, b: str, w: int) -> list[str]:
    wt, it, (mask, rnd) = f"<{w} x float>", f"<{w} x i32>", _masked_form(w)
    mx = {16: "avx512.max.ps.512", 8: "avx.max.ps.256", 4: "sse.max.ps"}[w]
    fix = f"@llvm.x86.avx512.mask.fixupimm.ps.{w * 32}"
    ctx.declares[f"declare {wt} @llvm.x86.{mx}({wt}, {wt}{', i32' if rnd else ''})"] = None
    ctx.declares[f"declare {wt} {fix}({wt}, {wt}, {it}, i32, {mask}{', i32' if rnd else ''})"] = None
    m = ctx.tmp()
    return [f"{m} = call {wt} @llvm.x86.{mx}({wt} {a}, {wt} {b}{rnd})",
            f"{out} = call {wt} {fix}({wt} {m}, {wt} {a}, {it} <{', '.join([f'i32 {_NAN_TO_SRC}'] * w)}>, i32 0, {mask} -1{rnd})"]
  return _vector_pieces(ctx, x, call)

def _llvm_max_blend(ctx: CPULLVMRenderer, x: UOp) -> str:
  def call(out: str, a: str, b: str, w: int) -> list[str]:
    wt, mx = f"<{w} x float>", {8: "avx.max.ps.256", 4: "sse.max.ps"}[w]
    ctx.declares[f"declare {wt} @llvm.x86.{mx}({wt}, {wt})"] = None
    m, nan = ctx.tmp(), ctx.tmp()
    return [f"{m} = call {wt} @llvm.x86.{mx}({wt} {a}, {wt} {b})", f"{nan} = fcmp uno {wt} {a}, zeroinitializer",
            f"{out} = select <{w} x i1> {nan}, {wt} {a}, {wt} {m}"]
  return _vector_pieces(ctx, x, call, 8)

class HostTarget(Renderer):
  """This host's threads and caches, shared by both CPU renderers (the C renderer, plugin_cpu/c_renderer.py, and the LLVM one
  below take it as their first base). What depends on the CPU's features (vectors, registers, rules) is set by each renderer's
  target(), which its __init__ calls with this host's flags or those of DEV's arch."""
  device = "CPU"
  global_max = None
  supports_float4 = True
  threads = THREADS if THREADS > 1 else 0
  l2_bytes = L2_BYTES
  stream_min_bytes = STREAM_MIN_BYTES
  scratch_bytes = SCRATCH_BYTES
  scaled_exp2 = True   # decompose.pm_vector_math lowers EXP2_SCALED (extra_rules)
  flags: frozenset[str]   # the CPU features the kernels are rendered for (compiler.arch_flags' names), set by target()

class CPULLVMRenderer(HostTarget, HostLLVMRenderer):
  """The same kernel as LLVM IR for llvmlite; the compiler fills in the host triple and data layout."""
  suffix = "LLVM"
  supported_dtypes = _HOST_DTYPES | {dtypes.bfloat16}
  odd_row_channel_tile = True
  big_l2_tiles = True   # heuristic.big_l2: a plain product's 4x6 tile and its packed panel's prefetch where the L2 holds 2 MiB
  # AVX-512: a large 3x3 conv's gated input loads are masked vector loads (no padded copy: 3 kernels, ~4% of the bench conv's
  # call), its channel tile (2 vectors of 16 channels x 7 pixels) loads little per FMA, and its thread blocks are images that
  # stay in the L2 for all their channel blocks (heuristic._image_blocks). 2-core Zen 4, 2 threads, engine path, A/B in one
  # process at real-time priority (load 33-37), medians of 9, ms copy -> in place: 32x64x56x56 -> 64 35.7 -> 34.3; ResNet-18's
  # batch-8 3x3s 64x56 8.91 -> 8.52, 64x56/2 4.86 -> 4.57, 128x28 8.59 -> 8.52, 128x28/2 4.76 -> 4.67, 256x14 8.45 -> 8.45,
  # 256x14/2 4.51 -> 4.47, 512x7 8.64 -> 8.57. AVX2 lost (znver3 code, 8-channel tiles: more loads per FMA, 4 channel blocks
  # per image; helper CV's per-kernel A/B on the same host: 1 thread 75.9 -> 79.4 ms, 2 threads 38.4 -> 39.3), and Zen 3's
  # 512 KiB L2 would not hold an 800 KB image. Nor on a core with a 2 MiB L2 (heuristic.big_l2, the Intel AVX-512 server
  # core: the copy's ungated channel tile there, 2 x 7 as in place, runs without the gates' branches). That 2-core Intel guest,
  # processes alternated, ms in place -> copy (both kernels): 2 threads at real-time priority, wall, medians of 7, 32x64x56x56
  # -> 64 28.1/28.0 -> 22.1/21.5; process CPU time / 2, medians of 5: 26.0/26.0/25.7 -> 21.5/20.3/21.4, ResNet-18's batch-8
  # 3x3s 64x56 6.9/7.0 -> 5.5/5.5, 128x28 6.4/6.4 -> 4.7/5.3, 256x14 6.3/6.1 -> 5.2/5.0, 512x7 5.5/5.5 -> 5.0/5.1, 128x28/2
  # 3.3/3.4 -> 3.0/3.0, but 64x56/2 3.0/3.0 -> 3.3/3.7. Set by target(): AVX-512 code on a core without the big L2.
  large_conv_in_place: bool
  string_rewrite = PatternMatcher([(UPat(Ops.STORE, name="x", arg=NT_ARG), _llvm_stream_store), (UPat(Ops.WMMA, name="x"), render_dot),
                                   # node-only patterns: called directly, without the matcher's captures (a rule a node)
                                   (UPat(Ops.INDEX, name="x"), _llvm_lane_index), (UPat(Ops.ADD, dtypes.int32, name="x"), _llvm_index_offset),
                                   (UPat(Ops.LOAD, name="x"), _llvm_prefetch_load), (UPat(Ops.END, name="x"), _llvm_copy_end),
                                   (UPat(Ops.GEP, name="x"), _llvm_unused), (UPat(Ops.VECTORIZE, name="x"), _llvm_shuffle),
                                   (UPat(Ops.CUSTOM, name="x", arg=SCALEF_ARG), _llvm_masked("scalef")),
                                   (UPat(Ops.CUSTOM, name="x", arg=ROUNDEVEN_ARG), _llvm_roundeven),
                                   (UPat(Ops.CUSTOM, name="x", arg=REDUCE_ARG), _llvm_masked("reduce", 8)),   # 8: no fraction bits kept, ties to even
                                   (UPat(Ops.CUSTOM, name="x", arg=FLOOR_ARG), _llvm_masked("reduce", 9)),    # 9: rounding down
                                   (UPat(Ops.CUSTOM, name="x", arg=MAX_FIXUP_ARG), _llvm_max_fixup),
                                   (UPat(Ops.CUSTOM, name="x", arg=MAX_BLEND_ARG), _llvm_max_blend)]) + llvm_rewrite

  split_tile_rows = True   # unchecked_streams: one alignment test per kernel
  peel_tails = True        # peel.peel_tail_iterations on (a switch for comparisons)
  offset_geps = True       # _llvm_offset_index on (a switch for comparisons)
  offset_vectors_on = True  # and for ungated vector loads (vector_offsets)
  offset_stores_on = True   # and for vector stores (vector_offsets)
  nsw_indexes_on = True     # every load's and store's (index + constant) nsw (index_adds)

  def __init__(self, arch: str | None = None):
    if arch is not None: self.arch = arch   # DEV=CPU:LLVM:<arch>: that CPU model's features (compiler.arch_flags)
    self.target(host_flags() if arch is None else arch_flags(arch))

  def target(self, flags: frozenset[str]) -> None:
    """Render for a CPU with `flags`: its vectors, registers, rules (exp2 by vscalefps on AVX-512) and bf16 dot product."""
    self.flags, self.simd_width = flags, simd_bytes(flags)
    self.simd_regs = host_vector_regs(self.simd_width)
    # LLVM tunes most AVX-512 CPUs to 256-bit vectors for loops it vectorizes itself; the attribute asks for the full width
    self.kernel_attrs = 'nounwind "prefer-vector-width"="512"' if self.simd_width == 64 else "nounwind"
    # with the bf16 dot product, bf16 is loaded and multiplied as vectors: the pairs of widened products become vdpbf16ps
    self.vector_dtypes = frozenset({dtypes.bfloat16}) if bf16_dot(flags) else frozenset()
    self.extra_matcher = llvm_rules(flags, self.simd_width)
    self.scaled_exp2 = not scalef_lanes(flags)   # vscalefps takes 2**n at no cost: a softmax's exps stay unscaled there
    # exp2 from the float's bits (no vscalefps): a softmax's exp pass is compute-bound, so the next row's max runs beside its sum
    # (core.codegen.stash.max_ahead). AVX-512 code is memory-bound there and lost: one Zen 5 thread, 4096x1000 1.18x the time
    self.max_ahead = not scalef_lanes(flags)
    # a softmax's (x - max) * (1 / ln 2) as one FMA, x * (1 / ln 2) + a per-row pivot (stash._fma_shift): where exp2 takes the
    # bits path and llvm.fmuladd fuses (x86 FMA3). AVX2 code (znver3) on Zen 5, softmax 4096x1000 and 256x1000: 0.96-0.97x the time
    self.fma_exp_shift = not scalef_lanes(flags) and x86_fma(flags)
    self.large_conv_in_place = self.simd_width == 64 and not big_l2(self)
    # bf16 matmuls on AMX tiles (plugin_cpu/amx.py); make_device turns it off where Linux refuses them
    self.amx = amx_bf16(flags)

  def own_kernel(self, ast: UOp, name: str) -> tuple[str, tuple[int, ...], dict[str, int]] | None:
    """A bf16 x bf16 -> float32 matmul on AMX tiles where the target has them (plugin_cpu/amx.py); None for anything else."""
    if not self.amx or (mm := match_matmul(ast)) is None: return None
    src, nblocks = render_matmul(name, mm, self.threads)
    return src, (nblocks, 1, 1), {"ops": 2 * mm.m * mm.n * mm.k, "mem": 2 * (mm.m * mm.k + mm.k * mm.n) + 4 * mm.m * mm.n}

  def narrowed(self, simd: int) -> CPULLVMRenderer: return _narrowed(self, simd)
  def rules_ctx(self, sink: UOp) -> RowLoads: return RowLoads(sink)

  def _render(self, name: str, uops: list[UOp]) -> str:
    if self.peel_tails: uops = peel_tail_iterations(uops, self.simd_width)
    deps = loop_deps(uops)
    self.prefetch = prefetch_offsets(uops, self.panel_budget(), self.simd_regs, self.simd_width, self.flags, deps, big_l2(self)) if PREFETCH else {}
    self.unchecked, self.plain_copy = unchecked_streams(uops, self.simd_width), False
    self.stream_copies = stream_copy_loops(uops) if KERNEL_COPY_NO_UNROLL else frozenset()
    self.fma_unroll, self.fma_rolled = fma_unroll_loops(uops, deps, self.simd_regs)
    self.row_copies = row_copy_loops(uops, deps, self.simd_width)
    self.lane_indices = lane_indices(uops, deps)
    self.index_offsets = index_offsets(uops)
    self.offset_adds = self.index_offsets if self.offset_geps else frozenset()   # the INDEXes at them: _llvm_offset_index
    self.nsw_adds = self.index_offsets | index_adds(uops) if self.nsw_indexes_on else self.index_offsets
    self.offset_vectors = vector_offsets(uops, deps, self.offset_stores_on) if self.offset_vectors_on else frozenset()
    self.shuffles: dict[UOp, tuple[list[UOp], list[int]]] = {}   # (filled by unused_values)
    self.unused = unused_values(self, uops)
    self.shuffle_cuts = shuffle_cuts(uops, self.shuffles)
    self.start_module()
    fns = [self.function(name, uops)]
    if self.unchecked:   # where a buffer of its unconditional streaming stores is misaligned, the kernel calls this copy
      self.plain_copy = True
      fns.append(self.function(name + "_unaligned", uops))
    return self.module(fns)

  def function(self, name: str, uops: list[UOp]) -> str:
    self.blocks: list[UOp] = []
    self.streams = False
    self.base_geps: dict[tuple[str, UOp, UOp], str] = {}   # (block, buffer, index) -> _llvm_offset_index's first GEP there
    return super().function(name, uops)

  def render_prologue(self, params: list[Param]) -> str:
    """The kernel whose `unchecked` streamed stores are unconditional runs only where their buffers are aligned to their widths:
    it tests them once here, and passes its arguments to the copy with those stores plain (<name>_unaligned) where one is not."""
    if not self.unchecked or self.plain_copy: return ""
    widest: dict[str, int] = {}   # each buffer's widest store: aligned to it, aligned to all of them
    for x in self.unchecked:
      b = self[x.src[0].src[0]]
      widest[b] = max(widest.get(b, 0), store_width(x, self.simd_width))
    check, conds = [], []
    for b, w in sorted(widest.items()):
      a, m, c = f"%nt.{b[1:]}.a", f"%nt.{b[1:]}.m", f"%nt.{b[1:]}.c"
      check += [f"{a} = ptrtoint ptr {b} to i64", f"{m} = and i64 {a}, {w - 1}", f"{c} = icmp eq i64 {m}, 0"]
      conds.append(c)
    for i in range(1, len(conds)):
      check.append(f"%nt.all{i} = and i1 {conds[i - 1] if i == 1 else f'%nt.all{i - 1}'}, {conds[i]}")
    ok = conds[0] if len(conds) == 1 else f"%nt.all{len(conds) - 1}"
    return "\n  ".join(check + [f"br i1 {ok}, label %nt.aligned, label %nt.unaligned\nnt.unaligned:",
                                f"tail call void @{self.kernel_name}_unaligned({', '.join(p.arg() for p in params)})",
                                "ret void\nnt.aligned:"])

  def render_return(self) -> str:
    if not self.streams: return "ret void"
    # streaming stores are weakly ordered: SFENCE before the block returns, so whoever sees the kernel done sees its data
    self.trailer["declare void @llvm.x86.sse.sfence()"] = None
    return "call void @llvm.x86.sse.sfence()\n  ret void"

  def render_special(self, x: UOp) -> str:
    _check_block(x)
    self.blocks.append(x)
    # Below AVX-512, the block index masked to the bits of its block count (a no-op): LLVM then knows its range, widens the 32-bit
    # index arithmetic that adds it and folds each load's constant offset into its address, where each broadcast of a threaded
    # kernel took a lea and a sign extension (26 in a step of 24 FMAs of the stem's weight gradient, znver3 code). The 2-core Zen 4,
    # znver3 code, 2 threads, each kernel A/B in one process interleaved at real-time priority (load 20-30), medians of 9-15, ms:
    # stem dW 15.2 -> 12.5, 3x3 dW 8x64x56x56 10.5 -> 9.4, depthwise 3x3 8x32x112x112 0.59 -> 0.44, softmax 4096x1000 0.67 ->
    # 0.62, 3x3 conv 32x64x56x56 36.1 -> 35.7, matmul 1024 and 512-channel convs even. AVX-512 code was mixed (stem dW 11.2 ->
    # 11.3, its in-place 3x3 conv 33.8 -> 35.2, depthwise 0.58 -> 0.44: its FMAs take their broadcasts from memory) and keeps it
    if x.dtype.itemsize == 4 and x.src[0].op is Ops.CONST and self.simd_width < 64:
      return f"{self[x]} = and i32 %{x.arg}, {(1 << (x.src[0].arg - 1).bit_length()) - 1}"
    if x.dtype.itemsize == 4:
      self.r[x] = f"%{x.arg}"   # the parameter itself: no instruction
      return ""
    return f"{self[x]} = sext i32 %{x.arg} to {self.ty(x.dtype)}"

  def render_params(self, bufs: list[UOp], vars_: list[UOp]) -> list[Param]:
    # the block index is the last parameter: after the buffers and the variables, as cpu_launch passes it
    return super().render_params(bufs, vars_) + [Param("i32", f"%{x.arg}") for x in self.blocks[:1]]
