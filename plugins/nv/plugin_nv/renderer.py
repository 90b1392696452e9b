"""The NV renderers: PTX (LLVM IR for nvptx64-nvidia-cuda: ptx_kernel ABI, %tid/%ctaid, shared memory, bar.sync) and CUDA C, per SM arch."""
from __future__ import annotations
import copy, dataclasses, math
from core.helpers import prod
from core.ir.dtype import DType, dtypes
from core.ir.ops import UOp, Ops
from core.device.renderer import id_sizes
from core.ir.pattern import UPat, PatternMatcher
from core.codegen.decompose import fast_exp2, fast_log2
from core.codegen.lowerer import pm_fuse_mulacc
from core.codegen.llvm_ir import LLVMRenderer, llvm_rewrite
from core.codegen.c_style import CStyleRenderer, base_rewrite, c_code_for_op
from core.device.tensor_core import TENSOR_CORES, tensor_core

TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_90"

@dataclasses.dataclass(frozen=True)
class ArchInfo:
  """What differs between the SM generations this plugin targets. sm: the number ptxas writes into the cubin's e_flags
  (major * 10 + minor). ptx: the LLVM NVPTX feature naming the PTX ISA version (the PTX ISA's "Target ISA Notes": sm_80..sm_90
  need PTX 7.0..7.8, sm_100 8.6, sm_120 8.7; 8.0 is the common floor here so half/bfloat instructions are all available).
  family: "ampere" | "ada" | "hopper" | "blackwell" (the QMD layout follows it)."""
  name: str
  sm: int
  ptx: str
  family: str

ARCHS: dict[str, ArchInfo] = {a.name: a for a in (
  ArchInfo("sm_80", 80, "+ptx80", "ampere"),
  ArchInfo("sm_86", 86, "+ptx80", "ampere"),
  ArchInfo("sm_89", 89, "+ptx80", "ada"),
  ArchInfo("sm_90", 90, "+ptx80", "hopper"),
  ArchInfo("sm_100", 100, "+ptx86", "blackwell"),
  ArchInfo("sm_120", 120, "+ptx87", "blackwell"),
)}

def arch_info(arch: str | None) -> ArchInfo:
  """The ArchInfo for `arch` (None: the default sm_90); an arch this plugin does not target is a clear ValueError."""
  name = arch or DEFAULT_ARCH
  if name not in ARCHS:
    raise ValueError(f"NV arch {name!r} is not supported: choose one of {', '.join(ARCHS)} (e.g. DEV=NULL:NV:PTX:{DEFAULT_ARCH})")
  return ARCHS[name]

# *** transcendentals: the GPU has no libm, and LLVM's NVPTX backend aborts the process on llvm.sin/pow/log2 (and f64 exp2) ***

def _poly(x: UOp, coeffs: list[float]) -> UOp:
  """The polynomial at x (highest power first) in fused multiply-adds."""
  acc = x.const_like(coeffs[0])
  for c in coeffs[1:]: acc = UOp(Ops.MULACC, x.dtype, (acc, x, x.const_like(c)))
  return acc

_LN2 = 0.6931471805599453
_ROUND64 = 6755399441055744.0   # 1.5 * 2**52: y + _ROUND64 - _ROUND64 rounds |y| < 2**51 to an integer (ties to even)
# 2**f = e**(f ln 2) for |f| <= 1/2: Taylor to degree 13 (the next term is < 5e-18)
_EXP2_F64 = [_LN2 ** k / math.factorial(k) for k in range(13, -1, -1)]
# log2((1+t)/(1-t)) = (2/ln2)(t + t^3/3 + ...) for |t| <= 0.1716, in powers of t*t to t^25; constant term less 2 (t*2 is exact)
_LOG2_F64 = [2 / _LN2 / k for k in range(25, 1, -2)] + [2 / _LN2 - 2]
# sin r = r + r^3 * S(r^2), cos r = 1 - r^2/2 + r^4 * C(r^2) on |r| <= pi/4: Taylor to r^17 and r^18 (next terms < 3e-18)
_SIN_F64 = [(-1) ** ((k - 1) // 2) / math.factorial(k) for k in range(17, 1, -2)]
_COS_F64 = [(-1) ** (k // 2) / math.factorial(k) for k in range(18, 3, -2)]
# pi/2 in three doubles (Cody-Waite): P1 + P2 + P3 is pi/2 to about 2**-160, so k * (P1 + P2 + P3) stays exact where it matters
_PIO2 = (1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33)

def _pow2_f64(n: UOp) -> UOp:
  """2**n as float64 for int64 n with -1022 <= n <= 1023, built from the exponent bits."""
  return ((n + 1023) << 52).bitcast(dtypes.float64.vec(n.dtype.count))

def exp2_f64(x: UOp) -> UOp:
  # the same scheme as core's float32 fast_exp2: n = round(x), 2**(x-n) by polynomial, 2**n from the bits in two normal factors
  i64 = dtypes.int64.vec(x.dtype.count)
  nan = x.ne(x)
  xc = nan.where(0.0, x)
  xc = (xc < -1080.0).where(-1080.0, xc)
  xc = (xc > 1025.0).where(1025.0, xc)
  r = xc + _ROUND64
  n = r - _ROUND64
  ni = r.bitcast(i64) - 0x4338000000000000   # the integer in the low mantissa bits of r
  h = ni >> 1
  return nan.where(x, _poly(xc - n, _EXP2_F64) * _pow2_f64(h) * _pow2_f64(ni - h))

def log2_f64(x: UOp) -> UOp:
  # exponent from the bits, mantissa m in [sqrt(2)/2, sqrt(2)), log2(m) by the atanh series of t = (m-1)/(m+1)
  i64, f64 = dtypes.int64.vec(x.dtype.count), dtypes.float64.vec(x.dtype.count)
  sub = x < 2.2250738585072014e-308   # subnormal (or zero/negative, handled below): scaled into the normals first
  bits = sub.where(x * 2.0 ** 54, x).bitcast(i64)
  e = ((bits >> 52) & 0x7FF) - sub.where(UOp.const(i64, 1023 + 54), UOp.const(i64, 1023))
  m = ((bits & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000).bitcast(f64)
  big = m > 1.4142135623730951
  m, e = big.where(m * 0.5, m), big.where(e + 1, e)
  t = (m - 1.0) / (m + 1.0)
  res = e.cast(f64) + (t * 2.0 + t * _poly(t * t, _LOG2_F64))
  res = (x.ne(x) | (x < 0.0)).where(x.const_like(math.nan), res)
  res = x.ne(0.0).where(res, x.const_like(-math.inf))
  return x.ne(math.inf).where(res, x)

def sin_f64(x: UOp) -> UOp:
  # k = round(x * 2/pi), r = x - k*pi/2 with fused multiply-adds, then sin or cos of r by the quadrant k mod 4. Accurate while k
  # fits the three-part pi/2 (|x| up to about 2**30); beyond that the reduction loses bits (a known limit, as in most GPU libms)
  i32 = dtypes.int32.vec(x.dtype.count)
  finite = (x < math.inf) & (x > -math.inf)   # false for NaN too
  xc = finite.where(x, 0.0)
  k = (xc * (2 / math.pi) + _ROUND64) - _ROUND64
  r = xc
  for p in _PIO2: r = UOp(Ops.MULACC, x.dtype, (k, k.const_like(-p), r))
  q = (k - (k * 0.25).trunc() * 4.0).cast(i32)   # k mod 4 in (-4, 4); & 3 below makes it 0..3
  r2 = r * r
  s = r + r * r2 * _poly(r2, _SIN_F64)
  c = (1.0 - r2 * 0.5) + r2 * r2 * _poly(r2, _COS_F64)
  v = (q & 1).ne(0).where(c, s)
  v = (q & 2).ne(0).where(-v, v)
  return finite.where(v, x.const_like(math.nan))

def pow_via_exp2(x: UOp) -> UOp:
  # C's pow for the cases Tensor.pow does not handle itself (it decomposes before codegen): sign for integer exponents, NaN else
  b, y = x.src
  mag = (y * b.alu(Ops.MAX, -b).log2()).exp2()
  y_int = y.trunc().eq(y)
  y_odd = y_int & (y * 0.5).trunc().ne(y * 0.5)
  ret = (b < 0.0).where(y_int.where(y_odd.where(-mag, mag), x.const_like(math.nan)), mag)
  return y.eq(0.0).where(x.const_like(1.0), ret)

def _in(x: UOp, dt: DType) -> UOp:
  """x's op computed in `dt` (same vector width), cast back to x's dtype."""
  wide = dt.vec(x.dtype.count)
  return UOp(x.op, wide, tuple(s.cast(wide) for s in x.src)).cast(x.dtype)

def _is(*dts: DType):  # noqa: ANN202
  return lambda x: x.dtype.scalar() in dts

pm_nv_math = PatternMatcher([
  # half and bfloat16 through float32 (ex2.approx.f16 is an approximation; log2/sin/pow have no half instruction at all)
  (UPat((Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW), name="x", custom=_is(dtypes.float16, dtypes.bfloat16)), lambda x: _in(x, dtypes.float32)),
  (UPat(Ops.POW, name="x", custom=_is(dtypes.float32, dtypes.float64)), pow_via_exp2),
  (UPat(Ops.EXP2, name="x", custom=_is(dtypes.float32)), lambda x: fast_exp2(x.src[0])),
  (UPat(Ops.LOG2, name="x", custom=_is(dtypes.float32)), lambda x: fast_log2(x.src[0])),
  # float32 sin through the float64 one: a correctly reduced argument matters more here than the f64 rate
  (UPat(Ops.SIN, name="x", custom=_is(dtypes.float32)), lambda x: _in(x, dtypes.float64)),
  (UPat(Ops.EXP2, name="x", custom=_is(dtypes.float64)), lambda x: exp2_f64(x.src[0])),
  (UPat(Ops.LOG2, name="x", custom=_is(dtypes.float64)), lambda x: log2_f64(x.src[0])),
  (UPat(Ops.SIN, name="x", custom=_is(dtypes.float64)), lambda x: sin_f64(x.src[0])),
], name="nv transcendentals")

# the intrinsics NVPTX lowers to exact instructions (sqrt.rn, cvt.rzi, fma.rn); anything else must be decomposed by pm_nv_math
_NATIVE = ("sqrt", "trunc", "fmuladd")

# *** tensor cores: mma.sync.aligned.m16n8k16.row.col.f32.<f16|bf16>.<f16|bf16>.f32 (sm_80 and later) ***
# Operands per lane (PTX ISA, "Matrix Fragments for mma.m16n8k16"): A is four .b32 registers of two elements each (the lower
# element in the low half), B two, C and D four .f32. core.device.tensor_core describes which matrix element each one is.

def _ptx_wmma(ctx: PTXRenderer, x: UOp) -> str:
  tc = tensor_core(x.arg)
  a, b, c = x.src
  ein, lines, args = ctx.ty(a.dtype.scalar()), [], []   # args: (LLVM type, value) of the intrinsic's operands
  for src in (a, b):
    for i in range(src.dtype.count // 2):
      pair = ctx.tmp()
      lines.append(f"{pair} = shufflevector {ctx.ty(src.dtype)} {ctx[src]}, {ctx.ty(src.dtype)} poison, <2 x i32> <i32 {2 * i}, i32 {2 * i + 1}>")
      if tc.dtype_in is dtypes.float16: args.append(("<2 x half>", pair))
      else:   # the bf16 intrinsic takes the pairs as i32
        word = ctx.tmp()
        lines.append(f"{word} = bitcast <2 x {ein}> {pair} to i32")
        args.append(("i32", word))
  for i in range(c.dtype.count):
    e = ctx.tmp()
    lines.append(f"{e} = extractelement <4 x float> {ctx[c]}, i32 {i}")
    args.append(("float", e))
  fn = "@llvm.nvvm.mma.m16n8k16.row.col.f32.f32" if tc.dtype_in is dtypes.float16 else "@llvm.nvvm.mma.m16n8k16.row.col.bf16"
  res = "{float, float, float, float}"
  ctx.declares[f"declare {res} {fn}({', '.join(t for t, _ in args)})"] = None
  d, cur = ctx.tmp(), "poison"
  lines.append(f"{d} = call {res} {fn}({', '.join(f'{t} {v}' for t, v in args)})")
  for i in range(4):
    e, nxt = ctx.tmp(), (ctx[x] if i == 3 else ctx.tmp())
    lines += [f"{e} = extractvalue {res} {d}, {i}", f"{nxt} = insertelement <4 x float> {cur}, float {e}, i32 {i}"]
    cur = nxt
  return "\n  ".join(lines)

def _cuda_wmma(ctx: CUDARenderer, x: UOp) -> str:
  tc = tensor_core(x.arg)
  name = f"core_mma_m16n8k16_{tc.dtype_in.name}"
  if name not in ctx.wmma_defs:
    t = "f16" if tc.dtype_in is dtypes.float16 else "bf16"
    bits = "__half_as_ushort" if tc.dtype_in is dtypes.float16 else "__bfloat16_as_ushort"
    ta, tb = ctx.render_dtype(x.src[0].dtype), ctx.render_dtype(x.src[1].dtype)
    # each .b32 register: two elements, the first in the low half
    pack = lambda v, n: [f"(unsigned)({bits}({v}.v[{2 * i}]))|((unsigned)({bits}({v}.v[{2 * i + 1}]))<<16)" for i in range(n)]  # noqa: E731
    regs = pack("a", 4) + pack("b", 2)
    ctx.wmma_defs[name] = (
      f"__device__ __forceinline__ floatx4 {name}({ta} a, {tb} b, floatx4 c) {{\n"
      f"  unsigned r[6] = {{{', '.join(regs)}}};\n  floatx4 d;\n"
      f"  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%10,%11,%12,%13}};\"\n"
      f"    : \"=f\"(d.v[0]), \"=f\"(d.v[1]), \"=f\"(d.v[2]), \"=f\"(d.v[3])\n"
      f"    : \"r\"(r[0]), \"r\"(r[1]), \"r\"(r[2]), \"r\"(r[3]), \"r\"(r[4]), \"r\"(r[5]), "
      f"\"f\"(c.v[0]), \"f\"(c.v[1]), \"f\"(c.v[2]), \"f\"(c.v[3]));\n  return d;\n}}")
  return f"{name}({ctx[x.src[0]]}, {ctx[x.src[1]]}, {ctx[x.src[2]]})"

class PTXRenderer(LLVMRenderer):
  """One kernel as a `ptx_kernel` function: buffers are `ptr addrspace(1)`, DEFINE_LOCAL is `.shared` (addrspace 3),
  gidx = %ctaid, lidx = %tid, BARRIER = bar.sync 0. The compiler turns the IR into PTX and ptxas the PTX into a cubin."""
  device = "NV"
  suffix = "PTX"
  target_triple = TRIPLE
  kernel_cconv = "ptx_kernel "
  global_addrspace = 1
  local_addrspace = 3
  private_addrspace = 0   # NVPTX allocas live in the generic space and are promoted to .local by LLVM itself
  aligned_params = True
  has_local = True
  has_shared = True
  # grid: 2^31-1 blocks in x, 65535 in y and z; a block: 1024 threads, z at most 64 (CUDA's compute capability table)
  global_max = (2**31 - 1, 65535, 65535)
  local_max = (1024, 1024, 64)
  shared_max = 48 * 1024   # static shared memory per block; more needs a dynamic opt-in the launch does not make
  supports_float4 = True
  supported_dtypes = frozenset((dtypes.bool,) + dtypes.ints + (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64))
  extra_matcher = pm_fuse_mulacc + pm_nv_math
  string_rewrite = PatternMatcher([(UPat(Ops.WMMA, name="x"), _ptx_wmma)]) + llvm_rewrite
  tensor_cores = TENSOR_CORES["NV"]   # every arch here is sm_80 or later: mma.sync m16n8k16 for half and bfloat16

  def __init__(self, arch: str | None = None):
    self.info = arch_info(arch)
    self.arch = self.info.name

  def function_attrs(self, name: str, uops: list[UOp]) -> str:
    # .reqntid: the block size the kernel is built for; ptxas sizes registers by it and the launch must match it
    local = id_sizes(uops, "lidx")
    if prod(local) > 1024 or any(n > m for n, m in zip(local, self.local_max)):
      raise ValueError(f"kernel {name}: a block of {'x'.join(map(str, local))} threads; NV allows 1024 in all, at most {self.local_max}")
    return f'nounwind "nvvm.reqntid"="{local[0]},{local[1]},{local[2]}"'

  def special_intrinsic(self, x: UOp) -> str:
    return f"@llvm.nvvm.read.ptx.sreg.{'ctaid' if x.arg.startswith('gidx') else 'tid'}.{'xyz'[int(x.arg[-1])]}"

  def render_barrier(self) -> str:
    # bar.sync orders the block's shared and global memory accesses as well as its threads (PTX ISA, "bar, barrier")
    self.declares["declare void @llvm.nvvm.barrier0()"] = None
    return "call void @llvm.nvvm.barrier0()"

  def intrinsic(self, fn: str, dt: DType, nargs: int) -> str:
    if fn not in _NATIVE:
      raise NotImplementedError(f"PTXRenderer: llvm.{fn} of {self.ty(dt)} has no NVPTX lowering (LLVM would abort); pm_nv_math decomposes it")
    return super().intrinsic(fn, dt, nargs)

# *** the CUDA renderer: CUDA C through core's C-style renderer, compiled by NVRTC ***

def _cuda_math(f32: str, f64: str):  # noqa: ANN202
  # CUDA's device math library (libdevice): float and double versions; half and bfloat16 compute in float, rounded back once
  return lambda x, dt: f"{f64}({x})" if dt.scalar() is dtypes.float64 else f"{f32}({x})" if dt.scalar() is dtypes.float32 \
    else f"{f32}((float)({x}))"

def _cuda_pow(a: str, b: str, dt: DType) -> str:
  return f"pow({a},{b})" if dt.scalar() is dtypes.float64 else f"powf({a},{b})" if dt.scalar() is dtypes.float32 \
    else f"powf((float)({a}),(float)({b}))"

def _cuda_mulacc(a: str, b: str, c: str, dt: DType) -> str:
  # one rounding, as the PTX renderer's fma.rn; NVRTC runs with --fmad=false, so nothing else is fused behind our back
  return f"fmaf({a},{b},{c})" if dt.scalar() is dtypes.float32 else f"fma({a},{b},{c})" if dt.scalar() is dtypes.float64 \
    else f"(({a}*{b})+{c})"

cuda_code_for_op = {**c_code_for_op, Ops.SQRT: _cuda_math("sqrtf", "sqrt"), Ops.EXP2: _cuda_math("exp2f", "exp2"),
                    Ops.LOG2: _cuda_math("log2f", "log2"), Ops.SIN: _cuda_math("sinf", "sin"), Ops.TRUNC: _cuda_math("truncf", "trunc"),
                    Ops.POW: _cuda_pow, Ops.MULACC: _cuda_mulacc}

# the conversions to half/bfloat16 that round once: 32-bit ints are exact in double, 64-bit ints have their own intrinsics
_TO_NARROW = {dtypes.float16: ("__double2half", "__ll2half_rn", "__ull2half_rn"),
              dtypes.bfloat16: ("__double2bfloat16", "__ll2bfloat16_rn", "__ull2bfloat16_rn")}

class CUDARenderer(CStyleRenderer):
  """One kernel as `extern "C" __global__ void __launch_bounds__(<threads>) name(...)`: gidx = blockIdx, lidx = threadIdx,
  DEFINE_LOCAL is `__shared__`, BARRIER is `__syncthreads()`, half and bfloat16 are cuda_fp16.h's `half` and cuda_bf16.h's
  `__nv_bfloat16`. NVRTCCompiler turns the source into a cubin for the arch."""
  device = "NV"
  suffix = "CUDA"
  kernel_prefix = 'extern "C" __global__ '
  buffer_suffix = " __restrict__"
  arg_int_prefix = "const int"
  smem_prefix = "__shared__ __align__(16) "
  barrier = "__syncthreads();"
  infinity = "__int_as_float(0x7f800000)"
  nan = "__int_as_float(0x7fffffff)"
  type_map = {**CStyleRenderer.type_map, dtypes.bool: "bool", dtypes.float16: "half", dtypes.bfloat16: "__nv_bfloat16"}
  code_for_op = cuda_code_for_op
  # vectors are structs here (NVCC has no GCC vector extensions): every vector ALU op is rendered lane by lane
  vector_alu: frozenset[Ops] = frozenset()
  has_local = True
  has_shared = True
  global_max = PTXRenderer.global_max
  local_max = PTXRenderer.local_max
  shared_max = PTXRenderer.shared_max
  supports_float4 = True
  supported_dtypes = PTXRenderer.supported_dtypes
  extra_matcher = pm_fuse_mulacc
  string_rewrite = PatternMatcher([(UPat(Ops.WMMA, name="x"), _cuda_wmma)]) + base_rewrite
  tensor_cores = TENSOR_CORES["NV"]
  wmma_defs: dict[str, str] = {}        # per render: the mma.sync helper functions the kernel calls
  threads_per_block = 1                  # per render: the block size __launch_bounds__ names
  dts: frozenset[DType] = frozenset()    # per render: the scalar dtypes the kernel touches (which headers it includes)

  def __init__(self, arch: str | None = None):
    self.info = arch_info(arch)
    self.arch = self.info.name

  def render_vector_prefix(self, dt: DType) -> str:
    # aligned to the scalar, as core's C vectors: a vector access through a pointer of the element type need not be wider-aligned
    return f"struct __align__({dt.scalar().itemsize}) {self.render_dtype(dt)} {{ {self.render_dtype(dt.scalar())} v[{dt.count}]; }};"
  def render_vectorize(self, xs: list[str], dt: DType) -> str:
    s = self.render_dtype(dt.scalar())
    return f"{self.render_dtype(dt)}{{{{{','.join(f'({s})({x})' for x in xs)}}}}}"
  def render_gep(self, x: str, i: int, from_dt: DType) -> str: return f"{x}.v[{i}]"

  def render_cast(self, dt: DType, from_dt: DType, x: str) -> str:
    if dt.count > 1: return super().render_cast(dt, from_dt, x)
    narrow = (dtypes.float16, dtypes.bfloat16)
    if from_dt in narrow and dt is not from_dt: return f"(({self.render_dtype(dt)})((float)({x})))"   # half/bf16 -> float is exact
    if dt in narrow and dt is not from_dt:
      via_double, from_ll, from_ull = _TO_NARROW[dt]
      if from_dt in (dtypes.int64, dtypes.index): return f"{from_ll}({x})"
      if from_dt is dtypes.uint64: return f"{from_ull}({x})"
      if from_dt is dtypes.float32: return f"(({self.render_dtype(dt)})({x}))"
      return f"{via_double}((double)({x}))"   # double itself, 32-bit and smaller ints, bool: exact in double, one rounding
    return super().render_cast(dt, from_dt, x)

  def render_bitcast(self, dt: DType, from_dt: DType, x: str) -> str:
    return f"core_bitcast<{self.render_dtype(dt)}, {self.render_dtype(from_dt)}>({x})"

  def render_special(self, x: UOp) -> str: return f"{'blockIdx' if x.arg.startswith('gidx') else 'threadIdx'}.{'xyz'[int(x.arg[-1])]}"

  def render(self, name: str, uops: list[UOp]) -> str:
    local = id_sizes(uops, "lidx")
    if prod(local) > 1024 or any(n > m for n, m in zip(local, self.local_max)):
      raise ValueError(f"kernel {name}: a block of {'x'.join(map(str, local))} threads; NV allows 1024 in all, at most {self.local_max}")
    ctx = copy.copy(self)
    ctx.threads_per_block, ctx.wmma_defs = prod(local), {}
    ctx.dts = frozenset(dt.base.scalar() for u in uops for dt in (u.dtype, *(s.dtype for s in u.src)))
    return CStyleRenderer.render(ctx, name, uops)

  def render_kernel(self, name: str, bufs: list[UOp], vars_: list[UOp], prefix: list[str], body: list[str]) -> str:
    head = (["#include <cuda_fp16.h>"] if dtypes.float16 in self.dts else []) + (["#include <cuda_bf16.h>"] if dtypes.bfloat16 in self.dts else [])
    # bit casts through memcpy: defined behaviour for any pair of same-sized types, and NVRTC turns it into a register move
    if any("core_bitcast<" in ln for ln in body):
      head.append("template <class T, class F> __device__ __forceinline__ T core_bitcast(F x) { T y; memcpy(&y, &x, sizeof(T)); return y; }")
    src = super().render_kernel(name, bufs, vars_, head + prefix + list(self.wmma_defs.values()), body)
    return src.replace(f'{self.kernel_prefix}void {name}(', f'{self.kernel_prefix}void __launch_bounds__({self.threads_per_block}) {name}(', 1)
