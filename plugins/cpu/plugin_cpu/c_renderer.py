"""The CPU plugin's C renderer: kernels as C functions compiled by the system C compiler (DEV=CPU:C), with the rules, vectors and
threads of the host LLVM renderer (plugin_cpu/renderer.py)."""
from __future__ import annotations
from typing import Callable
from core.ir.dtype import DType, dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.codegen.c_style import CStyleRenderer, access_condition, base_rewrite, c_code_for_op, _render_load as _c_render_load
from core.device.compiler import CompileError
from plugin_cpu.compiler import arch_flags, cc_supports, find_cc, host_flags, simd_bytes, x86_fma
from plugin_cpu.streaming import NT_ARG, store_width
from plugin_cpu.prefetch import prefetch_offsets, line_offsets
from plugin_cpu import renderer as R
from plugin_cpu.renderer import _HOST_DTYPES, HostTarget, _check_block, _narrowed, extra_rules, host_vector_regs

# x86 FMA builtins by vector width in bytes (the C code is compiled with -ffp-contract=off, so `a*b+c` is never fused on its own)
_X86_FMA = {16: "__builtin_ia32_vfmaddps", 32: "__builtin_ia32_vfmaddps256"}

def _c_mulacc(fma: bool) -> Callable[[str, str, str, DType], str]:
  """One fused multiply-add (one rounding) for the accumulator updates pm_fuse_mulacc makes; `a*b+c` where there is none.
  `fma`: the target CPU has x86 FMA3 (the vector builtins then exist)."""
  def mulacc(a: str, b: str, c: str, dt: DType) -> str:
    if dt.scalar() is dtypes.float32 and dt.count == 1: return f"__builtin_fmaf({a},{b},{c})"
    if dt.scalar() is dtypes.float64 and dt.count == 1: return f"__builtin_fma({a},{b},{c})"
    if dt.scalar() is dtypes.float32 and fma and (fn := _X86_FMA.get(dt.itemsize)): return f"{fn}({a},{b},{c})"
    return f"(({a}*{b})+{c})"
  return mulacc

# GCC's and clang's spellings of one streaming store of an aligned 16/32/64-byte integer vector (the value is bit-cast to it)
_C_STREAM = {16: "__builtin_ia32_movntdq", 32: "__builtin_ia32_movntdq256", 64: "__builtin_ia32_movntdq512"}

def _c_stream_prefix(w: int) -> list[str]:
  return [f"typedef long long core_nt{w} __attribute__((vector_size({w})));",
          f"typedef long long core_nt{w}u __attribute__((vector_size({w}),aligned(1)));",
          "#if defined(__clang__)", f"#define CORE_STREAM{w}(p, v) __builtin_nontemporal_store((v), (p))",
          "#else", f"#define CORE_STREAM{w}(p, v) {_C_STREAM[w]}((p), (v))", "#endif",
          # a vector wider than one instruction is split with __builtin_shufflevector: clang, and GCC from 12 on
          "#if !defined(CORE_NT_SPLIT) && (defined(__clang__) || __GNUC__ >= 12)", "#define CORE_NT_SPLIT 1", "#endif"]

def _c_stream_store(ctx: CPUCRenderer, x: UOp) -> str:
  """A STORE marked NT_ARG: streaming stores of whole aligned chunks when the address is aligned (and a gate true), else plain
  ones (a view or a foreign pointer may not be aligned, and a misaligned streaming store faults)."""
  idx, val = x.src[0], x.src[1]
  w, t = store_width(x, ctx.simd_width), ctx.render_dtype(val.dtype)
  ctx.stream_widths[w] = None
  n, lanes = val.dtype.itemsize // w, w // val.dtype.scalar().itemsize
  parts = [f"(core_nt{w})nt_v"] if n == 1 else \
          [f"(core_nt{w})__builtin_shufflevector(nt_v, nt_v, {', '.join(str(k * lanes + j) for j in range(lanes))})" for k in range(n)]
  decl = ", ".join(f"nt_{k} = {p}" for k, p in enumerate(parts))
  stream = " ".join(f"CORE_STREAM{w}((core_nt{w}*)nt_p + {k}, nt_{k});" for k in range(n))
  plain = " ".join(f"((core_nt{w}u*)nt_p)[{k}] = nt_{k};" for k in range(n))
  gate = f"({cond}) && " if (cond := access_condition(ctx, idx, val.dtype.itemsize)) is not None else ""
  st = (f"{{ {t} nt_v = {ctx[val]}; void* nt_p = {ctx[idx]}; core_nt{w} {decl}; "
        f"if ({gate}((unsigned long long)nt_p & {w - 1}) == 0) {{ {stream} }} else {'if (' + cond + ') ' if cond else ''}{{ {plain} }} }}")
  if n == 1: return st
  return f"#ifdef CORE_NT_SPLIT\n  {st}\n#else\n  *{ctx.render_vec_ptr(idx, val.dtype)} = {ctx[val]};\n#endif"

def _c_prefetch_load(ctx: CPUCRenderer, x: UOp) -> str | None:
  """A LOAD that also prefetches (plugin_cpu/prefetch.py): read prefetches `off` elements on (its locality hint), one per cache line
  of the vector, then the load, in one comma expression (no spread prefetch: prefetch_offsets is not given the registers)."""
  if (pf_at := ctx.prefetch.get(x)) is None: return None
  off, loc, _ = pf_at
  pf = "".join(f"__builtin_prefetch(({ctx[x.src[0]]})+{o}, 0, {loc}), " for o in line_offsets(x, off))
  return f"({pf}{_c_render_load(ctx, x)})"


class CPUCRenderer(HostTarget, CStyleRenderer):
  """`void name(T* restrict data0, ..., int var0, ..., int gidx0)` compiled by the system C compiler. The block index gidx0 is a
  parameter, present only in kernels the optimizer split into thread blocks."""
  suffix = "C"
  # one thread of control per kernel: BARRIER orders memory (the HCQ submit program writes the ring, then the doorbell)
  barrier = "__atomic_thread_fence(__ATOMIC_RELEASE);"
  has_local = False
  supported_dtypes = _HOST_DTYPES
  string_rewrite = PatternMatcher([(UPat(Ops.STORE, name="x", arg=NT_ARG), _c_stream_store), (UPat(Ops.LOAD, name="x"), _c_prefetch_load)]) + \
    base_rewrite
  vector_alu = CStyleRenderer.vector_alu | {Ops.MULACC}

  def __init__(self, cc: str | None = None, arch: str | None = None):
    if arch is not None: self.arch = arch   # DEV=CPU:C:<arch>: that CPU model's features (compiler.arch_flags)
    self.target(host_flags() if arch is None else arch_flags(arch))
    # the compiler that will build the kernels ($CC, as CCompiler finds it) decides whether half is native or emulated: clang
    # before 15 has no _Float16 on x86-64. Without a compiler nothing gets built, and CCompiler says so.
    try: self.native_half = cc_supports(cc or find_cc(), "_Float16")
    except CompileError: pass

  def target(self, flags: frozenset[str]) -> None:
    """Render for a CPU with `flags`: its vectors, registers, rules and FMA."""
    self.flags, self.simd_width = flags, simd_bytes(flags)
    self.simd_regs = host_vector_regs(self.simd_width)
    self.extra_matcher = extra_rules(self.simd_width)
    self.code_for_op = {**c_code_for_op, Ops.MULACC: _c_mulacc(x86_fma(flags))}

  def narrowed(self, simd: int) -> CPUCRenderer: return _narrowed(self, simd)

  def reg_attr(self, x: UOp) -> str:
    # packed panels (PACK) are read with vector loads: on a cache line, no load straddles two
    return " __attribute__((aligned(64)))" if x.dtype.size * x.dtype.base.itemsize >= 64 else ""  # type: ignore[attr-defined]

  def _render(self, name: str, uops: list[UOp]) -> str:
    self.blocks: list[UOp] = []   # SPECIAL gidx0 seen; this is the per-render copy
    self.stream_widths: dict[int, None] = {}   # widths of the streaming stores rendered
    # (no spread over the row blocks, prefetch.SPREAD_BELOW_REGS: gcc's build of the gated prefetch ran 1.22x the time, clang's 0.78x)
    self.prefetch = prefetch_offsets(uops, self.panel_budget()) if R.PREFETCH else {}
    return super()._render(name, uops)

  def render_special(self, x: UOp) -> str:
    _check_block(x)
    self.blocks.append(x)
    # the body declares `T gidx0 = <this>;`: an int32 index is the parameter itself (render_kernel drops that line)
    return x.arg if x.dtype.itemsize == 4 else f"{x.arg}_arg"

  def render_kernel(self, name: str, bufs: list[UOp], vars_: list[UOp], prefix: list[str], body: list[str]) -> str:
    for x in self.blocks[:1]:
      if x.dtype.itemsize == 4: body = [ln for ln in body if ln.strip() != f"{self.render_dtype(x.dtype)} {x.arg} = {x.arg};"]
      else: self.r[x] = f"{x.arg}_arg"   # the body is rendered: only the parameter's name reads this now
    if self.stream_widths:
      prefix = prefix + [ln for w in self.stream_widths for ln in _c_stream_prefix(w)]
      # streaming stores are weakly ordered: fence them before the block returns, so whoever sees the kernel done sees its data
      body = body + ["  __builtin_ia32_sfence();"]
    # the block index is the last parameter, after the buffers and the variables, as cpu_launch passes it
    return super().render_kernel(name, bufs, vars_ + self.blocks[:1], prefix, body)

