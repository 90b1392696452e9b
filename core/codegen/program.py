"""Kernel AST -> PROGRAM(SINK, DEVICE, LINEAR, SOURCE[, BINARY]): lower, linearize, render and compile a kernel for one device."""
from __future__ import annotations
import dataclasses, math, struct
from dataclasses import field
from typing import TYPE_CHECKING, Any
from core.ir.dtype import PtrDType, dtypes
from core.ir.ops import UOp, Ops, GroupOp
from core.ir.pattern import UPat, graph_rewrite
from core.ir.symbolic import shared_simplify
from core.codegen.lowerer import lower_kernel
from core.codegen.linearize import linearize, finalize
from core.helpers import LIFT_CONSTS, LRUCache, SPEC, VIZ, IMAGE, prod, frozen_record, gc_paused
if TYPE_CHECKING: from core.device.renderer import Renderer

@frozen_record
class ProgramSpec:
  """The PROGRAM uop's arg: how to launch the kernel its sources describe (its code lives in the sources, not here)."""
  name: str
  global_size: tuple[int, ...] = (1, 1, 1)
  local_size: tuple[int, ...] = (1, 1, 1)
  vars: tuple[UOp, ...] = ()
  outs: tuple[int, ...] = (0,)
  estimates: dict[str, int] = field(default_factory=dict, compare=False)
  # values of the variables that stand for the kernel's float literals (lift_constants), by variable arg: fixed per kernel
  consts: tuple[tuple[Any, int], ...] = ()

def launch_vals(spec: ProgramSpec, by_arg: dict[Any, int]) -> tuple[int, ...]:
  """The kernel's variable values in `spec.vars` order: its lifted literals, then the caller's variables by (name, min, max)."""
  fixed = dict(spec.consts)
  try: return tuple([fixed[v.arg] if v.arg in fixed else by_arg[v.arg] for v in spec.vars])
  except KeyError as e: raise RuntimeError(f"kernel {spec.name} needs a value for variable {e.args[0][0]!r}") from None

# *** float literals as kernel arguments: kernels that differ only in them (x + 0.5, x + 0.25) are one compiled program ***

LIT_PREFIX = "_lit"   # the lifted variables' names: _lit0, _lit1, ... in the kernel's own order (reserved)
# kept as literals: values rewrite rules and identities look for (x * 1, x + 0, x * -1), and the non-finite ones
_KEEP_LITERAL = (0.0, 1.0, -1.0)
# a kernel with more literals than this keeps them all: it is math with fixed coefficients (an erf polynomial), not a user's
# scalar, and every variable is a launch argument (METAL binds each in its own buffer slot, 31 in all)
MAX_LIFTED = 8

def liftable(u: UOp) -> bool:
  """Whether `u` is a float literal lift_constants makes a kernel argument (the eager path keys its schedules without them)."""
  return u.op is Ops.CONST and u.dtype is dtypes.float32 and math.isfinite(u.arg) and u.arg not in _KEEP_LITERAL

def lit_bits(value: float) -> int:
  """A float32 literal's bits as the int32 a lifted variable carries."""
  return struct.unpack("<i", struct.pack("<f", value))[0]

def lift_constants(ast: UOp) -> tuple[UOp, tuple[tuple[Any, int], ...]]:
  """`ast` with each distinct float32 literal (other than 0, 1, -1, inf, nan) read from an int32 kernel variable bitcast to
  float, numbered in graph order, and the variables' values (the literals' bits); unchanged when it has more than
  MAX_LIFTED. Equal kernels but for those literals map to one AST, so codegen and compile caches keyed by it serve every value."""
  lits = [u for u in ast.toposort() if liftable(u)]
  if not lits or len(lits) > MAX_LIFTED: return ast, ()
  sub, consts = {}, []
  for i, c in enumerate(lits):
    v = UOp.variable(f"{LIT_PREFIX}{i}", -2**31, 2**31 - 1, dtypes.int32)
    sub[c] = v.bitcast(dtypes.float32)
    consts.append((v.arg, lit_bits(c.arg)))
  return ast.substitute(sub), tuple(consts)

# PROGRAM's sources, in order; later stages fill later ones (get_program: the first four, compile_program: BINARY)
def program_device(p: UOp) -> str: return p.src[1].arg
def program_uops(p: UOp) -> tuple[UOp, ...]: return p.src[2].src
def program_source(p: UOp) -> str: return p.src[3].arg
def program_shape(p: UOp) -> list[int]:
  """The kernel's loop and thread extents in order (what DEBUG=2 shows as its shape); for a kernel its renderer wrote whole (no
  loops in its LINEAR, only PARAMs: Renderer.own_kernel) its launch's extents above 1."""
  shape = [u.src[0].arg for u in program_uops(p) if u.op in (Ops.RANGE, Ops.SPECIAL) and u.src[0].op is Ops.CONST]
  return shape or [s for s in (*p.arg.global_size, *p.arg.local_size) if s > 1]
def binary_nbytes(p: UOp) -> int:
  """Bytes of a compiled PROGRAM's binary (0 for a binary that is not bytes or text): what compiled-kernel caches bound."""
  return len(b) if len(p.src) == 5 and isinstance(b := p.src[4].arg, (bytes, bytearray, str)) else 0
def program_binary(p: UOp) -> bytes:
  if len(p.src) < 5: raise RuntimeError(f"kernel {p.arg.name} is not compiled yet (its PROGRAM has no BINARY: see compile_program)")
  return p.src[4].arg

def estimate(uops: list[UOp], threads: int = 1) -> dict[str, int]:
  """FLOPs and bytes touched, counting each op once per iteration of its enclosing loops."""
  ops = mem = 0
  trips = [threads]
  for u in uops:
    if u.op is Ops.RANGE:
      end = u.src[0]
      trips.append(trips[-1] * (end.arg if end.op is Ops.CONST else 1))
    elif u.op is Ops.END: trips.pop()
    elif u.op in GroupOp.ALU and u.dtype.scalar().name not in ("int32", "int64", "bool") or u.op is Ops.WHERE: ops += trips[-1] * u.dtype.count
    elif u.op in (Ops.LOAD, Ops.STORE):
      idx = u.src[0]
      base = idx.src[0] if idx.op is Ops.INDEX else idx
      if isinstance(base.dtype, PtrDType) and base.op is Ops.PARAM: mem += trips[-1] * (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).itemsize
  return {"ops": ops, "mem": mem}

# programs of lifted ASTs by (AST, renderer, optimize): what kernels differing only in float literals share
_lifted_programs: LRUCache = LRUCache("lifted_programs", 512)

def get_program(ast: UOp, renderer: Renderer, optimize: bool = True) -> UOp:
  """PROGRAM(ast, DEVICE, LINEAR, SOURCE) arg=ProgramSpec: optimize (unless `optimize` is False: the AST already carries its
  opts), lower the kernel `ast` (a SINK whose arg is the kernel name) and render it with `renderer`. With LIFT_CONSTS (the
  default) its float literals are kernel arguments (lift_constants): kernels that differ only in them share one PROGRAM
  (its first source is then the lifted AST) but for the spec's `consts`, this kernel's values."""
  if not LIFT_CONSTS: return _program(ast, renderer, optimize)
  lifted, consts = lift_constants(ast)
  if (prog := _lifted_programs.get(key := (lifted, renderer, optimize))) is None: prog = _lifted_programs[key] = _program(lifted, renderer, optimize)
  return prog.replace(arg=dataclasses.replace(prog.arg, consts=consts)) if consts else prog

def _program(ast: UOp, renderer: Renderer, optimize: bool) -> UOp:
  name = ast.arg or "kernel"
  # no collector inside: ResNet-18's 33 kernels set off ~10 full collections, a quarter of their codegen time (gc_paused)
  with gc_paused(), shared_simplify():
    if VIZ:
      from core.ir.rewrite_log import kernel
      from core.viz.server import serve_at_exit
      serve_at_exit()
      with kernel(f"{name} ({renderer.device})"): return _get_program(ast, renderer, optimize, name)
    return _get_program(ast, renderer, optimize, name)

def _get_program(ast: UOp, renderer: Renderer, optimize: bool, name: str) -> UOp:
  if optimize and (own := renderer.own_kernel(ast, name)) is not None:
    own_src, size, est = own
    params = tuple(sorted({u for u in ast.toposort() if u.op is Ops.PARAM}, key=lambda u: u.arg))
    return UOp(Ops.PROGRAM, src=(ast, UOp(Ops.DEVICE, arg=renderer.device), UOp(Ops.LINEAR, src=params), UOp(Ops.SOURCE, arg=own_src)),
               arg=ProgramSpec(name, size, (1, 1, 1), (), (0,), est))
  from core.codegen.opt import optimize as optimize_kernel
  from core.codegen.opt.expander import expand_kernel
  sink = expand_kernel(optimize_kernel(ast, renderer) if optimize else ast, vectorize=renderer.supports_float4,
                       masked=renderer.masked_vectors, vector_dtypes=renderer.vector_dtypes, simd_bytes=renderer.simd_width,
                       split_rows=renderer.split_tile_rows)
  sink, gsize, lsize = lower_kernel(sink, renderer.global_max, renderer.threads, renderer.scratch_bytes, renderer.scaled_exp2,
                                    renderer.max_ahead, renderer.fma_exp_shift, renderer.stream_min_bytes)
  if IMAGE:
    from core.codegen.image import lower_images
    sink = lower_images(sink, renderer)
  if dtypes.bfloat16 not in renderer.supported_dtypes and any(u.dtype.base is dtypes.bfloat16 for u in sink.toposort()):
    from core.codegen.decompose import pm_emulate_bf16
    sink = graph_rewrite(sink, pm_emulate_bf16, name="emulate bf16")
  if renderer.extra_matcher is not None: sink = graph_rewrite(sink, renderer.extra_matcher, renderer.rules_ctx(sink), name="renderer rules")
  uops = finalize(linearize(sink))
  if SPEC:
    from core.ir.spec import type_verify, program_spec
    type_verify(uops, program_spec)
  # launch sizes read from SPECIAL in case the renderer rules changed them
  gs, ls = list(gsize), list(lsize)
  for u in uops:
    if u.op is Ops.SPECIAL and u.arg.startswith("gidx"): gs[int(u.arg[4:])] = u.src[0].arg
    if u.op is Ops.SPECIAL and u.arg.startswith("lidx"): ls[int(u.arg[4:])] = u.src[0].arg
  src = renderer.render(name, uops)
  variables = tuple(u for u in uops if u.op is Ops.DEFINE_VAR)
  spec = ProgramSpec(name, tuple(gs), tuple(ls), variables, (0,), estimate(uops, prod(gs) * prod(ls)))
  return UOp(Ops.PROGRAM, src=(ast, UOp(Ops.DEVICE, arg=renderer.device), UOp(Ops.LINEAR, src=tuple(uops)), UOp(Ops.SOURCE, arg=src)), arg=spec)

# a compiled PROGRAM, as a plugin's pm_prep_program matches it: names p (the PROGRAM), device, linear and binary
compiled_program = UPat(Ops.PROGRAM, src=(UPat(Ops.SINK), UPat(Ops.DEVICE, name="device"), UPat(Ops.LINEAR, name="linear"), UPat(Ops.SOURCE),
                                          UPat(Ops.BINARY, name="binary")), name="p")

# binaries by (compiler, source) in this process: kernels that differ only in their lifted literals share one source
_binaries: LRUCache = LRUCache("binaries", 512, 256 << 20, len)

def compile_program(p: UOp, compiler: Any, binary: bytes | None = None) -> UOp:
  """The PROGRAM with its BINARY: the compiler's output for its SOURCE (from the compiler's disk cache when it has it), or
  `binary`, that output made already (core.hcq.state.compile_kernels' compile threads run only the compiler)."""
  if len(p.src) == 5: return p
  key = (compiler, program_source(p))
  if binary is not None: _binaries[key] = binary
  elif (binary := _binaries.get(key)) is None: binary = _binaries[key] = compiler.compile_cached(key[1])
  return p.replace(src=p.src + (UOp(Ops.BINARY, arg=binary),))
