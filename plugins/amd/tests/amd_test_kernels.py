"""Helpers for the AMD plugin tests: the arch list, core's hand-linearized kernels (core.testing.kernels), and LLVM's own report
of a kernel."""
from __future__ import annotations
import functools, re
from typing import Any

ARCH_NAMES = ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"]

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
