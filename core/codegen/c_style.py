"""The shared C-family renderer: a linearized kernel (list of UOps) to C source, with hooks for CUDA/OpenCL/MSL dialects."""
from __future__ import annotations
import copy, math, struct
from typing import Any, Callable
from core.ir.dtype import DType, PtrDType, AddrSpace, dtypes
from core.ir.ops import UOp, Ops, GroupOp
from core.ir.pattern import UPat, PatternMatcher
from core.helpers import to_function_name
from core.device.renderer import Renderer
from core.codegen.access_guard import GUARD_NAME, GUARD_PARAM, c_guard_prelude, needs_check

# *** the C meaning of each ALU op; operands arrive rendered (and parenthesized), the last argument is the result dtype ***

def _c_math(fn: str) -> Callable[..., str]:
  # float has the `f` builtin, double the bare one; half/bf16 go through float because libm has no half versions
  def render(x: str, dt: DType) -> str:
    s = dt.scalar()
    if s is dtypes.float64: return f"__builtin_{fn}({x})"
    if s is dtypes.float32: return f"__builtin_{fn}f({x})"
    return f"__builtin_{fn}f((float){x})"
  return render

def _c_max(a: str, b: str, dt: DType) -> str:
  # NaN wins, like the reference ALU: `a > b` is false for NaN a, so test a != a explicitly
  return f"((({a}>{b})||({a}!={a}))?{a}:{b})" if dtypes.is_float(dt) else f"(({a}>{b})?{a}:{b})"

def _c_neg(x: str, dt: DType) -> str: return f"(!{x})" if dt.scalar() is dtypes.bool else f"(-{x})"

c_code_for_op: dict[Ops, Callable[..., str]] = {
  Ops.NEG: _c_neg, Ops.SQRT: _c_math("sqrt"), Ops.EXP2: _c_math("exp2"), Ops.LOG2: _c_math("log2"), Ops.SIN: _c_math("sin"),
  Ops.TRUNC: _c_math("trunc"), Ops.RECIPROCAL: lambda x, dt: f"(1/{x})",
  Ops.ADD: lambda a, b, dt: f"({a}+{b})", Ops.SUB: lambda a, b, dt: f"({a}-{b})", Ops.MUL: lambda a, b, dt: f"({a}*{b})",
  Ops.FDIV: lambda a, b, dt: f"({a}/{b})", Ops.IDIV: lambda a, b, dt: f"({a}/{b})", Ops.MOD: lambda a, b, dt: f"({a}%{b})",
  Ops.MAX: _c_max, Ops.POW: lambda a, b, dt: _c_math("pow")(f"{a},{b}", dt) if dt.scalar() in (dtypes.float32, dtypes.float64)
  else f"__builtin_powf((float){a},(float){b})",
  Ops.CMPLT: lambda a, b, dt: f"({a}<{b})", Ops.CMPNE: lambda a, b, dt: f"({a}!={b})", Ops.CMPEQ: lambda a, b, dt: f"({a}=={b})",
  Ops.XOR: lambda a, b, dt: f"({a}^{b})", Ops.OR: lambda a, b, dt: f"({a}|{b})", Ops.AND: lambda a, b, dt: f"({a}&{b})",
  Ops.SHL: lambda a, b, dt: f"({a}<<{b})", Ops.SHR: lambda a, b, dt: f"({a}>>{b})",
  Ops.WHERE: lambda c, a, b, dt: f"({c}?{a}:{b})", Ops.MULACC: lambda a, b, c, dt: f"(({a}*{b})+{c})",
}

# short names for vector types: float4, uchar8, half2, ...
_SHORT = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short", dtypes.uint16: "ushort",
          dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong", dtypes.float16: "half",
          dtypes.bfloat16: "bfloat16", dtypes.float32: "float", dtypes.float64: "double"}

# *** half without _Float16: IEEE binary16 bits in `unsigned short`, computed in float ***
# For compilers without _Float16 (clang < 15 on x86-64). Conversions are integer bit arithmetic, rounding to nearest even like
# the hardware and libgcc conversions of the native type, NaN made quiet with its top payload bits kept. Arithmetic converts its
# operands to float and rounds the result once: float holds every product of two halves exactly and has more than 2*11+2 bits,
# so add, sub, mul, div and sqrt give the correctly rounded half, as the native type (computed in float, cast back) does.
# double -> half rounds directly from the double's bits: through float it would round twice.
HALF_EMULATION = """static inline float core_h2f(unsigned short h) {
  unsigned int s = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  union { unsigned int u; float f; } v;
  if (e == 0) { v.f = (float)m * 5.9604644775390625e-08f; v.u |= s; return v.f; }   /* zero, subnormal: m * 2**-24, exact */
  if (e == 0x1f) { v.u = s | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u); return v.f; }   /* inf; NaN made quiet */
  v.u = s | ((e + 112u) << 23) | (m << 13);                                          /* normal */
  return v.f;
}
static inline unsigned short core_f2h(float f) {
  union { float f; unsigned int u; } v = {f};
  unsigned int s = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(s | 0x7e00u | ((a >> 13) & 0x3ffu));    /* NaN */
  if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);                           /* >= 65520 and inf: inf */
  if (a >= 0x38800000u) {                                                                /* >= 2**-14: a normal half */
    a += 0xfffu + ((a >> 13) & 1u);
    return (unsigned short)(s | ((a - 0x38000000u) >> 13));
  }
  if (a <= 0x33000000u) return (unsigned short)s;                                        /* <= 2**-25: zero */
  unsigned int sh = 126u - (a >> 23), m = (a & 0x7fffffu) | 0x800000u, r = m >> sh, rem = m & ((1u << sh) - 1u);
  return (unsigned short)(s | (r + (rem > (1u << (sh - 1u)) || (rem == (1u << (sh - 1u)) && (r & 1u)))));
}
static inline unsigned short core_d2h(double d) {
  union { double d; unsigned long long u; } v = {d};
  unsigned long long a = v.u & 0x7fffffffffffffffull;
  unsigned int s = (unsigned int)(v.u >> 48) & 0x8000u;
  if (a > 0x7ff0000000000000ull) return (unsigned short)(s | 0x7e00u | ((a >> 42) & 0x3ffu));
  if (a >= 0x40effe0000000000ull) return (unsigned short)(s | 0x7c00u);
  if (a >= 0x3f10000000000000ull) {
    a += 0x1ffffffffffull + ((a >> 42) & 1u);
    return (unsigned short)(s | ((a - 0x3f00000000000000ull) >> 42));
  }
  if (a <= 0x3e60000000000000ull) return (unsigned short)s;
  unsigned long long sh = 1051u - (a >> 52), m = (a & 0xfffffffffffffull) | 0x10000000000000ull, r = m >> sh;
  unsigned long long rem = m & ((1ull << sh) - 1u), half = 1ull << (sh - 1u);
  return (unsigned short)(s | (r + (rem > half || (rem == half && (r & 1u)))));
}"""

def half_bits(v: float) -> int:
  """The binary16 bits of `v` rounded to nearest even (inf beyond the half range; NaN quiet)."""
  if math.isnan(v): return 0x7e00 | (0x8000 if math.copysign(1, v) < 0 else 0)
  try: return struct.unpack("<H", struct.pack("<e", v))[0]
  except OverflowError: return 0x7c00 | (0x8000 if v < 0 else 0)

# *** string_rewrite: each rule returns the C text of one op (an expression for values, a statement for the rest) ***

def load_alternative(ctx: CStyleRenderer, x: UOp) -> str:
  """What a gated LOAD gives where its gate is false, as a value of the load's type: a scalar alternative of a vector load
  (a constant renders as its scalar) is spread over the lanes, since a struct vector (CUDA's, MSL's) takes no scalar."""
  given = x.src[1] if len(x.src) > 1 and x.src[1].dtype is not dtypes.void else None
  if given is not None and given.op is not Ops.CONST:
    if x.dtype.count == 1 or given.dtype.count > 1: return ctx[given]
    alt = ctx[given]
  else: alt = ctx.render_const(0 if given is None else given.arg, x.dtype.scalar())
  return ctx.render_vectorize([alt] * x.dtype.count, x.dtype) if x.dtype.count > 1 else alt

def access_condition(ctx: CStyleRenderer, idx: UOp, nbytes: int, ptr: str | None = None) -> str | None:
  """When an access of `nbytes` through INDEX `idx` (at `ptr`, default its address) may touch memory: its gate, and with
  `guard_accesses` the fault guard's check of an access the IR can't prove in range (core/codegen/access_guard.py; C's &&
  checks only where the gate is true); None: always."""
  conds = [ctx[idx.src[2]]] if len(idx.src) > 2 else []
  if ctx.guard_accesses and (param := needs_check(idx, nbytes)) is not None:
    conds.append(f"CORE_GUARD({ctx.guard_slots[param]}, {ctx[param]}, {ptr or ctx[idx]}, {nbytes})")
  return "&&".join(conds) if conds else None

def _render_load(ctx: CStyleRenderer, x: UOp) -> str:
  ptr = ctx.render_vec_ptr(x.src[0], x.dtype)
  if (cond := access_condition(ctx, x.src[0], x.dtype.itemsize, ptr)) is None: return f"(*{ptr})"
  return f"({cond}?(*{ptr}):{load_alternative(ctx, x)})"

def _render_store(ctx: CStyleRenderer, x: UOp) -> str:
  idx, val = x.src[0], x.src[1]
  ptr = ctx.render_vec_ptr(idx, val.dtype)
  st = f"*{ptr} = {ctx[val]};"
  return f"if ({cond}) {st}" if (cond := access_condition(ctx, idx, val.dtype.itemsize, ptr)) is not None else st

def _render_range(ctx: CStyleRenderer, x: UOp) -> str:
  return f"for ({ctx.render_dtype(x.dtype)} {ctx[x]} = 0; {ctx[x]} < {ctx[x.src[0]]}; {ctx[x]}++) {{"

base_rewrite = PatternMatcher([
  (UPat(Ops.DEFINE_REG, name="x"), lambda ctx, x: f"{ctx.render_dtype(x.dtype.base)} {ctx[x]}[{x.dtype.size}]{ctx.reg_attr(x)};"),
  (UPat(Ops.DEFINE_LOCAL, name="x"), lambda ctx, x: f"{ctx.smem_prefix}{ctx.render_dtype(x.dtype.base)} {ctx[x]}[{x.dtype.size}];"),
  (UPat(Ops.SPECIAL, name="x"), lambda ctx, x: ctx.render_special(x)),
  (UPat(Ops.RANGE, name="x"), _render_range),
  (UPat(Ops.END, name="x"), lambda x: "}" * _closes(x)),
  (UPat(Ops.IF, name="x"), lambda ctx, x: f"if ({ctx[x.src[0]]}) {{"),
  (UPat(Ops.ENDIF), lambda: "}"),
  (UPat(Ops.BARRIER), lambda ctx: ctx.barrier),
  (UPat(Ops.CONST, name="x"), lambda ctx, x: ctx.render_const(x.arg, x.dtype)),
  (UPat(Ops.VCONST, name="x"), lambda ctx, x: ctx.render_vectorize([ctx.render_const(v, x.dtype.scalar()) for v in x.arg], x.dtype)),
  (UPat(Ops.CAST, name="x"), lambda ctx, x: ctx.render_cast(x.dtype, x.src[0].dtype, ctx[x.src[0]])),
  (UPat(Ops.BITCAST, name="x"), lambda ctx, x: ctx.render_bitcast(x.dtype, x.src[0].dtype, ctx[x.src[0]])),
  (UPat(Ops.VECTORIZE, name="x"), lambda ctx, x: ctx.render_vectorize([ctx[s] for s in x.src], x.dtype)),
  (UPat(Ops.GEP, name="x"), lambda ctx, x: ctx.render_gep(ctx[x.src[0]], x.arg[0], x.src[0].dtype) if len(x.arg) == 1 else
   ctx.render_vectorize([ctx.render_gep(ctx[x.src[0]], i, x.src[0].dtype) for i in x.arg], x.dtype)),
  (UPat(Ops.INDEX, name="x"), lambda ctx, x: f"({ctx[x.src[0]]}+{ctx[x.src[1]]})"),
  # AFTER only orders memory accesses (its value is its first source); the linear order already says it
  (UPat(Ops.AFTER, name="x"), lambda ctx, x: ctx[x.src[0]]),
  (UPat(Ops.LOAD, name="x"), _render_load),
  (UPat(Ops.STORE, name="x"), _render_store),
  (UPat((Ops.IDIV, Ops.MOD), name="x"), lambda ctx, x: ctx.render_int_div(x)),
  (UPat(GroupOp.ALU, name="x"), lambda ctx, x: ctx.render_alu(x)),
])

class CStyleRenderer(Renderer):
  """Renders C-family source. A dialect subclass overrides the class attributes and the `render_*` hooks below."""
  # dialect hooks
  kernel_prefix: str = ""                  # before `void`, e.g. `extern "C" __global__ `
  buffer_prefix: str = ""                  # before a buffer argument's type, e.g. `__global `
  buffer_suffix: str = " restrict"         # after the `*` of a buffer argument
  arg_int_prefix: str = "int"              # the type of a DEFINE_VAR argument
  smem_prefix: str = ""                    # before a DEFINE_LOCAL array, e.g. `__shared__ `
  barrier: str = ""                        # the statement for BARRIER
  infinity: str = "__builtin_inff()"       # a float expression for +inf
  nan: str = '__builtin_nanf("")'          # a float expression for NaN
  native_half: bool = True                 # the compiler has _Float16; False: half is emulated (HALF_EMULATION above)
  type_map: dict[DType, str] = {dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
    dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
    dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16", dtypes.bfloat16: "__bf16", dtypes.float32: "float",
    dtypes.float64: "double", dtypes.void: "void", dtypes.index: "long long"}
  code_for_op: dict[Ops, Callable[..., str]] = c_code_for_op
  string_rewrite: PatternMatcher = base_rewrite
  extra_matcher: PatternMatcher | None = None
  # MOCK devices that run the kernel's own source on the host: accesses the IR can't prove in range are checked, and the kernel
  # takes the guard's table after its buffers (core/codegen/access_guard.py)
  guard_accesses: bool = False
  # ALU results of these dtypes are cast back, because C computes them in a wider type (int promotion, half excess precision)
  narrow_dtypes: frozenset[DType] = frozenset({dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.float16, dtypes.bfloat16})
  # vector ALU ops the dialect's vector types support directly (others are rendered lane by lane)
  vector_alu: frozenset[Ops] = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.AND, Ops.OR, Ops.XOR})
  vector_alu_dtypes: frozenset[DType] = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64})

  def __getitem__(self, u: UOp) -> str: return self.r[u]

  # *** types and literals ***

  def reg_attr(self, x: UOp) -> str:
    """Text after a DEFINE_REG array's declaration (an alignment attribute in dialects that have one)."""
    return ""
  def render_dtype(self, dt: DType) -> str:
    if isinstance(dt, PtrDType): return self.render_dtype(dt.base) + "*"
    # "floatx8", not "float8": a 32-lane float vector must not read as a scalar type named float32
    if dt.count > 1: return f"{_SHORT[dt.scalar()]}x{dt.count}"
    if dt is dtypes.float16 and not self.native_half: return "unsigned short"
    if dt not in self.type_map: raise NotImplementedError(f"{type(self).__name__} has no C type for {dt}")
    return self.type_map[dt]

  def render_vector_prefix(self, dt: DType) -> str:
    """The typedef that declares vector type `dt` (GCC vector extensions; aligned to the scalar so unaligned pointers work)."""
    elem = "unsigned char" if dt.scalar() is dtypes.bool else self.render_dtype(dt.scalar())
    return f"typedef {elem} {self.render_dtype(dt)} __attribute__((vector_size({dt.itemsize}),aligned({dt.scalar().itemsize})));"

  def render_const(self, v: Any, dt: DType) -> str:
    s = dt.scalar()
    if s is dtypes.bool: return "1" if v else "0"
    if s is dtypes.float16 and not self.native_half: return f"((unsigned short){half_bits(float(v)):#06x})"
    if dtypes.is_float(s):
      if math.isnan(v): txt = self.nan
      elif math.isinf(v): txt = self.infinity if v > 0 else f"(-{self.infinity})"
      else: txt = f"{float(v)!r}" + ("" if s is dtypes.float64 else "f")
      if s is dtypes.float32 and not math.isnan(v) and not math.isinf(v): return f"({txt})" if txt.startswith("-") else txt
      return self.render_cast(s, dtypes.float32, txt if not txt.startswith("-") else f"({txt})")
    v = int(v)
    suffix = {dtypes.uint32: "u", dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.index: "ll"}.get(s, "")
    # the literal of the most negative value is the negation of an out-of-range positive number, so build it from -max-1
    txt = f"({v+1}{suffix}-1)" if v == s.min and v < 0 else f"({v}{suffix})" if v < 0 else f"{v}{suffix}"
    return f"(({self.render_dtype(s)}){txt})" if s.itemsize < 4 else txt

  def render_cast(self, dt: DType, from_dt: DType, x: str) -> str:
    if dt.count > 1: return self.render_vectorize([self.render_cast(dt.scalar(), from_dt.scalar(), self.render_gep(x, i, from_dt))
                                                   for i in range(dt.count)], dt)
    if not self.native_half and dtypes.float16 in (dt, from_dt) and dt is not from_dt:
      if dt is dtypes.float16: return f"core_d2h({x})" if from_dt is dtypes.float64 else f"core_f2h({x})" if from_dt is dtypes.float32 \
        else f"core_f2h((float)({x}))"   # integers: exact in float up to 2**24, and from 65520 on inf either way
      x, from_dt = f"core_h2f({x})", dtypes.float32
      if dt is dtypes.float32: return x
    # a float through `_Bool` is true for NaN as in C; other casts are C casts
    return f"(({self.render_dtype(dt)})({x}))"

  def render_bitcast(self, dt: DType, from_dt: DType, x: str) -> str:
    # a union keeps this defined behaviour in C (pointer casts would break strict aliasing)
    return f"((union {{{self.render_dtype(from_dt)} a; {self.render_dtype(dt)} b;}}){{.a=({x})}}).b"

  def render_decl(self, dt: DType, name: str, expr: str) -> str:
    """The statement that names a value: `T name = expr;` in C (a dialect without C declarations overrides it)."""
    return f"{self.render_dtype(dt)} {name} = {expr};"

  def render_vectorize(self, xs: list[str], dt: DType) -> str: return f"(({self.render_dtype(dt)}){{{','.join(xs)}}})"
  def render_gep(self, x: str, i: int, from_dt: DType) -> str: return f"{x}[{i}]"
  def param_name(self, p: UOp) -> str:
    """The name of a kernel parameter: `data<slot>` (runtimes that map arguments by name parse it)."""
    return f"data{p.arg}"
  def render_special(self, x: UOp) -> str:
    raise NotImplementedError(f"{type(self).__name__} has no thread ids; render SPECIAL {x.arg} in a subclass")

  def render_vec_ptr(self, idx: UOp, dt: DType) -> str:
    """The pointer expression for a LOAD/STORE of `dt` through INDEX `idx` (cast to a vector pointer for vector accesses)."""
    base = idx.dtype.base if isinstance(idx.dtype, PtrDType) else idx.dtype
    if dt.count > 1 and base.count == 1: return f"(({self.buffer_prefix_for(idx.dtype)}{self.render_dtype(dt)}*){self[idx]})"
    return self[idx]
  def buffer_prefix_for(self, pdt: DType) -> str:
    return self.buffer_prefix if not isinstance(pdt, PtrDType) or pdt.addrspace == AddrSpace.GLOBAL else ""

  # *** ALU ***

  def render_alu(self, x: UOp) -> str:
    srcs = [self[s] for s in x.src]
    if x.dtype.count > 1 and not (x.op in self.vector_alu and x.dtype.scalar() in self.vector_alu_dtypes):
      lanes = [self.render_scalar_alu(x.op, [self.render_gep(s, i, u.dtype) for s, u in zip(srcs, x.src)], [u.dtype.scalar() for u in x.src],
                                      x.dtype.scalar()) for i in range(x.dtype.count)]
      return self.render_vectorize(lanes, x.dtype)
    if x.op in (Ops.SHL, Ops.SHR) and not _const_in(x.src[1], 0, 8 * x.dtype.scalar().itemsize - 1):
      # an out-of-range shift is undefined in C; mask the count like the hardware (and the reference ALU) do
      srcs[1] = f"({srcs[1]}&{8 * x.dtype.scalar().itemsize - 1})"
    return self.render_scalar_alu(x.op, srcs, [u.dtype for u in x.src], x.dtype)

  def render_scalar_alu(self, op: Ops, srcs: list[str], src_dtypes: list[DType], dt: DType) -> str:
    """One ALU op on rendered operands (also a vector op the dialect's vector types support), its result in `dt`."""
    if not self.native_half and op is not Ops.WHERE and dtypes.float16 in (dt.scalar(), *(d.scalar() for d in src_dtypes)):
      # emulated half: computed in float (comparisons too), the result rounded back to half once; WHERE just picks bits
      srcs = [f"core_h2f({s})" if d.scalar() is dtypes.float16 else s for s, d in zip(srcs, src_dtypes)]
      if dt.scalar() is not dtypes.float16: return self.code_for_op[op](*srcs, dt)
      return f"core_f2h({self.code_for_op[op](*srcs, dtypes.float32)})"
    return self.wrap_narrow(self.code_for_op[op](*srcs, dt), dt)

  def wrap_narrow(self, expr: str, dt: DType) -> str:
    return f"(({self.render_dtype(dt)}){expr})" if dt.scalar() in self.narrow_dtypes else expr

  def render_int_div(self, x: UOp) -> str:
    """IDIV/MOD. x/0 and INT_MIN/-1 trap on most CPUs, so a divisor not known to be safe is guarded (x/0 is 0, x/-1 is -x)."""
    a, b, dt = self[x.src[0]], self[x.src[1]], x.dtype
    plain = self.render_alu(x)
    if x.dtype.count > 1 or not dtypes.is_int(dt): return plain
    d = x.src[1]
    if d.op is Ops.CONST and d.arg not in (0, -1): return plain
    safe_b = f"(({b}==0{'' if dtypes.is_unsigned(dt) else f'||{b}==-1'})?1:{b})"
    res = self.wrap_narrow(self.code_for_op[x.op](a, safe_b, dt), dt)
    if dtypes.is_unsigned(dt): return f"(({b}==0)?0:{res})"
    neg = self.wrap_narrow(f"(-{a})", dt) if x.op is Ops.IDIV else self.render_const(0, dt)
    return f"(({b}==0)?{self.render_const(0, dt)}:({b}==-1)?{neg}:{res})"

  # *** the kernel ***

  def render_kernel(self, name: str, bufs: list[UOp], vars_: list[UOp], prefix: list[str], body: list[str]) -> str:
    args = [f"{self.buffer_prefix_for(b.dtype)}{self.render_dtype(b.dtype.base)}*{self.buffer_suffix} {self[b]}" for b in bufs]
    args += [f"{self.arg_int_prefix} {self[v]}" for v in vars_]
    return "\n".join(prefix + [f"{self.kernel_prefix}void {name}({', '.join(args)}) {{"] + body + ["}"]) + "\n"

  def render(self, name: str, uops: list[UOp]) -> str:
    """C source of the kernel `name`. Runs on a copy of the renderer so the name table is private to this call."""
    ctx = copy.copy(self)
    return ctx._render(to_function_name(name), uops)

  def inline(self, u: UOp, users: list[UOp], block: dict[UOp, int]) -> bool:
    """Whether `u` is written into its user instead of getting a named temporary."""
    if u.op in (Ops.CONST, Ops.INDEX, Ops.AFTER) or (u.op is Ops.GEP and u.dtype.count == 1): return True
    # loads keep their place in the order of memory accesses; a vector used lane by lane would be repeated per lane
    if u.op is Ops.LOAD or u.dtype.count > 1: return False
    # MAX repeats its operands in the C text (NaN handling): inlining into it would grow nested maxes exponentially
    if any(x.op is Ops.MAX for x in users): return False
    return len(users) == 1 and block[users[0]] == block[u]

  def _render(self, name: str, uops: list[UOp]) -> str:
    self.r: dict[UOp, str] = {}
    self.guard_slots: dict[UOp, int] = {}   # a buffer argument's position: its row in the guard's table
    counts: dict[str, int] = {}
    def fresh(prefix: str) -> str:
      counts[prefix] = counts.get(prefix, 0) + 1
      return f"{prefix}{counts[prefix]-1}"
    # where each value is used decides whether it can be inlined: once, in the same block (loop/if body) where it is made
    users: dict[UOp, list[UOp]] = {}
    for u in uops:
      if u.op in (Ops.END, Ops.ENDIF): continue
      for s in u.src: users.setdefault(s, []).append(u)
    block: dict[UOp, int] = {}
    stack, nblocks = [0], 1
    for u in uops:
      for _ in range(_closes(u)): stack.pop()
      block[u] = stack[-1]
      if u.op in (Ops.RANGE, Ops.IF):
        stack.append(nblocks)
        nblocks += 1
        block[u] = stack[-1]
    bufs: list[UOp] = []
    vars_: list[UOp] = []
    body: list[str] = []
    vec_types: dict[DType, None] = {}
    depth = 1
    half = False
    for u in uops:
      for dt in (u.dtype, *(s.dtype for s in u.src)):
        if dt.base.count > 1: vec_types[dt.base] = None
        half = half or dt.base.scalar() is dtypes.float16
      if u.op is Ops.PARAM:
        self.r[u] = self.param_name(u)
        self.guard_slots[u] = len(bufs)
        bufs.append(u)
        continue
      if u.op is Ops.DEFINE_VAR:
        self.r[u] = u.arg[0]
        vars_.append(u)
        continue
      if u.op is Ops.RANGE: self.r[u] = "ridx" + "_".join(str(a) for a in (u.arg[0] if isinstance(u.arg[0], tuple) else (u.arg[0],)))
      elif u.op is Ops.DEFINE_REG: self.r[u] = f"acc{u.arg}"
      elif u.op is Ops.DEFINE_LOCAL: self.r[u] = f"temp{u.arg}"
      txt = self.string_rewrite.rewrite(u, ctx=self)
      if txt is None: raise NotImplementedError(f"{type(self).__name__} can't render {u.op.name} ({u.dtype}) in kernel {name}")
      assert isinstance(txt, str), f"rule for {u.op.name} returned {type(txt).__name__}, not str"
      depth -= _closes(u)
      if u.op in (Ops.RANGE, Ops.IF, Ops.END, Ops.ENDIF, Ops.STORE, Ops.BARRIER, Ops.DEFINE_REG, Ops.DEFINE_LOCAL):
        body.append("  " * depth + txt)
      elif u.op is Ops.SPECIAL:
        self.r[u] = u.arg
        body.append("  " * depth + self.render_decl(u.dtype, u.arg, txt))
      elif self.inline(u, users.get(u, []), block): self.r[u] = txt
      else:
        self.r[u] = fresh({Ops.LOAD: "val", Ops.CAST: "cast", Ops.BITCAST: "cast", Ops.VECTORIZE: "vec", Ops.VCONST: "const"}.get(u.op, "alu"))
        body.append("  " * depth + self.render_decl(u.dtype, self.r[u], txt))
      if u.op in (Ops.RANGE, Ops.IF): depth += 1
    prefix = ([HALF_EMULATION] if half and not self.native_half else []) + [self.render_vector_prefix(dt) for dt in vec_types]
    if self.guard_accesses:
      self.r[GUARD_PARAM] = GUARD_NAME
      prefix, bufs = prefix + [c_guard_prelude(self.buffer_prefix)], bufs + [GUARD_PARAM]
    return self.render_kernel(name, bufs, vars_, prefix, body)

def _const_in(u: UOp, lo: int, hi: int) -> bool: return u.op is Ops.CONST and lo <= u.arg <= hi

def _closes(u: UOp) -> int:
  """How many blocks `u` closes: END closes each RANGE it names, ENDIF its IF."""
  if u.op is Ops.END: return sum(1 for s in u.src[1:] if s.op is Ops.RANGE)
  return 1 if u.op is Ops.ENDIF else 0
