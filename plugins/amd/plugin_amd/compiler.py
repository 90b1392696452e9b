"""The AMD compiler: LLVM IR -> an amdgcn ELF relocatable code object with llvmlite (no external linker), checked by prep."""
from __future__ import annotations
import functools, struct
from typing import Any
from core.device.compiler import Compiler, CompileError, LLVMTarget, llvm_target, llvm_object
from plugin_amd.renderer import TRIPLE, ArchInfo, arch_info

def _llvm() -> Any: return llvm_target(TRIPLE, "AMDGPU")

def elf_mach(obj: bytes) -> int:
  """EF_AMDGPU_MACH of an ELF code object: the low byte of e_flags."""
  return struct.unpack_from("<I", obj, 48)[0] & 0xff

_PROBE = 'define amdgpu_kernel void @probe() {\n  ret void\n}\n'

@functools.cache
def check_arch(arch: str) -> None:
  """Raises CompileError when the installed LLVM does not know `arch`. LLVM only warns about an unknown processor and then
  aborts the process on the first real kernel, so an empty kernel is compiled first and its ELF machine checked."""
  info, llvm = arch_info(arch), _llvm()
  tm = llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=info.name, features=info.features, opt=0, reloc="pic")
  mod = llvm.parse_assembly(_PROBE)
  mod.triple = TRIPLE
  got = elf_mach(tm.emit_object(mod))
  if got != info.mach:
    raise CompileError(f"the LLVM in llvmlite {'.'.join(map(str, llvm.llvm_version_info))} does not know AMD arch {arch} "
                       f"(code object machine {got:#x}, expected {info.mach:#x}); upgrade llvmlite or choose another arch")

class AMDCompiler(Compiler):
  """LLVM IR -> code object bytes: parse, verify, optimize (O2), emit the ELF object for `arch`. Every output is run through
  the plugin's own prep step (ELF reader, kernel descriptor, metadata) so a code object prep cannot load is a compile error."""
  def __init__(self, arch: str | None = None, opt: int = 2):
    self.info: ArchInfo = arch_info(arch)
    llvm = _llvm()
    check_arch(self.info.name)
    self.llvm, self.opt = llvm, opt
    self.target = LLVMTarget(TRIPLE, self.info.name, self.info.features, opt, "pic")
    self.tm = self.target.machine()
    super().__init__(f"amd_llvm_{'.'.join(map(str, llvm.llvm_version_info))}_{self.info.name}{self.info.features}_O{opt}")

  def compile(self, src: str) -> bytes:
    obj = llvm_object(self.target, src, self.info.name)
    from plugin_amd.prep import PrepError, load_code_object
    try: load_code_object(obj, arch=self.info)
    except PrepError as e: raise CompileError(f"the code object LLVM made for {self.info.name} does not load: {e}\n--- source ---\n{src}") from e
    return obj

  def disassemble(self, lib: bytes) -> str:
    import shutil, subprocess, tempfile
    tool = shutil.which("llvm-objdump")
    if tool is None: return "<llvm-objdump not found: install LLVM's tools to disassemble AMD code objects>"
    with tempfile.NamedTemporaryFile(suffix=".o") as f:
      f.write(lib)
      f.flush()
      try: return subprocess.run([tool, "-d", f"--mcpu={self.info.name}", f.name], capture_output=True, text=True, timeout=60).stdout
      except (OSError, subprocess.SubprocessError) as e: return f"<llvm-objdump failed: {e}>"
