"""Kernel AST -> ProgramSpec: lower, linearize and render a kernel for one renderer."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any
from core.ir.dtype import PtrDType, dtypes
from core.ir.ops import UOp, Ops, GroupOp
from core.ir.pattern import graph_rewrite
from core.codegen.lowerer import lower_kernel
from core.codegen.linearize import linearize, finalize
from core.helpers import SPEC, prod

@dataclass(frozen=True)
class ProgramSpec:
  """Everything needed to compile and launch one kernel."""
  name: str
  src: str
  device: str
  uops: tuple[UOp, ...]
  global_size: tuple[int, ...] = (1, 1, 1)
  local_size: tuple[int, ...] = (1, 1, 1)
  vars: tuple[UOp, ...] = ()
  outs: tuple[int, ...] = (0,)
  estimates: dict[str, int] = field(default_factory=dict, compare=False)
  ast: Any = field(default=None, compare=False)

def _estimate(uops: list[UOp], threads: int = 1) -> dict[str, int]:
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

def get_program(ast: UOp, renderer: Any, optimize: bool = True) -> ProgramSpec:
  """Optimize (unless `optimize` is False: the AST already carries its opts), lower the kernel `ast` (a SINK whose arg is the
  kernel name) and render it with `renderer`."""
  name = ast.arg or "kernel"
  from core.codegen.opt import optimize as optimize_kernel
  from core.codegen.opt.expander import expand_kernel
  sink = expand_kernel(optimize_kernel(ast, renderer) if optimize else ast, vectorize=getattr(renderer, "supports_float4", False))
  sink, gsize, lsize = lower_kernel(sink, getattr(renderer, "global_max", None), getattr(renderer, "threads", 0))
  if dtypes.bfloat16 not in renderer.supported_dtypes and any(u.dtype.base is dtypes.bfloat16 for u in sink.toposort()):
    from core.codegen.decompose import pm_emulate_bf16
    sink = graph_rewrite(sink, pm_emulate_bf16, name="emulate bf16")
  if renderer.extra_matcher is not None: sink = graph_rewrite(sink, renderer.extra_matcher, name="renderer rules")
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
  return ProgramSpec(name, src, renderer.device, tuple(uops), tuple(gs), tuple(ls), variables, (0,), _estimate(uops, prod(gs) * prod(ls)), ast)

def program_uop(spec: ProgramSpec, lib: bytes | None = None) -> UOp:
  """The PROGRAM node: (SINK, DEVICE, LINEAR, SOURCE[, BINARY])."""
  src = (spec.ast, UOp(Ops.DEVICE, arg=spec.device), UOp(Ops.LINEAR, src=spec.uops), UOp(Ops.SOURCE, arg=spec.src))
  return UOp(Ops.PROGRAM, src=src + ((UOp(Ops.BINARY, arg=lib),) if lib is not None else ()), arg=spec.name)
