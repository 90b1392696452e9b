"""The MSL renderer: Metal Shading Language through core's C-style renderer (kernel functions, address spaces, [[buffer(n)]])."""
from __future__ import annotations
import copy
from typing import Any
from core.helpers import prod
from core.ir.dtype import DType, PtrDType, AddrSpace, dtypes
from core.ir.ops import UOp, Ops
from core.device.renderer import id_sizes
from core.ir.pattern import UPat, PatternMatcher
from core.codegen.c_style import CStyleRenderer, access_condition, base_rewrite, c_code_for_op, load_alternative
from core.device.tensor_core import TENSOR_CORES, tensor_core

def _msl_math(fn: str):  # noqa: ANN202
  # metal::precise:: gives the correctly rounded (or libm-grade) result whatever the compile options; half and bfloat compute in
  # float and are rounded back once by the caller's cast (wrap_narrow)
  return lambda x, dt: f"precise::{fn}({x})" if dt.scalar() is dtypes.float32 else f"precise::{fn}((float)({x}))"

def _msl_pow(a: str, b: str, dt: DType) -> str:
  return f"precise::pow({a},{b})" if dt.scalar() is dtypes.float32 else f"precise::pow((float)({a}),(float)({b}))"

def _msl_trunc(x: str, dt: DType) -> str: return f"trunc({x})" if dt.scalar() is dtypes.float32 else f"trunc((float)({x}))"

msl_code_for_op = {**c_code_for_op, Ops.SQRT: _msl_math("sqrt"), Ops.EXP2: _msl_math("exp2"), Ops.LOG2: _msl_math("log2"),
                   Ops.SIN: _msl_math("sin"), Ops.TRUNC: _msl_trunc, Ops.POW: _msl_pow}

def _msl_load(ctx: MetalRenderer, x: UOp) -> str:
  # a masked load picks between memory and a value: both sides are made thread values of the type first, or the operands of ?:
  # would be of different address spaces (device T and thread T)
  idx = x.src[0]
  ptr = ctx.render_vec_ptr(idx, x.dtype)
  if (cond := access_condition(ctx, idx, x.dtype.itemsize, ptr)) is None: return f"(*{ptr})"
  t = ctx.render_dtype(x.dtype)
  return f"({cond}?({t})(*{ptr}):({t})({load_alternative(ctx, x)}))"

def _msl_wmma(ctx: MetalRenderer, x: UOp) -> str:
  # simdgroup_matrix 8x8: each thread's two elements of A, B and C go in through thread_elements(), D comes out the same way
  tc = tensor_core(x.arg)
  t = ctx.render_dtype(tc.dtype_in)
  name = f"core_simdgroup_mma_{t}"
  if name not in ctx.wmma_defs:
    ta, tb, tc_ = (ctx.render_dtype(s.dtype) for s in x.src)
    ctx.wmma_defs[name] = "\n".join([
      f"inline {tc_} {name}({ta} a, {tb} b, {tc_} c) {{",
      f"  simdgroup_{t}8x8 ma, mb;", "  simdgroup_float8x8 mc;",
      *[f"  m{v}.thread_elements()[{i}] = {v}.v[{i}];" for v in "abc" for i in range(2)],
      "  simdgroup_multiply_accumulate(mc, ma, mb, mc);",
      f"  return {tc_}{{{{mc.thread_elements()[0], mc.thread_elements()[1]}}}};", "}"])
  return f"{name}({ctx[x.src[0]]}, {ctx[x.src[1]]}, {ctx[x.src[2]]})"

# the thread-position arguments every kernel takes (Metal fills them from the attribute, the MOCK passes them in this order)
GROUP_ARG, LOCAL_ARG = "gid", "lid"

class MetalRenderer(CStyleRenderer):
  """One kernel as `kernel void name(device T* data0 [[buffer(0)]], ..., constant int& var [[buffer(n)]], uint3 gid
  [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]])`. Buffers bind in argument order, then the
  variables, each its own [[buffer(n)]]. Vectors are structs of the scalar (aligned like it: a vector access through an element
  pointer needs no wider alignment), so every vector op is rendered lane by lane. No double: Metal has none."""
  device = "METAL"
  suffix = "MSL"
  kernel_prefix = "kernel "
  buffer_prefix = "device "
  buffer_suffix = ""
  arg_int_prefix = "constant int&"
  smem_prefix = "threadgroup "
  barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);"
  infinity = "INFINITY"
  nan = "NAN"
  type_map = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short", dtypes.uint16: "ushort",
              dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong", dtypes.float16: "half",
              dtypes.bfloat16: "bfloat", dtypes.float32: "float", dtypes.void: "void", dtypes.index: "long"}
  code_for_op = msl_code_for_op
  string_rewrite = PatternMatcher([(UPat(Ops.LOAD, name="x"), _msl_load), (UPat(Ops.WMMA, name="x"), _msl_wmma)]) + base_rewrite
  tensor_cores = TENSOR_CORES["METAL"]   # simdgroup_half8x8 / simdgroup_float8x8, float accumulate
  wmma_defs: dict[str, str] = {}         # per render: the simdgroup helper functions the kernel calls
  vector_alu: frozenset[Ops] = frozenset()
  has_local = True
  has_shared = True
  # threadgroups per grid are 32-bit per dimension; a threadgroup holds at most 1024 threads, 32 KiB of threadgroup memory
  global_max = (2**31 - 1, 65535, 65535)
  local_max = (1024, 1024, 1024)
  shared_max = 32 * 1024
  supports_float4 = True
  supported_dtypes = frozenset((dtypes.bool,) + dtypes.ints + (dtypes.float16, dtypes.bfloat16, dtypes.float32))

  def __init__(self, arch: str | None = None): self.arch = arch

  def render_vector_prefix(self, dt: DType) -> str:
    return f"struct {self.render_dtype(dt)} {{ {self.render_dtype(dt.scalar())} v[{dt.count}]; }};"
  def render_vectorize(self, xs: list[str], dt: DType) -> str:
    s = self.render_dtype(dt.scalar())
    return f"{self.render_dtype(dt)}{{{{{','.join(f'({s})({x})' for x in xs)}}}}}"
  def render_gep(self, x: str, i: int, from_dt: DType) -> str: return f"{x}.v[{i}]"

  def buffer_prefix_for(self, pdt: DType) -> str:
    # every pointer in MSL names its address space; registers (DEFINE_REG) are `thread`, the default
    if not isinstance(pdt, PtrDType) or pdt.addrspace == AddrSpace.GLOBAL: return "device "
    return "threadgroup " if pdt.addrspace == AddrSpace.LOCAL else ""

  def render_cast(self, dt: DType, from_dt: DType, x: str) -> str:
    if dt.count > 1: return super().render_cast(dt, from_dt, x)
    # half/bfloat to anything goes through float (exact); 64-bit ints to half/bfloat through float round twice only beyond 2**24,
    # where float's 24 bits still hold more than half's 11 or bfloat's 8 bits plus the rounding bits
    if from_dt in (dtypes.float16, dtypes.bfloat16) and dt is not from_dt and dt is not dtypes.float32:
      return f"(({self.render_dtype(dt)})((float)({x})))"
    if dt in (dtypes.float16, dtypes.bfloat16) and from_dt not in (dtypes.float32, dt): return f"(({self.render_dtype(dt)})((float)({x})))"
    return super().render_cast(dt, from_dt, x)

  def render_const(self, v: Any, dt: DType) -> str:
    # 64-bit literals as `long`/`ulong` (suffixes l, ul): MSL has no `long long`, which the `ll` suffix would make
    if (s := dt.scalar()) in (dtypes.int64, dtypes.uint64, dtypes.index):
      v, suffix = int(v), "ul" if s is dtypes.uint64 else "l"
      return f"({v + 1}{suffix}-1)" if v == s.min and v < 0 else f"({v}{suffix})" if v < 0 else f"{v}{suffix}"
    return super().render_const(v, dt)

  def render_bitcast(self, dt: DType, from_dt: DType, x: str) -> str:
    # vectors are structs, which as_type does not take: lane by lane when the lanes match in size
    if dt.count > 1 and dt.count == from_dt.count:
      return self.render_vectorize([self.render_bitcast(dt.scalar(), from_dt.scalar(), self.render_gep(x, i, from_dt)) for i in range(dt.count)], dt)
    return f"as_type<{self.render_dtype(dt)}>({x})"

  def render_special(self, x: UOp) -> str: return f"{GROUP_ARG if x.arg.startswith('gidx') else LOCAL_ARG}.{'xyz'[int(x.arg[-1])]}"

  def render(self, name: str, uops: list[UOp]) -> str:
    local = id_sizes(uops, "lidx")
    if prod(local) > 1024: raise ValueError(f"kernel {name}: a threadgroup of {'x'.join(map(str, local))} threads; Metal allows 1024")
    ctx = copy.copy(self)
    ctx.wmma_defs = {}
    return CStyleRenderer.render(ctx, name, uops)

  def render_kernel(self, name: str, bufs: list[UOp], vars_: list[UOp], prefix: list[str], body: list[str]) -> str:
    args = [f"device {self.render_dtype(b.dtype.base)}* {self[b]} [[buffer({i})]]" for i, b in enumerate(bufs)]
    args += [f"{self.arg_int_prefix} {self[v]} [[buffer({len(bufs) + i})]]" for i, v in enumerate(vars_)]
    args += [f"uint3 {GROUP_ARG} [[threadgroup_position_in_grid]]", f"uint3 {LOCAL_ARG} [[thread_position_in_threadgroup]]"]
    head = ["#include <metal_stdlib>", "using namespace metal;"]
    return "\n".join(head + prefix + list(self.wmma_defs.values()) + [f"{self.kernel_prefix}void {name}({', '.join(args)}) {{"] + body + ["}"]) + "\n"
