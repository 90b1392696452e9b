"""bfloat16 products summed in float32 on the x86 bf16 dot-product instruction (AVX512_BF16 vdpbf16ps), for the host LLVM renderer.

A bf16 x bf16 -> float32 reduction that the optimizer unrolled by 2 along its reduce axis adds, per accumulator update, two
widened products of 16-lane bf16 vectors: acc + (f32(x0*y0) + f32(x1*y1)). vdpbf16ps computes, per float32 lane i,
acc[i] + a[2i]*b[2i] + a[2i+1]*b[2i+1] from 32-lane bf16 vectors, so with a = (x0, x1) and b = (y0, y1) interleaved lane by lane it
is that update in one instruction. The products are exact, where the plain path rounds each to bf16 before widening (the same
freedom a tensor core takes); the instruction treats bf16 denormals as zero. WMMA carries the operation (its third source is the
accumulator, which pm_wmma_accumulate folds in)."""
from __future__ import annotations
import os
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
  gate = UOp.vectorize(*[UOp.const(dtypes.bool, i < LANES) for i in range(2 * LANES)])
  return UOp(Ops.LOAD, w, (v.src[0].replace(src=v.src[0].src + (gate,)), UOp.const(w, 0.0)))

def _interleave(a: UOp, b: UOp) -> UOp:
  """The 32-lane operand (a[0], b[0], a[1], b[1], ...) of two 16-lane vectors. Two loads are read as full 32-lane registers
  first (_widened): LLVM widened each 16-lane load by a 256-bit broadcast load (vbroadcastf64x4) in front of the interleave's
  vpermt2w, which held a bf16 product at about 70% of the dot product's rate. One Zen 5 thread, CPU time, medians of 11: 1024^2
  324 -> 394 GFLOP/s, 2048^2 339 -> 402 (the kernel's IR with no interleave at all, a timing bound: 414)."""
  if (wa := _widened(a)) is not None and (wb := _widened(b)) is not None: a, b = wa, wb
  return UOp(Ops.VECTORIZE, a.dtype.scalar().vec(2 * LANES), tuple(v for i in range(LANES) for v in (a.gep(i), b.gep(i))))

def _pair(c0: UOp, c1: UOp, m0: UOp, m1: UOp) -> UOp | None:
  """f32(x0*y0) + f32(x1*y1) over 16-lane bf16 vectors -> one dot-product step with a zero accumulator."""
  bf, f32 = dtypes.bfloat16.vec(LANES), dtypes.float32.vec(LANES)
  if not (m0.dtype == m1.dtype == bf and c0.dtype == c1.dtype == f32): return None
  return UOp(Ops.WMMA, f32, (_interleave(m0.src[0], m1.src[0]), _interleave(m0.src[1], m1.src[1]), UOp.const(f32, 0.0)), DOT)

pm_bf16_dot = PatternMatcher([
  (UPat(Ops.ADD, src=(UPat(Ops.CAST, name="c0", src=(UPat(Ops.MUL, name="m0"),)), UPat(Ops.CAST, name="c1", src=(UPat(Ops.MUL, name="m1"),)))),
   _pair),
]) + pm_wmma_accumulate

def render_dot(ctx: object, x: UOp) -> str | None:
  """The LLVM call of one dot-product step (the renderer declares the intrinsic when the kernel uses it)."""
  if x.arg != DOT: return None
  a, b, c = (ctx[s] for s in x.src)  # type: ignore[index]
  ctx.declares[DECLARE] = None  # type: ignore[attr-defined]
  return f"{ctx[x]} = call <16 x float> @{INTRINSIC}(<16 x float> {c}, <32 x bfloat> {a}, <32 x bfloat> {b})"  # type: ignore[index]
