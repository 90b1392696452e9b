"""Helpers for the AMD plugin tests: hand-linearized kernels (one with LDS and a barrier), and LLVM's own report of a kernel."""
from __future__ import annotations
import functools, re
from typing import Any
from core.ir.dtype import AddrSpace, DType, dtypes
from core.ir.ops import UOp, Ops, AxisType

ARCH_NAMES = ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"]

def linear(*roots: UOp) -> list[UOp]:
  """Every node under `roots` in dependency order (a hand-driven linearizer)."""
  out: dict[UOp, None] = {}
  for r in roots:
    for u in r.toposort(): out.setdefault(u, None)
  return list(out)

def c(v: Any, dt: DType = dtypes.int32) -> UOp: return UOp.const(dt, v)
def special(name: str, n: int) -> UOp: return UOp(Ops.SPECIAL, dtypes.int32, (c(n),), name)

def lds_kernel(local: int = 64, groups: int = 4) -> list[UOp]:
  """out[g*L + l] = in[g*L + (L-1-l)]: each workgroup reverses its slice through LDS (store, barrier, load)."""
  out, inp = UOp.param(0, dtypes.float32.ptr(local * groups)), UOp.param(1, dtypes.float32.ptr(local * groups))
  gid, lid = special("gidx0", groups), special("lidx0", local)
  lds = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(local, AddrSpace.LOCAL), (), 0)
  base = gid * c(local)
  st = lds.index(lid).store(inp.index(base + lid).load())
  bar = UOp(Ops.BARRIER, dtypes.void, (st,))
  v = lds.after(bar).index(c(local - 1) - lid).load()
  return linear(out.index(base + lid).store(v))

def loop_kernel(dt: DType = dtypes.float32, fn: Ops = Ops.SIN) -> list[UOp]:
  """out[g] = sum_i fn(in[g*8 + i]) * n over an 8-long loop, with an int32 variable n: registers, a loop and a variable."""
  out, inp = UOp.param(0, dt.ptr(64)), UOp.param(1, dt.ptr(512))
  n = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("n", 1, 10))
  gid = special("gidx0", 64)
  r = UOp(Ops.RANGE, dtypes.int32, (c(8),), (0, AxisType.REDUCE))
  acc = UOp(Ops.DEFINE_REG, dt.ptr(1, AddrSpace.REG), (), 0)
  init = acc.index(c(0)).store(c(0.0, dt))
  acc_in = acc.after(init, r)
  x = inp.index(gid * c(8) + r).load()
  upd = acc_in.index(c(0)).store(acc_in.index(c(0)).load() + UOp(fn, dt, (x,)) * n.cast(dt)).end(r)
  return linear(out, inp, n, out.index(gid).store(acc.after(upd).index(c(0)).load()))

@functools.cache
def compiler(arch: str) -> Any:
  from plugin_amd.compiler import AMDCompiler
  return AMDCompiler(arch)

def llvm_report(arch: str, src: str) -> tuple[dict[str, int], dict[str, Any]]:
  """What LLVM itself says about the kernel in `src`: the `.amdhsa_*` directives of its assembly (the kernel descriptor
  as the assembler would write it) and the scalar fields and argument list of its `.amdgpu_metadata` YAML."""
  comp = compiler(arch)
  llvm = comp.llvm
  mod = llvm.parse_assembly(src)
  mod.triple, mod.data_layout = "amdgcn-amd-amdhsa", str(comp.tm.target_data)
  pb = llvm.create_pass_builder(comp.tm, llvm.create_pipeline_tuning_options(speed_level=comp.opt))
  pb.getModulePassManager().run(mod, pb)
  asm = comp.tm.emit_assembly(mod)
  directives = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*\.amdhsa_(\w+)\s+(-?\d+)\s*$", asm, re.M)}
  yaml = asm.split(".amdgpu_metadata", 1)[1].split(".end_amdgpu_metadata", 1)[0]
  kernel = yaml.split("amdhsa.kernels:", 1)[1]
  fields: dict[str, Any] = {m.group(1): int(m.group(2)) for m in re.finditer(r"^    (\.\w+):\s+(\d+)\s*$", kernel, re.M)}
  # .args: one "- " entry per argument, keys at deeper indentation; the list ends at the next kernel-level key
  args: list[dict[str, str]] = []
  in_args = False
  for ln in kernel.splitlines():
    if re.match(r"^\s*(- )?\.args:", ln): in_args = True
    elif in_args and re.match(r"^    (- )?\.\w", ln): in_args = False
    elif in_args and (m := re.match(r"^\s+(- )?(\.\w+):\s+(\S+)", ln)):
      if m.group(1): args.append({})
      args[-1][m.group(2)] = m.group(3)
  fields["args"] = [(a[".value_kind"], int(a[".offset"]), int(a[".size"])) for a in args]
  return directives, fields
