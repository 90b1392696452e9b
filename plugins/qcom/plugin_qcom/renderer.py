"""OpenCL C through core's C-style renderer: `__kernel` functions over `__global` buffers, work-item functions, barriers,
and half either native (the device has cl_khr_fp16, as every Adreno does) or stored with vload_half/vstore_half and computed
in float (drivers without it, e.g. pocl on x86)."""
from __future__ import annotations
import copy, dataclasses, math, struct
from typing import Callable
from core.ir.dtype import DType, PtrDType, ImageDType, AddrSpace, dtypes
from core.ir.ops import UOp, Ops
from core.device.renderer import id_sizes
from core.ir.pattern import PatternMatcher, UPat
from core.codegen.access_guard import GUARD_PARAM
from core.codegen.c_style import CStyleRenderer, access_condition, base_rewrite, c_code_for_op
from core.codegen.lowerer import pm_fuse_mulacc
from core.helpers import prod

@dataclasses.dataclass(frozen=True)
class CLCaps:
  """What the OpenCL C a renderer writes may use: the device's half and double support and its work-group limits."""
  fp16: bool = True
  fp64: bool = False
  max_work_group: int = 1024
  max_work_items: tuple[int, int, int] = (1024, 1024, 1024)
  local_mem: int = 32 * 1024
  name: str = "a6xx"
  images: bool = True                        # 2-D images (CL_DEVICE_IMAGE_SUPPORT)
  image_max: tuple[int, int] = (16384, 16384)   # (width, height): CL_DEVICE_IMAGE2D_MAX_WIDTH/HEIGHT

# Adreno A6xx/A7xx as the Qualcomm OpenCL driver reports them: cl_khr_fp16, no cl_khr_fp64, 1024 work-items, 32 KiB local memory
ADRENO = CLCaps()

# vector lengths OpenCL C has types for (float2, float3, float4, float8, float16)
CL_VECTOR_COUNTS = (2, 3, 4, 8, 16)

def _cl_math(fn: str) -> Callable[[str, DType], str]:
  return lambda x, dt: f"{fn}({x})"

def _cl_mulacc(a: str, b: str, c: str, dt: DType) -> str:
  # fma rounds once, as the other backends' fused accumulator updates; integer and half updates stay a*b+c
  return f"fma({a},{b},{c})" if dt.scalar() in (dtypes.float32, dtypes.float64) else f"(({a}*{b})+{c})"

cl_code_for_op: dict[Ops, Callable[..., str]] = {**c_code_for_op, Ops.SQRT: _cl_math("sqrt"), Ops.EXP2: _cl_math("exp2"), Ops.LOG2: _cl_math("log2"),
                  Ops.SIN: _cl_math("sin"), Ops.TRUNC: _cl_math("trunc"), Ops.POW: lambda a, b, dt: f"pow({a},{b})",
                  Ops.MULACC: _cl_mulacc}

# half without cl_khr_fp16: values live in float registers; a half result is rounded to half precision through a
# vstore_half/vload_half pair on a private ushort (vstore_half rounds to nearest even), and bit casts go the same way
HALF_HELPERS = """inline float core_rh(float x) { ushort h; vstore_half(x, 0, (__private half*)&h); return vload_half(0, (__private half*)&h); }
inline ushort core_hbits(float x) { ushort h; vstore_half(x, 0, (__private half*)&h); return h; }
inline float core_bitsh(ushort h) { return vload_half(0, (__private half*)&h); }"""

def _emulated(ctx: OpenCLRenderer, dt: DType) -> bool: return dt.scalar() is dtypes.float16 and not ctx.caps.fp16

def _global(idx: UOp) -> bool: return isinstance(idx.dtype, PtrDType) and idx.dtype.addrspace == AddrSpace.GLOBAL

def _access(ctx: OpenCLRenderer, idx: UOp, dt: DType) -> tuple[str, str]:
  """(load expression, store template with {v}) of `dt` through INDEX `idx`: vloadN/vstoreN for vectors (only the scalar's
  alignment is needed), vload_half/vstore_half for emulated half in global memory, a plain dereference otherwise."""
  p, n = ctx[idx], dt.count
  if isinstance(idx.dtype, PtrDType) and idx.dtype.base.count > 1: return f"(*{p})", f"*{p} = {{v}};"   # an array of vectors
  if _emulated(ctx, dt) and _global(idx):
    s = "" if n == 1 else str(n)
    return f"vload_half{s}(0, {p})", f"vstore_half{s}({{v}}, 0, {p});"
  if n > 1:
    return f"vload{n}(0, {p})", f"vstore{n}({{v}}, 0, {p});"
  return f"(*{p})", f"*{p} = {{v}};"

# images: a nearest, unnormalized sampler clamping to the border (0), so a read outside the image gives 0 (core.codegen.image
# moves a gate whose alternative is 0 into the coordinates); half is read and written as half only with cl_khr_fp16
SAMPLER = "__constant sampler_t smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;"

def _image_access(ctx: OpenCLRenderer, idx: UOp, dt: DType) -> tuple[str, str]:
  sfx = "h" if dt.scalar() is dtypes.float16 and ctx.caps.fp16 else "f"
  img, xy = ctx[idx.src[0]], ctx[idx.src[1]]
  return f"read_image{sfx}({img}, smp, {xy})", f"write_image{sfx}({img}, {xy}, {{v}});"

def _render_load(ctx: OpenCLRenderer, x: UOp) -> str:
  idx = x.src[0]
  ld, _ = _image_access(ctx, idx, x.dtype) if isinstance(idx.src[0].dtype, ImageDType) else _access(ctx, idx, x.dtype)
  if (cond := access_condition(ctx, idx, x.dtype.itemsize)) is None: return ld
  alt = ctx[x.src[1]] if len(x.src) > 1 and x.src[1].dtype is not dtypes.void else ctx.render_const(0, x.dtype)
  return f"({cond}?{ld}:{alt})"

def _render_store(ctx: OpenCLRenderer, x: UOp) -> str:
  idx, val = x.src[0], x.src[1]
  st = (_image_access if isinstance(idx.src[0].dtype, ImageDType) else _access)(ctx, idx, val.dtype)[1].format(v=ctx[val])
  return f"if ({cond}) {st}" if (cond := access_condition(ctx, idx, val.dtype.itemsize)) is not None else st

cl_rewrite = PatternMatcher([
  (UPat(Ops.LOAD, name="x"), _render_load),
  (UPat(Ops.STORE, name="x"), _render_store),
]) + base_rewrite

class OpenCLRenderer(CStyleRenderer):
  """One kernel as `__kernel __attribute__((reqd_work_group_size(x,y,z))) void name(__global T* data0, ..., const int var0)`:
  gidx = get_group_id, lidx = get_local_id, DEFINE_LOCAL is `__local`, BARRIER is `barrier(CLK_LOCAL_MEM_FENCE)`. `caps` says
  whether half is native and double available (the CL interface reads them from the device; Adreno's are the default)."""
  device = "QCOM"
  suffix = "CL"
  kernel_prefix = "__kernel "
  buffer_prefix = "__global "
  buffer_suffix = " restrict"
  arg_int_prefix = "const int"
  smem_prefix = "__local "
  barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
  infinity = "INFINITY"
  nan = "NAN"
  type_map = {**CStyleRenderer.type_map, dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.uint16: "ushort",
              dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong", dtypes.float16: "half", dtypes.index: "long"}
  code_for_op = cl_code_for_op
  string_rewrite = cl_rewrite
  extra_matcher = pm_fuse_mulacc
  has_local = True
  has_shared = True
  supports_float4 = True
  global_max = (2**31 - 1, 65535, 65535)
  local: tuple[int, ...] = (1, 1, 1)        # per render: the work-group size reqd_work_group_size names
  dts: frozenset[DType] = frozenset()      # per render: the scalar dtypes the kernel touches (which pragmas it needs)
  written: frozenset[UOp] = frozenset()   # per render: the parameters the kernel stores to (write_only images)

  def __init__(self, caps: CLCaps = ADRENO, device: str = "QCOM"):
    self.caps, self.device, self.arch = caps, device, caps.name
    self.has_images, self.image_max = caps.images, caps.image_max   # type: ignore[misc]
    self.native_half = True   # core's bit-level emulation is for C compilers; OpenCL has vload_half/vstore_half
    self.local_max = caps.max_work_items[:3]   # type: ignore[misc]
    self.shared_max = caps.local_mem           # type: ignore[misc]
    self.supported_dtypes = frozenset((dtypes.bool,) + dtypes.ints + (dtypes.float16, dtypes.float32) +   # type: ignore[misc]
                                      ((dtypes.float64,) if caps.fp64 else ()))
    # half vector arithmetic is rendered lane by lane when each lane must be rounded back to half
    self.vector_alu_dtypes = CStyleRenderer.vector_alu_dtypes | ({dtypes.float16} if caps.fp16 else frozenset())   # type: ignore[misc]

  # *** types ***

  def render_dtype(self, dt: DType) -> str:
    if isinstance(dt, PtrDType):
      # bool has no defined size in OpenCL C, so bool buffers are uchar; emulated half stays `half*` (only vload_half reads it)
      # in global memory, float where local and register arrays hold the float values
      b = dt.base
      if b.scalar() is dtypes.bool: return "uchar*"
      if _emulated(self, b) and dt.addrspace == AddrSpace.GLOBAL: return "half*"
      return self.render_dtype(b) + "*"
    s = dt.scalar()
    if _emulated(self, s): s = dtypes.float32
    if dt.count > 1:
      if dt.count not in CL_VECTOR_COUNTS: raise NotImplementedError(f"OpenCL C has no {dt.count}-lane vector type ({dt})")
      return ("uchar" if s is dtypes.bool else self.type_map[s]) + str(dt.count)
    if s not in self.type_map: raise NotImplementedError(f"OpenCLRenderer has no OpenCL C type for {dt}")
    return self.type_map[s]

  def render_vector_prefix(self, dt: DType) -> str: return ""   # OpenCL C has vector types built in
  def render_vectorize(self, xs: list[str], dt: DType) -> str: return f"(({self.render_dtype(dt)})({','.join(xs)}))"
  def render_gep(self, x: str, i: int, from_dt: DType) -> str: return f"{x}.s{i:x}"

  def render_const(self, v: float | int | bool, dt: DType) -> str:
    if _emulated(self, dt):
      # the value a half holds, written as a float literal
      v = float(v)
      if not math.isnan(v) and not math.isinf(v): v = float(struct.unpack("<e", struct.pack("<e", v))[0]) if abs(v) < 65520 else math.copysign(math.inf, v)
      return super().render_const(v, dtypes.float32)
    return super().render_const(v, dt)

  def render_cast(self, dt: DType, from_dt: DType, x: str) -> str:
    if dt.count == 1 and (_emulated(self, dt) or _emulated(self, from_dt)) and dt is not from_dt:
      if _emulated(self, dt): return f"core_rh((float)({x}))"
      return f"(({self.render_dtype(dt)})({x}))"   # from half: the float value converts like the half would
    return super().render_cast(dt, from_dt, x)

  def render_bitcast(self, dt: DType, from_dt: DType, x: str) -> str:
    if _emulated(self, from_dt): return f"(({self.render_dtype(dt)})core_hbits({x}))"
    if _emulated(self, dt): return f"core_bitsh(as_ushort({x}))"
    return f"as_{self.render_dtype(dt)}({x})"

  def wrap_narrow(self, expr: str, dt: DType) -> str:
    if _emulated(self, dt): return f"core_rh({expr})"
    return super().wrap_narrow(expr, dt)

  def render_scalar_alu(self, op: Ops, srcs: list[str], src_dtypes: list[DType], dt: DType) -> str:
    return self.wrap_narrow(self.code_for_op[op](*srcs, dt), dt) if op is not Ops.WHERE or not _emulated(self, dt) else \
      self.code_for_op[op](*srcs, dt)

  def render_special(self, x: UOp) -> str:
    return f"({self.render_dtype(x.dtype)})get_{'group' if x.arg.startswith('gidx') else 'local'}_id({x.arg[-1]})"

  def param_name(self, p: UOp) -> str:
    # an image parameter names its shape and channel type, so the runtime can make the image from the buffer it is given
    if isinstance(d := p.dtype, ImageDType): return f"data{p.arg}_{d.shape[0]}x{d.shape[1]}{'h' if d.base is dtypes.float16 else 'f'}"
    return super().param_name(p)

  # *** the kernel ***

  def render(self, name: str, uops: list[UOp]) -> str:
    local = id_sizes(uops, "lidx")
    if prod(local) > self.caps.max_work_group or any(n > m for n, m in zip(local, self.caps.max_work_items)):
      raise ValueError(f"kernel {name}: a work-group of {'x'.join(map(str, local))} items; the device allows {self.caps.max_work_group} "
                       f"in all, at most {self.caps.max_work_items} per axis")
    ctx = copy.copy(self)
    ctx.local = tuple(local)
    ctx.dts = frozenset(dt.base.scalar() for u in uops for dt in (u.dtype, *(s.dtype for s in u.src)))
    ctx.written = frozenset(u.src[0].src[0] for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX) | {GUARD_PARAM}
    return CStyleRenderer.render(ctx, name, uops)

  def _const(self, b: UOp) -> str:
    # a global buffer the kernel never stores to is `const`: the CL interface reads that back (argument info) to know which
    # buffers a launch leaves unchanged, so an image it keeps of one stays current
    return "const " if b not in self.written and isinstance(b.dtype, PtrDType) and b.dtype.addrspace == AddrSpace.GLOBAL else ""

  def render_kernel(self, name: str, bufs: list[UOp], vars_: list[UOp], prefix: list[str], body: list[str]) -> str:
    # OpenCL C may fuse a*b+c on its own (FP_CONTRACT defaults on): off, so only MULACC (fma) rounds once, as on every backend
    head = ["#pragma OPENCL FP_CONTRACT OFF"]
    if dtypes.float16 in self.dts: head.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable" if self.caps.fp16 else HALF_HELPERS)
    if dtypes.float64 in self.dts: head.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    if images := [b for b in bufs if isinstance(b.dtype, ImageDType)]: head.append(SAMPLER)
    args = [f"{'write_only' if b in self.written else 'read_only'} image2d_t {self[b]}" if b in images else
            f"{self.buffer_prefix_for(b.dtype)}{self._const(b)}{self.render_dtype(b.dtype)}{self.buffer_suffix} {self[b]}" for b in bufs]
    args += [f"{self.arg_int_prefix} {self[v]}" for v in vars_]
    attr = "__attribute__((reqd_work_group_size({},{},{}))) ".format(*self.local)
    return "\n".join(head + prefix + [f"{self.kernel_prefix}{attr}void {name}({', '.join(args)}) {{"] + body + ["}"]) + "\n"
