"""The WGSL renderer: a linearized kernel as one WebGPU compute shader, built on core's C-style renderer.

What WGSL lacks and how each gap is closed here:
- 8- and 16-bit integers and bool have no storage type: their buffers are arrays of u32 words, four bytes (two halves) a
  word. A kernel that stores into such a buffer declares it `array<atomic<u32>>` and writes an element with atomicAnd (clear
  its bits) then atomicOr (set them), so threads writing neighbouring elements of one word never lose each other's bytes.
  In registers they are i32/u32 values wrapped to their width after each operation, as C's integer promotion does.
- f16 is `enable f16;` where the adapter has shader-f16; elsewhere float16 is not a supported dtype.
- int64 and uint64 do not exist in WGSL: a value is a `vec2<u32>` and every operation a helper in 32-bit arithmetic
  (wide.py). float64 can't be emulated at a useful cost: it is left out of `supported_dtypes`, so kernels in it are refused
  and core's conformance suite skips them with "unsupported: float64".
- WGSL lets a compiler assume floats are never NaN or infinite: NaN tests are bit tests on the float's bits, `!=` is
  `!(a == b)` (false for NaN under either assumption), MAX picks NaN by a bit test, and NaN/inf constants are made from their
  bits at run time (a NaN or inf constant expression is a shader-creation error).
- A kernel may use at most the adapter's storage buffers per stage (`max_storage_buffers`): more is a clear error.

Buffers arrive as bindings 0..n-1 (each at an offset the runtime aligns down to the adapter's storage offset alignment); the
binding after them is a uniform of u32 words: first each kernel variable, then each buffer's element offset past its binding
offset. The first line of the shader is `// core-meta {json}`: what the runtime and the export need to bind and dispatch it."""
from __future__ import annotations
import json, math, struct
from typing import Any, Callable
from core.helpers import prod
from core.ir.dtype import DType, PtrDType, dtypes
from core.ir.ops import UOp, Ops
from core.device.renderer import id_sizes
from core.ir.pattern import UPat, PatternMatcher
from core.codegen.c_style import CStyleRenderer, base_rewrite, c_code_for_op
from core.codegen.decompose import fast_log2
from plugin_webgpu.wide import HELPERS_WIDE, WIDE_TYPE, is_wide, wide_alu, wide_cast, wide_const

META = "// core-meta "
MAX_WORKGROUPS = 65535   # WebGPU's default (and portable) maxComputeWorkgroupsPerDimension
# WebGPU's default limits: what a shader built without an adapter (DEV=NULL:WEBGPU) may assume
DEFAULT_LIMITS = {"max-storage-buffers-per-shader-stage": 8, "max-storage-buffer-binding-size": 128 << 20,
                  "max-compute-workgroup-storage-size": 16384, "max-compute-invocations-per-workgroup": 256,
                  "max-compute-workgroup-size-x": 256, "max-compute-workgroup-size-y": 256, "max-compute-workgroup-size-z": 64}

PACKED = frozenset({dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16})
_VALUE_TYPE = {dtypes.bool: "bool", dtypes.int8: "i32", dtypes.int16: "i32", dtypes.int32: "i32", dtypes.uint8: "u32",
               dtypes.uint16: "u32", dtypes.uint32: "u32", dtypes.float16: "f16", dtypes.float32: "f32", dtypes.int64: WIDE_TYPE,
               dtypes.uint64: WIDE_TYPE}

# helpers every shader carries (WGSL drops what a kernel does not call); float bits built at run time, never as constants
HELPERS = """fn core_f32(bits: u32) -> f32 { return bitcast<f32>(bits); }
fn core_isnan_f32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn core_ld8(w: u32, p: i32) -> u32 { return (w >> (u32(p & 3) * 8u)) & 0xffu; }
fn core_ld16(w: u32, p: i32) -> u32 { return (w >> (u32(p & 1) * 16u)) & 0xffffu; }"""
HELPERS_F16 = """fn core_f16(bits: u32) -> f16 { return f16(unpack2x16float(bits).x); }
fn core_f16_bits(x: f16) -> u32 { return pack2x16float(vec2<f32>(f32(x), 0.0f)) & 0xffffu; }
fn core_isnan_f16(x: f16) -> bool { return (core_f16_bits(x) & 0x7fffu) > 0x7c00u; }
fn core_to_f16(x: f32) -> f16 {
  let a = bitcast<u32>(x) & 0x7fffffffu;
  if (a > 0x7f800000u) { return core_f16(0x7e00u | ((bitcast<u32>(x) >> 16u) & 0x8000u)); }
  if (a >= 0x477ff000u) { return core_f16(0x7c00u | ((bitcast<u32>(x) >> 16u) & 0x8000u)); }
  return f16(x);
}"""

def _coeffs(cs: list[float]) -> str:
  """A polynomial in `t` by Horner's rule in fused multiply-adds, highest power first."""
  acc = f"{cs[0]!r}f"
  for c in cs[1:]: acc = f"fma({acc}, t, {c!r}f)"
  return acc

# exp2 and sin in float32 from their definitions: WGSL's builtins are approximations (Mesa's are polynomials a few ulp off),
# and tricks like (x + 1.5*2**23) - 1.5*2**23 to round are undone by a compiler that reassociates, so rounding is round()
_PIO2 = math.pi / 2
_P1 = struct.unpack("<f", struct.pack("<f", _PIO2))[0]
_P2 = struct.unpack("<f", struct.pack("<f", _PIO2 - _P1))[0]
_P3 = _PIO2 - _P1 - _P2
HELPERS_MATH = f"""fn core_exp2_poly(t: f32) -> f32 {{ return {_coeffs([math.log(2) ** k / math.factorial(k) for k in range(8, -1, -1)])}; }}
fn core_exp2(x: f32) -> f32 {{
  if (core_isnan_f32(x)) {{ return x; }}
  let n = round(clamp(x, -151.0f, 129.0f));
  let ni = i32(n);
  let h = ni >> 1u;
  return core_exp2_poly(clamp(x, -151.0f, 129.0f) - n) * bitcast<f32>((h + 127) << 23u) * bitcast<f32>((ni - h + 127) << 23u);
}}
fn core_sin_poly(t: f32) -> f32 {{ return {_coeffs([(-1) ** ((k - 1) // 2) / math.factorial(k) for k in range(13, 2, -2)])}; }}
fn core_cos_poly(t: f32) -> f32 {{ return {_coeffs([(-1) ** (k // 2) / math.factorial(k) for k in range(14, 3, -2)])}; }}
fn core_sin(x: f32) -> f32 {{
  if ((bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u) {{ return core_f32(0x7fc00000u); }}
  let k = round(x * {2 / math.pi!r}f);
  let r = fma(k, {-_P3!r}f, fma(k, {-_P2!r}f, fma(k, {-_P1!r}f, x)));
  let r2 = r * r;
  let q = i32(k) & 3;
  let v = select(r + r * r2 * core_sin_poly(r2), (1.0f - 0.5f * r2) + r2 * r2 * core_cos_poly(r2), (q & 1) == 1);
  return select(v, -v, (q & 2) == 2);
}}"""

def _isnan(x: str, dt: DType) -> str: return f"core_isnan_{_VALUE_TYPE[dt.scalar()]}({x})"

def _wgsl_max(a: str, b: str, dt: DType) -> str:
  # NaN wins, like the reference ALU, decided on the bits (WGSL's max() leaves NaN to the implementation)
  return f"select({b}, {a}, ({a} > {b}) || {_isnan(a, dt)})" if dtypes.is_float(dt) else f"max({a}, {b})"

def _cmpne(a: str, b: str, dt: DType) -> str:
  return f"(!({a} == {b}))"

def _math(fn: str) -> Callable[..., str]:
  # half computes exp2/log2/sin in f32 and rounds once (f16 versions are allowed to be far less accurate)
  return lambda x, dt: f"f16({fn}(f32({x})))" if dt.scalar() is dtypes.float16 and fn not in ("sqrt", "trunc") else f"{fn}({x})"

def _neg(x: str, dt: DType) -> str:
  if dt.scalar() is dtypes.bool: return f"(!{x})"
  return f"(0u - {x})" if _VALUE_TYPE[dt.scalar()] == "u32" else f"(-{x})"

def _bool_or(op: str, other: Callable[..., str]) -> Callable[..., str]:
  return lambda a, b, dt: other(a, b, dt) if dt.scalar() is not dtypes.bool else f"({a} {op} {b})"

wgsl_code_for_op: dict[Ops, Callable[..., str]] = {**c_code_for_op,
  Ops.NEG: _neg, Ops.SQRT: _math("sqrt"), Ops.EXP2: _math("core_exp2"), Ops.LOG2: _math("log2"), Ops.SIN: _math("core_sin"),
  Ops.TRUNC: _math("trunc"), Ops.MAX: _wgsl_max, Ops.CMPNE: _cmpne,
  Ops.POW: lambda a, b, dt: f"f16(pow(f32({a}), f32({b})))" if dt.scalar() is dtypes.float16 else f"pow({a}, {b})",
  Ops.SHL: lambda a, b, dt: f"({a} << u32({b}))", Ops.SHR: lambda a, b, dt: f"({a} >> u32({b}))",
  Ops.XOR: _bool_or("!=", c_code_for_op[Ops.XOR]),
  Ops.WHERE: lambda c, a, b, dt: f"select({b}, {a}, {c})",
  Ops.MULACC: lambda a, b, c, dt: f"fma({a}, {b}, {c})" if dtypes.is_float(dt) else f"(({a} * {b}) + {c})",
}

def _cmplt(ctx: WGSLRenderer, x: UOp) -> str | None:
  if x.src[0].dtype.scalar() is not dtypes.bool: return None
  return f"((!{ctx[x.src[0]]}) & {ctx[x.src[1]]})"

def _nan_test(ctx: WGSLRenderer, x: UOp) -> str | None:
  # x != x is the NaN test: on the bits, so a compiler assuming no NaN can't fold it to false
  return _isnan(ctx[x.src[0]], x.src[0].dtype) if x.src[0] is x.src[1] and dtypes.is_float(x.src[0].dtype) else None

wgsl_rewrite = PatternMatcher([
  (UPat(Ops.DEFINE_REG, name="x"), lambda ctx, x: f"var {ctx[x]}: array<{ctx.render_dtype(x.dtype.base)}, {x.dtype.size}>;"),
  (UPat(Ops.DEFINE_LOCAL, name="x"), lambda ctx, x: ctx.declare_local(x)),
  (UPat(Ops.RANGE, name="x"),
   lambda ctx, x: ctx.no_wide(x) or f"for (var {ctx[x]}: {ctx.render_dtype(x.dtype)} = 0; {ctx[x]} < {ctx[x.src[0]]}; {ctx[x]}++) {{"),
  (UPat(Ops.BARRIER), lambda ctx: "workgroupBarrier();"),
  (UPat(Ops.INDEX, name="x"), lambda ctx, x: ""),   # LOAD and STORE read the INDEX's sources themselves
  (UPat(Ops.LOAD, name="x"), lambda ctx, x: ctx.render_load(x)),
  (UPat(Ops.STORE, name="x"), lambda ctx, x: ctx.render_store(x)),
  (UPat(Ops.CMPNE, name="x"), _nan_test),
  (UPat(Ops.CMPLT, name="x"), _cmplt),
]) + base_rewrite

class WGSLRenderer(CStyleRenderer):
  """One kernel as `@compute fn main` over storage bindings; gidx from the workgroup id (a dispatch of more than 65535
  workgroups is folded into x and y), lidx from the local invocation id, DEFINE_LOCAL as module-scope `var<workgroup>`."""
  device = "WEBGPU"
  suffix = "WGSL"
  has_local = True
  has_shared = True
  supports_float4 = False
  global_max = (2**31 - 1, 2**31 - 1, 2**31 - 1)   # workgroups in all; the dispatch folds them into 65535 per dimension
  code_for_op = wgsl_code_for_op
  string_rewrite = wgsl_rewrite
  narrow_dtypes = frozenset({dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16})
  # float32 log2 by core's decomposition (exponent bits, a series for the mantissa): WGSL's log2 is an approximation
  extra_matcher = PatternMatcher([(UPat(Ops.LOG2, dtype=dtypes.float32, name="x"), lambda x: fast_log2(x.src[0]))])

  # per render (set on the copy render() works on): workgroup arrays, buffers stored into, launch and workgroup sizes
  workgroup_vars: list[str]
  written: set[UOp]
  uses_f16: bool
  gsize: list[int]
  lsize: list[int]

  def __init__(self, f16: bool = False, limits: dict[str, int] | None = None):
    self.f16 = f16
    self.limits = {**DEFAULT_LIMITS, **{k: v for k, v in (limits or {}).items() if k in DEFAULT_LIMITS}}
    self.supported_dtypes = frozenset(_VALUE_TYPE) if f16 else frozenset(_VALUE_TYPE) - {dtypes.float16}   # type: ignore[misc]
    self.max_buffer_size = self.limits["max-storage-buffer-binding-size"]   # type: ignore[misc]
    self.shared_max = self.limits["max-compute-workgroup-storage-size"]   # type: ignore[misc]
    self.local_max: tuple[int, ...] = tuple(self.limits[f"max-compute-workgroup-size-{a}"] for a in "xyz")   # type: ignore[misc]
    self.max_storage_buffers = self.limits["max-storage-buffers-per-shader-stage"]

  def __getitem__(self, u: UOp) -> str:
    # variables get a prefix: their names are the user's and may be WGSL keywords
    return f"var_{u.arg[0]}" if u.op is Ops.DEFINE_VAR else self.r[u]

  def no_wide(self, x: UOp) -> str:
    if is_wide(x.dtype): raise NotImplementedError(f"WGSL: a loop over {x.src[0]} iterations needs 64-bit indices; WEBGPU buffers stay under 2**31 elements")
    return ""

  # *** types and literals ***

  def render_dtype(self, dt: DType) -> str:
    if isinstance(dt, PtrDType): return self.render_dtype(dt.base)
    if dt.count > 1:
      if dt.count > 4: raise NotImplementedError(f"WGSL has no {dt.count}-lane vectors ({dt})")
      return f"vec{dt.count}<{self.render_dtype(dt.scalar())}>"
    if dt not in self.supported_dtypes:
      raise NotImplementedError(f"WGSL has no {dt.name}" + ("" if dt is not dtypes.float16 else ": this adapter lacks shader-f16") +
                                f"; WEBGPU supports {', '.join(sorted(d.name for d in self.supported_dtypes))}")
    return _VALUE_TYPE[dt]

  def render_decl(self, dt: DType, name: str, expr: str) -> str: return f"let {name}: {self.render_dtype(dt)} = {expr};"
  def render_vector_prefix(self, dt: DType) -> str: return ""
  def render_vectorize(self, xs: list[str], dt: DType) -> str: return f"{self.render_dtype(dt)}({', '.join(xs)})"

  def render_const(self, v: Any, dt: DType) -> str:
    s = dt.scalar()
    if s is dtypes.bool: return "true" if v else "false"
    if s is dtypes.float32 or s is dtypes.float16:
      v = float(v)
      big = 65504.0 if s is dtypes.float16 else 3.4028234663852886e38
      if math.isnan(v) or abs(v) > big:   # NaN and inf from their bits (beyond the largest finite is inf after rounding)
        if s is dtypes.float32:
          bits = struct.unpack("<I", struct.pack("<f", v))[0] if not math.isnan(v) else (0x7fc00000 | (0x80000000 if math.copysign(1, v) < 0 else 0))
          if abs(v) > big and not math.isinf(v) and not math.isnan(v): bits = 0x7f800000 | (0x80000000 if v < 0 else 0)
          return f"core_f32({bits:#x}u)"
        from core.codegen.c_style import half_bits
        return f"core_f16({half_bits(v):#x}u)"
      return f"{v!r}{'h' if s is dtypes.float16 else 'f'}"
    v = int(v)
    if is_wide(s): return wide_const(v)
    if _VALUE_TYPE[s] == "u32": return f"{v & 0xffffffff}u"
    return "bitcast<i32>(0x80000000u)" if v == -2**31 else f"({v}i)" if v < 0 else f"{v}i"

  def wrap_narrow(self, expr: str, dt: DType) -> str:
    """An i32/u32 value holding an 8/16-bit integer, wrapped back to its width (C truncates the same way)."""
    s = dt.scalar()
    if s not in self.narrow_dtypes or dt.count > 1: return expr
    bits = 8 * s.itemsize
    return f"(({expr} << {32 - bits}u) >> {32 - bits}u)" if not dtypes.is_unsigned(s) else f"({expr} & {(1 << bits) - 1:#x}u)"

  def render_cast(self, dt: DType, from_dt: DType, x: str) -> str:
    if dt.count > 1: return self.render_vectorize([self.render_cast(dt.scalar(), from_dt.scalar(), f"{x}[{i}]") for i in range(dt.count)], dt)
    t, ft = self.render_dtype(dt), self.render_dtype(from_dt)
    if is_wide(dt) or is_wide(from_dt): return self.wrap_narrow(wide_cast(dt, from_dt, x, ft if is_wide(dt) else t), dt)
    if dt is dtypes.bool: return f"(!({x} == {self.render_const(0, from_dt)}))" if from_dt is not dtypes.bool else x
    if from_dt is dtypes.bool: return f"{t}({x})"
    if dt is dtypes.float16 and ft == "f32": return f"core_to_f16({x})"
    if dt is dtypes.float16 and ft != "f16": return f"core_to_f16(f32({x}))"
    if t == ft: return self.wrap_narrow(x, dt) if dt.itemsize < from_dt.itemsize or dtypes.is_unsigned(dt) != dtypes.is_unsigned(from_dt) else x
    if dtypes.is_float(from_dt) and dt in self.narrow_dtypes and t == "u32": return self.wrap_narrow(f"u32(i32({x}))", dt)
    return self.wrap_narrow(f"{t}({x})", dt)

  def render_bitcast(self, dt: DType, from_dt: DType, x: str) -> str:
    if is_wide(dt) and is_wide(from_dt): return x
    if dt.itemsize == 4: return f"bitcast<{self.render_dtype(dt)}>({x})"
    if dt.itemsize == 2 and dt is dtypes.float16: return f"core_f16(u32({x}) & 0xffffu)"
    if from_dt is dtypes.float16: x = f"core_f16_bits({x})"
    # 8/16-bit integers: the same bits in the other signedness
    return self.wrap_narrow(f"{self.render_dtype(dt)}({x})", dt)

  def render_special(self, x: UOp) -> str:
    axis = int(x.arg[-1])
    if x.arg.startswith("lidx"): return f"{self.render_dtype(x.dtype)}(core_lid.{'xyz'[axis]})"
    stride = prod(self.gsize[:axis])
    v = "core_g" if stride == 1 else f"(core_g / {stride}u)"
    return f"{self.render_dtype(x.dtype)}({v} % {self.gsize[axis]}u)" if axis < 2 else f"{self.render_dtype(x.dtype)}({v})"

  # *** ALU ***

  def render_alu(self, x: UOp) -> str:
    if not any(is_wide(d) for d in (x.dtype, *(s.dtype for s in x.src))): return super().render_alu(x)
    if x.dtype.count > 1: raise NotImplementedError("WGSL: vectors of 64-bit integers are not emulated")
    return wide_alu(x.op, [self[s] for s in x.src], [s.dtype for s in x.src], x.dtype)

  def render_int_div(self, x: UOp) -> str:
    """IDIV/MOD as C computes them, x/0 giving 0 and x/-1 giving -x (WGSL would give x for both)."""
    a, b, dt = self[x.src[0]], self[x.src[1]], x.dtype
    if not dtypes.is_int(dt) or is_wide(dt) or (x.src[1].op is Ops.CONST and x.src[1].arg not in (0, -1)): return self.render_alu(x)
    zero, one = self.render_const(0, dt), self.render_const(1, dt)
    if dtypes.is_unsigned(dt):
      return f"select({self.wrap_narrow(self.code_for_op[x.op](a, f'select({b}, {one}, {b} == {zero})', dt), dt)}, {zero}, {b} == {zero})"
    m1 = self.render_const(-1, dt)
    res = self.wrap_narrow(self.code_for_op[x.op](a, f"select({b}, {one}, ({b} == {zero}) || ({b} == {m1}))", dt), dt)
    neg = self.wrap_narrow(f"(-{a})", dt) if x.op is Ops.IDIV else zero
    return f"select(select({res}, {neg}, {b} == {m1}), {zero}, {b} == {zero})"

  # *** memory ***

  def declare_local(self, x: UOp) -> str:
    self.workgroup_vars.append(f"var<workgroup> {self[x]}: array<{self.render_dtype(x.dtype.base)}, {x.dtype.size}>;")  # type: ignore[attr-defined]
    return ""

  def _element(self, idx: UOp) -> tuple[UOp, str]:
    buf = idx.src[0].after_base
    i = self[idx.src[1]]
    return buf, (f"(o{buf.arg} + {i})" if buf.op is Ops.PARAM else i)

  def render_load(self, x: UOp) -> str:
    idx = x.src[0]
    if x.dtype.count > 1: raise NotImplementedError("WGSLRenderer: vector loads are not rendered (supports_float4 is False)")
    buf, i = self._element(idx)
    s = x.dtype.scalar()
    if buf.op is Ops.PARAM and s in PACKED:
      w = f"{self[buf]}[{i} >> {2 if s.itemsize == 1 else 1}u]"
      if buf in self.written: w = f"atomicLoad(&{w})"
      u = f"core_ld{8 * s.itemsize}({w}, {i})"
      val = f"({u} != 0u)" if s is dtypes.bool else u if dtypes.is_unsigned(s) else self.wrap_narrow(f"i32({u})", s)
    else: val = f"{self[buf]}[{i}]"
    if len(idx.src) < 3: return val
    alt = self[x.src[1]] if len(x.src) > 1 and x.src[1].dtype is not dtypes.void else self.render_const(0, x.dtype)
    return f"select({alt}, {val}, {self[idx.src[2]]})"

  def render_store(self, x: UOp) -> str:
    idx, v = x.src[0], x.src[1]
    if v.dtype.count > 1: raise NotImplementedError("WGSLRenderer: vector stores are not rendered (supports_float4 is False)")
    buf, i = self._element(idx)
    s = v.dtype.scalar()
    if buf.op is Ops.PARAM and s in PACKED:
      bits, mask = 8 * s.itemsize, (1 << 8 * s.itemsize) - 1
      val = f"select(0u, 1u, {self[v]})" if s is dtypes.bool else f"(u32({self[v]}) & {mask:#x}u)"
      sh = f"(u32(core_p & {3 if bits == 8 else 1}) * {bits}u)"
      w = f"&{self[buf]}[core_p >> {2 if bits == 8 else 1}u]"
      st = f"{{ let core_p = {i}; atomicAnd({w}, ~({mask:#x}u << {sh})); atomicOr({w}, {val} << {sh}); }}"
    else: st = f"{self[buf]}[{i}] = {self[v]};"
    return f"if ({self[idx.src[2]]}) {{ {st} }}" if len(idx.src) > 2 else st

  # *** the kernel ***

  def render(self, name: str, uops: list[UOp]) -> str:
    import copy
    ctx = copy.copy(self)
    ctx.workgroup_vars = []
    ctx.written = {u.src[0].src[0].after_base for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX}
    # `enable f16;` only in kernels that use half: a shader without it runs on adapters without shader-f16 (browsers)
    ctx.uses_f16 = self.f16 and any(dt.base.scalar() is dtypes.float16 for u in uops for dt in (u.dtype, *(s.dtype for s in u.src)))
    ctx.gsize, ctx.lsize = id_sizes(uops, "gidx"), id_sizes(uops, "lidx")
    if prod(ctx.lsize) > self.limits["max-compute-invocations-per-workgroup"] or any(n > m for n, m in zip(ctx.lsize, self.local_max)):
      raise ValueError(f"kernel {name}: a workgroup of {'x'.join(map(str, ctx.lsize))} invocations; this adapter allows "
                       f"{self.limits['max-compute-invocations-per-workgroup']} in all, at most {self.local_max}")
    return CStyleRenderer.render(ctx, name, uops)

  def render_kernel(self, name: str, bufs: list[UOp], vars_: list[UOp], prefix: list[str], body: list[str]) -> str:
    if len(bufs) > self.max_storage_buffers:
      raise ValueError(f"kernel {name} uses {len(bufs)} buffers, more than the {self.max_storage_buffers} storage buffers per shader "
                       f"stage this WebGPU adapter allows (maxStorageBuffersPerShaderStage): split the computation into smaller "
                       f"steps (e.g. realize() intermediate tensors) or use another device")
    n = prod(self.gsize)
    nx = min(n, MAX_WORKGROUPS)
    ny = -(-n // nx)
    slots = [self[v] for v in vars_] + [f"o{b.arg}" for b in bufs]
    meta = {"name": name, "bufs": [[b.arg, b.dtype.base.name, b.dtype.base.itemsize, b in self.written] for b in bufs],
            "vars": [v.arg[0] for v in vars_], "workgroups": n, "dispatch": [nx, ny, 1], "local": self.lsize}
    lines = [META + json.dumps(meta, separators=(",", ":"))] + (["enable f16;"] if self.uses_f16 else [])
    for b in bufs:
      s = b.dtype.base.scalar()
      el = ("atomic<u32>" if b in self.written else "u32") if s in PACKED else _VALUE_TYPE[s]
      lines.append(f"@group(0) @binding({b.arg}) var<storage, {'read_write' if b in self.written else 'read'}> {self[b]}: array<{el}>;")
    nbind = max((b.arg for b in bufs), default=-1) + 1
    lines.append(f"@group(0) @binding({nbind}) var<uniform> core_args: array<vec4<u32>, {max(1, -(-len(slots) // 4))}>;")
    lines += self.workgroup_vars + [HELPERS, HELPERS_MATH, HELPERS_WIDE] + ([HELPERS_F16] if self.uses_f16 else []) + prefix
    lines.append(f"@compute @workgroup_size({', '.join(map(str, self.lsize))})")
    lines.append("fn main(@builtin(workgroup_id) core_wg: vec3<u32>, @builtin(local_invocation_id) core_lid: vec3<u32>) {")
    lines.append(f"  let core_g: u32 = core_wg.x + core_wg.y * {nx}u;")
    if nx * ny != n: lines.append(f"  if (core_g >= {n}u) {{ return; }}")
    for k, slot in enumerate(slots): lines.append(f"  let {slot}: i32 = bitcast<i32>(core_args[{k // 4}].{'xyzw'[k % 4]});")
    return "\n".join(lines + body + ["}"]) + "\n"

def shader_meta(src: str) -> dict[str, Any]:
  """The `// core-meta` record on a rendered shader's first line: buffers [(binding, dtype, itemsize, written)], vars,
  workgroups, dispatch, local."""
  first = src.split("\n", 1)[0]
  if not first.startswith(META): raise ValueError("not a shader from WGSLRenderer: its first line has no // core-meta record")
  return json.loads(first[len(META):])
