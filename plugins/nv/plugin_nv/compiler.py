"""The PTX compiler: LLVM IR -> PTX text with llvmlite (in process), PTX -> cubin (an sm_XX ELF) with NVIDIA's ptxas."""
from __future__ import annotations
import functools, glob, os, re, shutil, subprocess, tempfile, threading
from typing import Any
from core.device.compiler import Compiler, CompileError
from plugin_nv.renderer import TRIPLE, ArchInfo, arch_info

PTXAS_INSTALL = 'pip install "plugin-nv[ptxas]" (NVIDIA\'s nvidia-cuda-nvcc 13.0 wheel) or install the CUDA toolkit 13.0'
_lock = threading.Lock()   # LLVM's target registry is initialised once per process

@functools.cache
def _llvm() -> Any:
  import llvmlite.binding as llvm
  with _lock:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
  try: llvm.Target.from_triple(TRIPLE)
  except RuntimeError as e: raise CompileError(f"this llvmlite's LLVM was built without the NVPTX target: {e}") from e
  return llvm

def _wheel_ptxas() -> str | None:
  """ptxas inside the nvidia-cuda-nvcc wheel (nvidia/cu13/bin/ptxas in site-packages), found through its metadata."""
  import importlib.metadata
  try: dist = importlib.metadata.distribution("nvidia-cuda-nvcc")
  except importlib.metadata.PackageNotFoundError: return None
  for f in dist.files or ():
    if f.name == "ptxas" and f.parent.name == "bin":
      path = str(dist.locate_file(f))
      if os.path.isfile(path):
        if not os.access(path, os.X_OK): os.chmod(path, os.stat(path).st_mode | 0o111)   # some installers drop the x bit
        return path
  return None

def find_ptxas() -> str | None:
  """ptxas: $PTXAS, else on PATH, else in the CUDA toolkit folders (/usr/local/cuda*/bin), else in the pip wheel; None if none."""
  if (env := os.environ.get("PTXAS")): return env if os.path.isfile(env) else None
  if (p := shutil.which("ptxas")): return p
  for p in sorted(glob.glob("/usr/local/cuda*/bin/ptxas"), reverse=True):
    if os.access(p, os.X_OK): return p
  return _wheel_ptxas()

@functools.cache
def ptxas_version(ptxas: str) -> str:
  """ptxas's release, e.g. "13.0.88" (from `ptxas --version`: "... release 13.0, V13.0.88")."""
  try: out = subprocess.run([ptxas, "--version"], capture_output=True, text=True, timeout=60).stdout
  except (OSError, subprocess.SubprocessError) as e: raise CompileError(f"ptxas at {ptxas} does not run ({e}); {PTXAS_INSTALL}") from e
  m = re.search(r"V(\d+\.\d+\.\d+)", out)
  if m is None: raise CompileError(f"ptxas at {ptxas} printed no version ({out.strip()[:200]!r}); {PTXAS_INSTALL}")
  return m.group(1)

class PTXCompiler(Compiler):
  """LLVM IR -> cubin bytes: llvmlite parses, verifies and optimizes the IR (O3) and emits PTX for `arch`; ptxas assembles it.
  The cache key names LLVM, the PTX ISA version, the arch and ptxas's version."""
  def __init__(self, arch: str | None = None, opt: int = 3):
    self.info: ArchInfo = arch_info(arch)
    self.llvm, self.opt = _llvm(), opt
    self.tm = self.llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=self.info.name, features=self.info.ptx, opt=opt)
    # without ptxas the IR still renders and turns into PTX (to_ptx); compile() says what to install
    self.ptxas = find_ptxas()
    llvm_ver = ".".join(map(str, self.llvm.llvm_version_info))
    ptxas_ver = ptxas_version(self.ptxas) if self.ptxas is not None else "missing"
    super().__init__(f"nv_ptx_llvm{llvm_ver}_{self.info.name}{self.info.ptx}_O{opt}_ptxas{ptxas_ver}")

  def to_ptx(self, src: str) -> str:
    """The PTX text LLVM makes of the IR `src` (parse, verify, optimize, emit)."""
    llvm = self.llvm
    try:
      mod = llvm.parse_assembly(src)
      mod.triple, mod.data_layout = TRIPLE, str(self.tm.target_data)
      mod.verify()
    except RuntimeError as e:
      raise CompileError(f"llvmlite (LLVM {'.'.join(map(str, llvm.llvm_version_info))}) rejected the IR for {self.info.name}: {e}\n"
                         f"--- source ---\n{src}") from e
    pb = llvm.create_pass_builder(self.tm, llvm.create_pipeline_tuning_options(speed_level=self.opt))
    pb.getModulePassManager().run(mod, pb)
    return str(self.tm.emit_assembly(mod))

  def assemble(self, ptx: str) -> bytes:
    """ptxas -arch=<arch>: the PTX text to a cubin; its complaints become a CompileError with the PTX."""
    if self.ptxas is None:
      raise CompileError(f"NV PTX compiler for {self.info.name}: ptxas (NVIDIA's PTX assembler) was not found on PATH, under "
                         f"/usr/local/cuda*/bin or in the nvidia-cuda-nvcc wheel. {PTXAS_INSTALL}; or set PTXAS=/path/to/ptxas")
    with tempfile.TemporaryDirectory(prefix="core-nv-") as d:
      src, out = os.path.join(d, "kernel.ptx"), os.path.join(d, "kernel.cubin")
      with open(src, "w") as f: f.write(ptx)
      try: r = subprocess.run([self.ptxas, f"-arch={self.info.name}", "-o", out, src], capture_output=True, text=True, timeout=600)
      except (OSError, subprocess.SubprocessError) as e: raise CompileError(f"ptxas ({self.ptxas}) did not run: {e}") from e
      if r.returncode != 0 or not os.path.isfile(out):
        raise CompileError(f"ptxas {ptxas_version(self.ptxas)} -arch={self.info.name} failed (exit {r.returncode}):\n"
                           f"{(r.stderr + r.stdout).strip()}\n--- PTX ---\n{ptx}")
      with open(out, "rb") as f: return f.read()

  def compile(self, src: str) -> bytes: return self.assemble(self.to_ptx(src))

  def disassemble(self, lib: bytes) -> str:
    tool = shutil.which("cuobjdump") or shutil.which("nvdisasm")
    if tool is None: return "<cuobjdump not found: pip install nvidia-cuda-cuobjdump to disassemble cubins>"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
      f.write(lib)
      f.flush()
      args = [tool, "-sass", f.name] if tool.endswith("cuobjdump") else [tool, f.name]
      try: return subprocess.run(args, capture_output=True, text=True, timeout=60).stdout
      except (OSError, subprocess.SubprocessError) as e: return f"<{tool} failed: {e}>"
