"""The shared LLVM IR renderer: a linearized kernel (list of UOps) to LLVM IR text, with hooks for amdgcn/nvptx subclasses."""
from __future__ import annotations
import copy, math, struct
from typing import Any, NamedTuple
from core.ir.dtype import DType, PtrDType, AddrSpace, dtypes, float_to_bf16_bits
from core.ir.ops import UOp, Ops, GroupOp, MAX_NO_NAN, intern_uop
from core.ir.pattern import UPat, PatternMatcher
from core.helpers import to_function_name
from core.device.renderer import Renderer

_SCALAR = {dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16", dtypes.int32: "i32",
           dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.index: "i64", dtypes.float16: "half",
           dtypes.bfloat16: "bfloat", dtypes.float32: "float", dtypes.float64: "double", dtypes.void: "void"}
_MANGLE = {"half": "f16", "bfloat": "bf16", "float": "f32", "double": "f64"}

# each value dtype's LLVM type, asked ~30k times a ResNet-18 inference's codegen (a pointer's depends on the renderer: not kept)
_TYPES: dict[DType, str] = {}

def _is_int(dt: DType) -> bool: return dtypes.is_int(dt) or dt.scalar() is dtypes.bool
def _signed(dt: DType) -> bool: return dtypes.is_int(dt) and not dtypes.is_unsigned(dt)

# *** one rule per op; value rules write `ctx[x] = ...` (plus temporaries), CONST rules return the literal ***

def _render_alu(ctx: LLVMRenderer, x: UOp) -> str:
  op, dt, s = x.op, x.dtype, x.src
  if dt.scalar() is dtypes.bfloat16: ctx.rounds_to_bfloat = True   # LLVM computes bfloat in float where the target has no bf16 ALU
  t, a = ctx.ty(s[0].dtype), [ctx[u] for u in s]
  fl = dtypes.is_float(s[-1].dtype)
  if op is Ops.WHERE: return f"{ctx[x]} = select {ctx.ty(s[0].dtype)} {a[0]}, {ctx.ty(dt)} {a[1]}, {ctx.ty(dt)} {a[2]}"
  if op in GroupOp.Comparison:
    cmp = {Ops.CMPLT: "olt", Ops.CMPNE: "une", Ops.CMPEQ: "oeq"}[op] if fl else \
          {Ops.CMPLT: "slt" if _signed(s[0].dtype) else "ult", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}[op]
    return f"{ctx[x]} = {'fcmp' if fl else 'icmp'} {cmp} {t} {a[0]}, {a[1]}"
  if op is Ops.NEG:
    if dt.scalar() is dtypes.bool: return f"{ctx[x]} = xor {t} {a[0]}, {ctx.const(True, dt)}"
    return f"{ctx[x]} = fneg {t} {a[0]}" if fl else f"{ctx[x]} = sub {t} {ctx.const(0, dt)}, {a[0]}"
  if op in (Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC, Ops.POW):
    fn = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.TRUNC: "trunc", Ops.POW: "pow"}[op]
    return f"{ctx[x]} = call {t} {ctx.intrinsic(fn, dt, len(s))}({', '.join(f'{t} {v}' for v in a)})"
  if op is Ops.RECIPROCAL: return f"{ctx[x]} = fdiv {t} {ctx.const(1.0, dt)}, {a[0]}"
  if op is Ops.MAX:
    c0, b1 = ctx.tmp(), ctx.ty(dtypes.bool.vec(dt.count))
    if not fl: return f"{c0} = icmp {'sgt' if _signed(dt) else 'ugt'} {t} {a[0]}, {a[1]}\n  {ctx[x]} = select {b1} {c0}, {t} {a[0]}, {t} {a[1]}"
    # NaN need not propagate (MAX_NO_NAN): x86's maxps is this select, one instruction
    if x.arg == MAX_NO_NAN: return f"{c0} = fcmp ogt {t} {a[0]}, {a[1]}\n  {ctx[x]} = select {b1} {c0}, {t} {a[0]}, {t} {a[1]}"
    # NaN wins, like the reference ALU
    c1, c2 = ctx.tmp(), ctx.tmp()
    return (f"{c0} = fcmp ogt {t} {a[0]}, {a[1]}\n  {c1} = fcmp uno {t} {a[0]}, {a[0]}\n  {c2} = or {b1} {c0}, {c1}\n"
            f"  {ctx[x]} = select {b1} {c2}, {t} {a[0]}, {t} {a[1]}")
  if op is Ops.MULACC and fl and ctx.defined_in.get(prod := intern_uop(UOp, Ops.MUL, dt, (s[0], s[1]))) == ctx.block:
    # the product is computed anyway (softmax stores exp's p * 2**(n+125) * 2**-125 and sums it): adding it takes an add
    # port where the FMA took one of the two FMA ports the rest of the loop (exp's polynomial) is bound by
    return f"{ctx[x]} = fadd {t} {ctx[prod]}, {a[2]}"
  if op is Ops.MULACC and fl:
    # fused where the target has an FMA unit (one rounding), else a multiply and an add: LLVM picks per target
    return f"{ctx[x]} = call {t} {ctx.intrinsic('fmuladd', dt, 3)}({', '.join(f'{t} {v}' for v in a)})"
  if op is Ops.MULACC:
    m = ctx.tmp()
    return f"{m} = {'fmul' if fl else 'mul'} {t} {a[0]}, {a[1]}\n  {ctx[x]} = {'fadd' if fl else 'add'} {t} {m}, {a[2]}"
  if op in (Ops.IDIV, Ops.MOD) and fl: raise NotImplementedError(f"{op.name} of {dt} has no meaning; use FDIV/TRUNC")
  if op in (Ops.IDIV, Ops.MOD) and not (s[1].op is Ops.CONST and s[1].arg not in (0, -1)): return _render_safe_div(ctx, x)
  pre = ""
  if op in (Ops.SHL, Ops.SHR) and not (s[1].op is Ops.CONST and 0 <= s[1].arg < 8 * dt.scalar().itemsize):
    # an out-of-range shift is poison in LLVM; mask the count like the hardware (and the reference ALU) do
    m = ctx.tmp()
    pre, a[1] = f"{m} = and {t} {a[1]}, {ctx.const(8 * dt.scalar().itemsize - 1, dt)}\n  ", m
  name = _BINARY[op][0 if fl else 2 if _signed(dt) else 1]
  return f"{pre}{ctx[x]} = {name} {t} {a[0]}, {a[1]}"

# the instruction of a binary op: (on floats, on unsigned ints, on signed ints)
_BINARY = {Ops.ADD: ("fadd", "add", "add"), Ops.SUB: ("fsub", "sub", "sub"), Ops.MUL: ("fmul", "mul", "mul"), Ops.FDIV: ("fdiv", "fdiv", "fdiv"),
           Ops.XOR: ("xor", "xor", "xor"), Ops.OR: ("or", "or", "or"), Ops.AND: ("and", "and", "and"), Ops.SHL: ("shl", "shl", "shl"),
           Ops.SHR: ("lshr", "lshr", "ashr"), Ops.IDIV: ("", "udiv", "sdiv"), Ops.MOD: ("", "urem", "srem")}

def _render_safe_div(ctx: LLVMRenderer, x: UOp) -> str:
  # x/0 is undefined (and traps on x86), as is INT_MIN/-1: divide by 1 instead and pick the reference answer (0, or -x)
  dt, t, b1 = x.dtype, ctx.ty(x.dtype), ctx.ty(dtypes.bool.vec(x.dtype.count))
  a, b = ctx[x.src[0]], ctx[x.src[1]]
  z, bad, d, q = ctx.tmp(), ctx.tmp(), ctx.tmp(), ctx.tmp()
  signed = _signed(dt)
  op = ("sdiv" if signed else "udiv") if x.op is Ops.IDIV else ("srem" if signed else "urem")
  lines = [f"{z} = icmp eq {t} {b}, {ctx.const(0, dt)}"]
  if signed:
    m1 = ctx.tmp()
    lines += [f"{m1} = icmp eq {t} {b}, {ctx.const(-1, dt)}", f"{bad} = or {b1} {z}, {m1}"]
  else: lines.append(f"{bad} = or {b1} {z}, {z}")
  lines += [f"{d} = select {b1} {bad}, {t} {ctx.const(1, dt)}, {t} {b}", f"{q} = {op} {t} {a}, {d}"]
  if signed and x.op is Ops.IDIV:
    n, r = ctx.tmp(), ctx.tmp()
    lines += [f"{n} = sub {t} {ctx.const(0, dt)}, {a}", f"{r} = select {b1} {m1}, {t} {n}, {t} {q}", f"{ctx[x]} = select {b1} {z}, {t} "
              f"{ctx.const(0, dt)}, {t} {r}"]
  else: lines.append(f"{ctx[x]} = select {b1} {bad}, {t} {ctx.const(0, dt)}, {t} {q}")
  return "\n  ".join(lines)

def _render_cast(ctx: LLVMRenderer, x: UOp) -> str:
  to, fr = x.dtype, x.src[0].dtype
  tt, ft, v = ctx.ty(to), ctx.ty(fr), ctx[x.src[0]]
  if to.scalar() is dtypes.bool:  # C: nonzero (and NaN) is true
    return f"{ctx[x]} = fcmp une {ft} {v}, {ctx.const(0.0, fr)}" if dtypes.is_float(fr) else f"{ctx[x]} = icmp ne {ft} {v}, {ctx.const(0, fr)}"
  if to.scalar() is dtypes.bfloat16: ctx.rounds_to_bfloat = True
  if dtypes.is_float(to) and dtypes.is_float(fr):
    if to.scalar().itemsize == fr.scalar().itemsize:  # half <-> bfloat: through float
      f, mid = ctx.tmp(), ctx.ty(dtypes.float32.vec(to.count))
      return f"{f} = fpext {ft} {v} to {mid}\n  {ctx[x]} = fptrunc {mid} {f} to {tt}"
    return f"{ctx[x]} = {'fpext' if to.scalar().itemsize > fr.scalar().itemsize else 'fptrunc'} {ft} {v} to {tt}"
  if dtypes.is_float(to): op = "sitofp" if _signed(fr) else "uitofp"
  elif dtypes.is_float(fr): op = "fptosi" if _signed(to) else "fptoui"
  elif to.scalar().itemsize == fr.scalar().itemsize and fr.scalar() is not dtypes.bool: op = "bitcast"
  elif to.scalar().itemsize > fr.scalar().itemsize or fr.scalar() is dtypes.bool: op = "sext" if _signed(fr) else "zext"
  else: op = "trunc"
  return f"{ctx[x]} = {op} {ft} {v} to {tt}"

def _masked_intrinsic(op: str, dt: DType) -> str:
  # LLVM's type suffix: bfloat is bf16 (f16 is half: a kernel with both would declare one name twice)
  kind = "bf" if dt.scalar() is dtypes.bfloat16 else "f" if dtypes.is_float(dt) else "i"
  return f"@llvm.masked.{op}.v{dt.count}{kind}{dt.scalar().itemsize * 8}.p0"

def _render_load(ctx: LLVMRenderer, x: UOp) -> str:
  idx = x.src[0]
  mt, t = ctx.mem_ty(x.dtype), ctx.ty(x.dtype)
  ptr = f"{ctx.ptr_ty(idx.dtype)} {ctx[idx]}"
  def load(dest: str) -> str:
    if x.dtype.scalar() is not dtypes.bool: return f"{dest} = load {mt}, {ptr}, align {x.dtype.scalar().itemsize}"
    m = ctx.tmp()
    return f"{m} = load {mt}, {ptr}, align 1\n  {dest} = icmp ne {mt} {m}, {ctx.mem_const(0, x.dtype)}"
  if len(idx.src) < 3: return load(ctx[x])
  gate = idx.src[2]
  gate = gate.unbroadcast()
  if gate.dtype.count > 1:
    # a gate per lane (Renderer.masked_vectors): the masked-off lanes read nothing and take the alternative's lanes
    alt = ctx[x.src[1]] if len(x.src) > 1 and x.src[1].dtype is not dtypes.void else ctx.const(0, x.dtype)
    name = _masked_intrinsic("load", x.dtype)
    ctx.declares[f"declare {t} {name}(ptr, i32, <{x.dtype.count} x i1>, {t})"] = None
    return f"{ctx[x]} = call {t} {name}({ptr}, i32 {x.dtype.scalar().itemsize}, {ctx.ty(idx.src[2].dtype)} {ctx[idx.src[2]]}, {t} {alt})"
  # a gated load must not touch memory when the gate is false: branch around it and merge with the alternative
  k, prev, val = ctx.fresh_label("load"), ctx.block, ctx.tmp()
  alt = ctx[x.src[1]] if len(x.src) > 1 and x.src[1].dtype is not dtypes.void else ctx.const(0, x.dtype)
  return (f"br i1 {ctx[gate]}, label %{k}, label %{k}.done\n{ctx.label(k)}\n  {load(val)}\n  br label %{k}.done\n"
          f"{ctx.label(k + '.done')}\n  {ctx[x]} = phi {t} [{val}, %{k}], [{alt}, %{prev}]")

def _render_store(ctx: LLVMRenderer, x: UOp) -> str:
  idx, val = x.src[0], x.src[1]
  v, pre = ctx[val], ""
  if val.dtype.scalar() is dtypes.bool:
    v = ctx.tmp()
    pre = f"{v} = zext {ctx.ty(val.dtype)} {ctx[val]} to {ctx.mem_ty(val.dtype)}\n  "
  st = f"{pre}store {ctx.mem_ty(val.dtype)} {v}, {ctx.ptr_ty(idx.dtype)} {ctx[idx]}, align {val.dtype.scalar().itemsize}"
  if len(idx.src) < 3: return st
  if idx.src[2].dtype.count > 1 and val.dtype.scalar() is not dtypes.bool:   # a gate per lane (Renderer.masked_vectors)
    t = ctx.ty(val.dtype)
    ctx.declares[f"declare void {(name := _masked_intrinsic('store', val.dtype))}({t}, ptr, i32, <{val.dtype.count} x i1>)"] = None
    return f"call void {name}({t} {v}, {ctx.ptr_ty(idx.dtype)} {ctx[idx]}, i32 {val.dtype.scalar().itemsize}, {ctx.ty(idx.src[2].dtype)} {ctx[idx.src[2]]})"
  k = ctx.fresh_label("store")
  return f"br i1 {ctx[idx.src[2]]}, label %{k}, label %{k}.done\n{ctx.label(k)}\n  {st}\n  br label %{k}.done\n{ctx.label(k + '.done')}"

def _render_range(ctx: LLVMRenderer, x: UOp) -> str:
  k, t, p = ctx.loop_label[x], ctx.ty(x.dtype), f"{ctx[x]}.addr"
  ctx.allocas.append(f"{p} = alloca {t}{ctx.alloca_space()}")
  cmp = ctx.tmp()
  pt = ctx.private_ptr()
  return (f"store {t} 0, {pt} {p}\n  br label %{k}.head\n{ctx.label(k + '.head')}\n  {ctx[x]} = load {t}, {pt} {p}\n"
          f"  {cmp} = icmp slt {t} {ctx[x]}, {ctx[x.src[0]]}\n  br i1 {cmp}, label %{k}.body, label %{k}.exit\n{ctx.label(k + '.body')}")

def _render_end(ctx: LLVMRenderer, x: UOp) -> str:
  out = []
  # close the innermost loop first: the one opened last
  for r in sorted((r for r in x.src[1:] if r.op is Ops.RANGE), key=lambda r: -ctx.open_order[r]):
    k, t, n = ctx.loop_label[r], ctx.ty(r.dtype), ctx.tmp()
    out.append(f"{n} = add {t} {ctx[r]}, 1\n  store {t} {n}, {ctx.private_ptr()} {ctx[r]}.addr\n  br label %{k}.head\n{ctx.label(k + '.exit')}")
  return "\n  ".join(out)

_LITERAL_OPS = frozenset({Ops.CONST, Ops.VCONST, Ops.AFTER, Ops.VECTORIZE})   # the ops of nodes _literal may answer True for

def _literal(u: UOp) -> bool:
  """Rendered as an LLVM constant in place (no instruction): constants, and vectors of them."""
  return u.op in (Ops.CONST, Ops.VCONST, Ops.AFTER) or (u.op is Ops.VECTORIZE and all(s.op is Ops.CONST for s in u.src))

def _shuffle_sources(x: UOp) -> tuple[list[UOp], list[int]] | None:
  """(the vectors, the shufflevector mask) when every lane of VECTORIZE x is a lane of one of at most two vectors of one type."""
  if not all(s.op is Ops.GEP and len(s.arg) == 1 for s in x.src): return None
  srcs = list(dict.fromkeys(s.src[0] for s in x.src))
  if len(srcs) > 2 or len({s.dtype for s in srcs}) != 1: return None
  return srcs, [srcs.index(s.src[0]) * srcs[0].dtype.count + s.arg[0] for s in x.src]

BOOL_SPLATS = 4   # distinct values a vector of bools may take to be built by splats (more: lane by lane)

def _render_vectorize(ctx: LLVMRenderer, x: UOp) -> str:
  t, et, cur, out = ctx.ty(x.dtype), ctx.ty(x.dtype.scalar()), "poison", []
  # a vector of constants is a literal: one insertelement per lane made upcast kernels' IR (and compile time) several times larger
  if _literal(x): return "<" + ", ".join(f"{et} {ctx[s]}" for s in x.src) + ">"
  if (shuffle := _shuffle_sources(x)) is not None:
    # lanes picked from one or two vectors of a type (the expander's strided loads): one shufflevector, not a lane-by-lane chain
    srcs, mask = shuffle
    st = ctx.ty(srcs[0].dtype)
    return (f"{ctx[x]} = shufflevector {st} {ctx[srcs[0]]}, {st} {ctx[srcs[1]] if len(srcs) > 1 else 'poison'}, "
            f"<{len(mask)} x i32> <{', '.join(f'i32 {m}' for m in mask)}>")
  if x.unbroadcast() is not x:
    # one value in every lane (a broadcast: an input pixel for a tile's channels): one lane and a splat shuffle, as InstCombine
    # would make of an insertelement per lane, in 2 lines instead of 16 (AVX-512 f32) for LLVM to parse and simplify first
    one = ctx.tmp()
    return (f"{one} = insertelement {t} poison, {et} {ctx[x.src[0]]}, i32 0\n"
            f"  {ctx[x]} = shufflevector {t} {one}, {t} poison, <{len(x.src)} x i32> zeroinitializer")
  if x.dtype.scalar() is dtypes.bool and len(vals := dict.fromkeys(s for s in x.src if s.op is not Ops.CONST)) <= BOOL_SPLATS < len(x.src):
    # a per-lane gate whose lanes take a few values (a padded row: all valid but a tail that depends on the loop): each value
    # splatted and masked to its lanes, or-ed, where an insertelement per lane became a chain of mask-register shifts
    def lanes(f: Any) -> str: return "<" + ", ".join(f"i1 {'true' if f(s) else 'false'}" for s in x.src) + ">"
    cur = lanes(lambda s: s.op is Ops.CONST and s.arg)
    for i, v in enumerate(vals):
      one, splat, part, nxt = ctx.tmp(), ctx.tmp(), ctx.tmp(), ctx[x] if i == len(vals) - 1 else ctx.tmp()
      out += [f"{one} = insertelement {t} poison, i1 {ctx[v]}, i32 0",
              f"{splat} = shufflevector {t} {one}, {t} poison, <{len(x.src)} x i32> zeroinitializer",
              f"{part} = and {t} {splat}, {lanes(lambda s: s is v)}", f"{nxt} = or {t} {cur}, {part}"]
      cur = nxt
    return "\n  ".join(out)
  for i, s in enumerate(x.src):
    nxt = ctx[x] if i == len(x.src) - 1 else ctx.tmp()
    out.append(f"{nxt} = insertelement {t} {cur}, {et} {ctx[s]}, i32 {i}")
    cur = nxt
  return "\n  ".join(out)

def _render_gep(ctx: LLVMRenderer, x: UOp) -> str:
  st = ctx.ty(x.src[0].dtype)
  if len(x.arg) == 1: return f"{ctx[x]} = extractelement {st} {ctx[x.src[0]]}, i32 {x.arg[0]}"
  mask = ", ".join(f"i32 {i}" for i in x.arg)
  return f"{ctx[x]} = shufflevector {st} {ctx[x.src[0]]}, {st} poison, <{len(x.arg)} x i32> <{mask}>"

def _render_if(ctx: LLVMRenderer, x: UOp) -> str:
  k = ctx.loop_label[x] = ctx.fresh_label("if")
  return f"br i1 {ctx[x.src[0]]}, label %{k}.then, label %{k}.end\n{ctx.label(k + '.then')}"

llvm_rewrite = PatternMatcher([
  (UPat(Ops.CONST, name="x"), lambda ctx, x: ctx.const(x.arg, x.dtype)),
  # AFTER only orders memory accesses (its value is its first source); the linear order already says it
  (UPat(Ops.AFTER, name="x"), lambda ctx, x: ctx[x.src[0]]),
  (UPat(Ops.VCONST, name="x"), lambda ctx, x: "<" + ", ".join(f"{ctx.ty(x.dtype.scalar())} {ctx.const(v, x.dtype.scalar())}"
                                                                for v in x.arg) + ">"),
  (UPat(Ops.DEFINE_REG, name="x"), lambda ctx, x: ctx.allocas.append(f"{ctx[x]} = alloca [{x.dtype.size} x {ctx.mem_ty(x.dtype.base)}], "
                                                                    f"align {ctx.reg_align(x)}{ctx.alloca_space()}") or ""),
  (UPat(Ops.DEFINE_LOCAL, name="x"), lambda ctx, x: ctx.render_define_local(x)),
  (UPat(Ops.SPECIAL, name="x"), lambda ctx, x: ctx.render_special(x)),
  (UPat(Ops.BARRIER), lambda ctx: ctx.render_barrier()),
  (UPat(Ops.RANGE, name="x"), _render_range),
  (UPat(Ops.END, name="x"), _render_end),
  (UPat(Ops.IF, name="x"), _render_if),
  (UPat(Ops.ENDIF, name="x"), lambda ctx, x: f"br label %{ctx.loop_label[x.src[0]]}.end\n{ctx.label(ctx.loop_label[x.src[0]] + '.end')}"),
  (UPat(Ops.INDEX, name="x"), lambda ctx, x: f"{ctx[x]} = getelementptr inbounds {ctx.mem_ty(x.src[0].dtype.base)}, "
   f"{ctx.ptr_ty(x.src[0].dtype)} {ctx[x.src[0]]}, {ctx.ty(x.src[1].dtype)} {ctx[x.src[1]]}"),
  (UPat(Ops.LOAD, name="x"), _render_load),
  (UPat(Ops.STORE, name="x"), _render_store),
  (UPat(Ops.CAST, name="x"), _render_cast),
  (UPat(Ops.BITCAST, name="x"), lambda ctx, x: f"{ctx[x]} = bitcast {ctx.ty(x.src[0].dtype)} {ctx[x.src[0]]} to {ctx.ty(x.dtype)}"),
  (UPat(Ops.VECTORIZE, name="x"), _render_vectorize),
  (UPat(Ops.GEP, name="x"), _render_gep),
  (UPat(GroupOp.ALU, name="x"), _render_alu),
])

class Param(NamedTuple):
  """A parameter of a kernel's function: `ty attrs name` in its signature, `ty name` where a call passes it on."""
  ty: str
  name: str
  attrs: str = ""   # e.g. "noalias", "noalias align 4"
  def __str__(self) -> str: return f"{self.ty} {self.attrs} {self.name}" if self.attrs else f"{self.ty} {self.name}"
  def arg(self) -> str: return f"{self.ty} {self.name}"

class LLVMRenderer(Renderer):
  """Renders LLVM IR. Subclasses set the target (triple, data layout), the calling convention, address spaces and thread ids."""
  suffix = "LLVM"
  target_triple: str | None = None     # None: let the compiler set it on the parsed module
  data_layout: str | None = None
  kernel_cconv: str = ""               # e.g. "amdgpu_kernel ", "ptx_kernel "
  kernel_attrs: str = "nounwind"
  global_addrspace: int = 0            # address space of kernel buffers
  local_addrspace: int = 3             # address space of DEFINE_LOCAL
  private_addrspace: int = 0           # address space of allocas (DEFINE_REG, loop counters): 5 on amdgcn
  # the device allocates (and views) buffers at multiples of their element size: `align` on the buffer parameters lets LLVM use
  # wide loads (AMD, NV)
  aligned_params: bool = False
  string_rewrite: PatternMatcher = llvm_rewrite
  extra_matcher: PatternMatcher | None = None

  def __getitem__(self, u: UOp) -> str: return self.r[u]

  # *** types and literals ***

  def ty(self, dt: DType) -> str:
    """The LLVM type of a value of `dt` (bool is i1 in registers)."""
    if (t := _TYPES.get(dt)) is not None: return t
    if isinstance(dt, PtrDType): return self.ptr_ty(dt)
    if dt.scalar() not in _SCALAR: raise NotImplementedError(f"{type(self).__name__} has no LLVM type for {dt}")
    t = _TYPES[dt] = _SCALAR[dt.scalar()] if dt.count == 1 else f"<{dt.count} x {_SCALAR[dt.scalar()]}>"
    return t
  def mem_ty(self, dt: DType) -> str:
    """The LLVM type of `dt` in memory: bool is a byte there, as in C."""
    return self.ty(dt) if dt.scalar() is not dtypes.bool else ("i8" if dt.count == 1 else f"<{dt.count} x i8>")
  def ptr_ty(self, dt: DType) -> str:
    space = self.global_addrspace if not isinstance(dt, PtrDType) or dt.addrspace == AddrSpace.GLOBAL else \
            self.local_addrspace if dt.addrspace == AddrSpace.LOCAL else self.private_addrspace
    return "ptr" if space == 0 else f"ptr addrspace({space})"

  def reg_align(self, x: UOp) -> int:
    """Alignment of a DEFINE_REG array: a cache line for arrays of a line or more (packed inputs read by vector loads, which
    would straddle two lines at every other row otherwise)."""
    assert isinstance(x.dtype, PtrDType)
    return 64 if x.dtype.size * x.dtype.base.itemsize >= 64 else max(16, x.dtype.base.itemsize)
  def alloca_space(self) -> str: return f", addrspace({self.private_addrspace})" if self.private_addrspace else ""
  def private_ptr(self) -> str: return f"ptr addrspace({self.private_addrspace})" if self.private_addrspace else "ptr"

  def const(self, v: Any, dt: DType) -> str:
    """A literal of `dt` (a splat for vector dtypes)."""
    if dt.count > 1: return "<" + ", ".join(f"{self.ty(dt.scalar())} {self.const(v, dt.scalar())}" for _ in range(dt.count)) + ">"
    s = dt.scalar()
    if s is dtypes.bool: return "true" if v else "false"
    if dtypes.is_int(s): return str(int(v))
    v = float(v)
    if s is dtypes.float16: return "0xH%04X" % struct.unpack("<H", struct.pack("<e", v))[0]
    if s is dtypes.bfloat16: return "0xR%04X" % float_to_bf16_bits(v)
    if s is dtypes.float32 and not math.isnan(v) and not math.isinf(v): v = struct.unpack("<f", struct.pack("<f", v))[0]
    # LLVM spells float constants as the hex of the double holding the same value
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]
  def mem_const(self, v: Any, dt: DType) -> str: return str(int(v)) if dt.scalar() is dtypes.bool and dt.count == 1 else self.const(v, dt)

  def intrinsic(self, fn: str, dt: DType, nargs: int) -> str:
    t = self.ty(dt)
    mangle = _MANGLE[_SCALAR[dt.scalar()]] if dt.count == 1 else f"v{dt.count}{_MANGLE[_SCALAR[dt.scalar()]]}"
    name = f"@llvm.{fn}.{mangle}"
    self.declares[f"declare {t} {name}({', '.join([t] * nargs)})"] = None
    return name

  # *** hooks for GPU subclasses ***

  def special_intrinsic(self, x: UOp) -> str:
    """The `@llvm....` function (no arguments, i32 result) that reads SPECIAL x's thread id: gidxN the workgroup's, lidxN the
    work-item's, along axis N."""
    raise NotImplementedError(f"{type(self).__name__} has no thread ids; name SPECIAL {x.arg}'s intrinsic in a subclass")
  def render_special(self, x: UOp) -> str:
    fn = self.special_intrinsic(x)
    self.declares[f"declare i32 {fn}()"] = None
    if self.ty(x.dtype) == "i32": return f"{self[x]} = call i32 {fn}()"
    t = self.tmp()
    return f"{t} = call i32 {fn}()\n  {self[x]} = zext i32 {t} to {self.ty(x.dtype)}"
  def render_barrier(self) -> str: raise NotImplementedError(f"{type(self).__name__} has no BARRIER")
  def render_define_local(self, x: UOp) -> str:
    assert isinstance(x.dtype, PtrDType)  # DEFINE_LOCAL is always a pointer
    name = f"@{to_function_name(self.kernel_name)}.temp{x.arg}"
    self.globals[f"{name} = internal addrspace({self.local_addrspace}) global [{x.dtype.size} x {self.mem_ty(x.dtype.base)}] undef, "
                 f"align 16"] = None
    self.r[x] = name
    return ""
  def render_params(self, bufs: list[UOp], vars_: list[UOp]) -> list[Param]:
    # variables arrive as 32-bit ints (the launch ABI); wider index math gets them sign-extended at entry
    for v in vars_:
      if self.ty(v.dtype) != "i32": self.allocas.append(f"{self[v]} = sext i32 {self[v]}.arg to {self.ty(v.dtype)}")
    return [Param(self.ptr_ty(b.dtype), self[b], "noalias" + (f" align {b.dtype.base.itemsize}" if self.aligned_params else "")) for b in bufs] + \
           [Param("i32", self[v] + (".arg" if self.ty(v.dtype) != "i32" else "")) for v in vars_]
  def render_prologue(self, params: list[Param]) -> str:
    """Instructions of the entry block after its allocas, before the kernel's first op ("" for none)."""
    return ""
  def render_return(self) -> str:
    """The function's last instructions (the body's end flows into them): `ret void` and what must come before it."""
    return "ret void"

  # *** bookkeeping the rules use ***

  def tmp(self) -> str:
    self.ntmp += 1
    return f"%t{self.ntmp}"
  def fresh_label(self, prefix: str) -> str:
    self.nlabel += 1
    return f"{prefix}{self.nlabel}"
  def label(self, name: str) -> str:
    self.block = name
    return f"{name}:"

  def render(self, name: str, uops: list[UOp]) -> str:
    """LLVM IR of the kernel `name`. Runs on a copy of the renderer so the name table is private to this call."""
    ctx = copy.copy(self)
    ctx.kernel_attrs = self.function_attrs(name, uops)
    return ctx._render(to_function_name(name), uops)

  def function_attrs(self, name: str, uops: list[UOp]) -> str:
    """The attributes of kernel `name`'s function (`attributes #0`): a GPU renderer's add the work-group size `uops` are built
    for (their lidx sizes), raising ValueError where the device cannot run it."""
    return self.kernel_attrs

  def _render(self, name: str, uops: list[UOp]) -> str:
    """The module of one function, `name`, running `uops`."""
    self.start_module()
    return self.module([self.function(name, uops)])

  def start_module(self) -> None:
    """Empties what the functions of a module share: the globals and declarations they add, and the lines after the attributes."""
    self.globals: dict[str, None] = {}
    self.declares: dict[str, None] = {}
    # after the attributes: what a subclass adds there (the CPU renderer's SFENCE declaration, where streaming kernels always had it)
    self.trailer: dict[str, None] = {}
    # whether a rule rounded a value to bfloat (a cast to it, bfloat arithmetic): HostLLVMRenderer then defines __truncsfbf2
    self.rounds_to_bfloat = False

  def function(self, name: str, uops: list[UOp]) -> str:
    """The definition of the function `name` running `uops`; the globals and declarations it needs go to the module's."""
    self.kernel_name, self.ntmp, self.nlabel, self.block = name, 0, 0, "entry"
    self.r: dict[UOp, str] = {}   # each value's name (or a literal's text)
    self.allocas: list[str] = []
    self.loop_label: dict[UOp, str] = {}
    self.open_order: dict[UOp, int] = {}
    self.defined_in: dict[UOp, str] = {}   # the block each value was rendered in: a later op there may reuse it
    bufs: list[UOp] = []
    vars_: list[UOp] = []
    body: list[str] = []
    # (once per node: the names it looks up a kernel's thousands of times)
    r, defined_in, rewrite = self.r, self.defined_in, self.string_rewrite.rewrite
    for i, u in enumerate(uops):
      if (op := u.op) is Ops.PARAM:
        r[u] = f"%data{u.arg}"
        bufs.append(u)
        continue
      if op is Ops.DEFINE_VAR:
        r[u] = f"%{to_function_name(u.arg[0])}"
        vars_.append(u)
        continue
      literal = op in _LITERAL_OPS and _literal(u)
      if op is Ops.RANGE:
        self.loop_label[u], self.open_order[u] = self.fresh_label("loop"), i
        r[u] = f"%ridx{self.nlabel}"
      elif op is Ops.DEFINE_REG: r[u] = f"%acc{u.arg}"
      elif not literal: r[u] = f"%v{i}"
      defined_in[u] = self.block
      txt = rewrite(u, self)
      if txt is None: raise NotImplementedError(f"{type(self).__name__} can't render {u.op.name} ({u.dtype}) in kernel {name}")
      assert isinstance(txt, str), f"rule for {u.op.name} returned {type(txt).__name__}, not str"
      if literal: r[u] = txt
      elif txt: body.append("  " + txt)
    params = self.render_params(bufs, vars_)
    fn = [f"define {self.kernel_cconv}void @{name}({', '.join(map(str, params))}) #0 {{", "entry:"] + ["  " + a for a in self.allocas]
    if prologue := self.render_prologue(params): fn.append("  " + prologue)
    return "\n".join(fn + body + ["  " + self.render_return(), "}"])

  def module(self, functions: list[str]) -> str:
    """The module of `functions` (definitions from function()): the target, the globals and declarations once each, the
    functions (a blank line apart), their attributes, then the trailer."""
    header = [f"target triple = \"{self.target_triple}\""] if self.target_triple else []
    if self.data_layout: header.append(f"target datalayout = \"{self.data_layout}\"")
    return "\n".join(header + list(self.globals) + list(self.declares) + ["\n\n".join(functions), f"attributes #0 = {{ {self.kernel_attrs} }}"] +
                     list(self.trailer)) + "\n"

# float -> bfloat16 (round to nearest even, NaN stays NaN): LLVM lowers `fptrunc float to bfloat` on x86 to a call of this
# compiler-runtime helper, which the process may not have (libgcc has it only from gcc 13): each host module that rounds to
# bfloat (LLVMRenderer.rounds_to_bfloat: a cast to it, or bfloat arithmetic, which LLVM computes in float) carries its own
# (hidden: never exported; not linkonce: the optimizer would drop it), rounding like dtypes.truncate
TRUNCSFBF2 = """define hidden bfloat @__truncsfbf2(float %x) nounwind {
  %b = bitcast float %x to i32
  %lsb = lshr i32 %b, 16
  %odd = and i32 %lsb, 1
  %bias = add i32 %odd, 32767
  %r = add i32 %b, %bias
  %h = lshr i32 %r, 16
  %nan = fcmp uno float %x, %x
  %q = select i1 %nan, i32 32704, i32 %h
  %t = trunc i32 %q to i16
  %bf = bitcast i16 %t to bfloat
  ret bfloat %bf
}
"""

class HostLLVMRenderer(LLVMRenderer):
  """LLVM IR for the CPU this process runs on (the triple and data layout come from the compiler): what core runs on the host
  for every device (core.device.hostjit) and the base of the CPU backend's LLVM renderer. A barrier is a release fence (the
  host code's stores become visible before what follows it, e.g. a doorbell write)."""
  device = "HOST"
  has_local = False
  masked_vectors = True
  def render_barrier(self) -> str: return "fence release"
  def module(self, functions: list[str]) -> str:
    return super().module(functions) + (TRUNCSFBF2 if self.rounds_to_bfloat else "")
