"""The NV compilers: LLVM IR -> PTX (llvmlite) -> cubin (ptxas), and CUDA C -> cubin with NVRTC (loaded through ctypes)."""
from __future__ import annotations
import ctypes, functools, glob, os, re, shutil, subprocess, tempfile
from typing import Any
from core.device.compiler import Compiler, CompileError, LLVMTarget, llvm_target, llvm_object
from plugin_nv.renderer import TRIPLE, ArchInfo, arch_info

PTXAS_INSTALL = 'pip install "plugin-nv[ptxas]" (NVIDIA\'s nvidia-cuda-nvcc 13.0 wheel) or install the CUDA toolkit 13.0'

def _llvm() -> Any: return llvm_target(TRIPLE, "NVPTX")

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
    self.target = LLVMTarget(TRIPLE, self.info.name, self.info.ptx, opt)
    self.tm = self.target.machine()
    # without ptxas the IR still renders and turns into PTX (to_ptx); compile() says what to install
    self.ptxas = find_ptxas()
    llvm_ver = ".".join(map(str, self.llvm.llvm_version_info))
    ptxas_ver = ptxas_version(self.ptxas) if self.ptxas is not None else "missing"
    super().__init__(f"nv_ptx_llvm{llvm_ver}_{self.info.name}{self.info.ptx}_O{opt}_ptxas{ptxas_ver}")

  def to_ptx(self, src: str) -> str:
    """The PTX text LLVM makes of the IR `src` (parse, verify, optimize, emit; core's llvm_object, which may run it in the
    compile worker)."""
    return llvm_object(self.target, src, self.info.name, assembly=True).decode()

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

# *** NVRTC: CUDA C -> cubin in process ***

NVRTC_INSTALL = 'pip install "plugin-nv[nvrtc]" (NVIDIA\'s nvidia-cuda-nvrtc 13.0.88 wheel and the 13.0 runtime headers) or install the CUDA toolkit 13.0'

def _wheel_file(dist_name: str, match) -> str | None:  # noqa: ANN001
  """The first file of the installed distribution `dist_name` whose path `match` accepts; None if it is not installed."""
  import importlib.metadata
  try: dist = importlib.metadata.distribution(dist_name)
  except importlib.metadata.PackageNotFoundError: return None
  for f in dist.files or ():
    if match(f) and os.path.isfile(path := str(dist.locate_file(f))): return path
  return None

def find_nvrtc() -> str | None:
  """libnvrtc: $NVRTC, else the nvidia-cuda-nvrtc wheel (nvidia/cu13/lib/libnvrtc.so.13), else a CUDA toolkit's lib64; None if none."""
  if (env := os.environ.get("NVRTC")): return env if os.path.isfile(env) else None
  if (p := _wheel_file("nvidia-cuda-nvrtc", lambda f: re.fullmatch(r"libnvrtc\.so\.\d+", f.name) is not None)): return p
  for p in sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so.*[0-9]"), reverse=True):
    if re.fullmatch(r"libnvrtc\.so\.\d+", os.path.basename(p)): return p
  return None

def find_cuda_headers() -> str | None:
  """The folder holding cuda_fp16.h and cuda_bf16.h: $CUDA_PATH/include, the nvidia-cuda-runtime wheel, a CUDA toolkit."""
  dirs = [os.path.join(os.environ["CUDA_PATH"], "include")] if os.environ.get("CUDA_PATH") else []
  if (h := _wheel_file("nvidia-cuda-runtime", lambda f: f.name == "cuda_fp16.h")): dirs.append(os.path.dirname(h))
  dirs += sorted(glob.glob("/usr/local/cuda*/include"), reverse=True)
  return next((d for d in dirs if os.path.isfile(os.path.join(d, "cuda_fp16.h")) and os.path.isfile(os.path.join(d, "cuda_bf16.h"))), None)

@functools.cache
def load_nvrtc(path: str) -> tuple[Any, str]:
  """NVRTC at `path` loaded through ctypes, and its version ("13.0"). libnvrtc dlopens libnvrtc-builtins by name at compile
  time, which the dynamic loader does not find in a wheel's folder: it is loaded first, from beside libnvrtc."""
  for b in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.*"))):
    if ".alt." not in b:
      try: ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
      except OSError as e: raise CompileError(f"NVRTC's builtins library {b} does not load ({e}); {NVRTC_INSTALL}") from e
  try: lib = ctypes.CDLL(path)
  except OSError as e: raise CompileError(f"NVRTC at {path} does not load ({e}); {NVRTC_INSTALL}") from e
  lib.nvrtcGetErrorString.restype = ctypes.c_char_p
  major, minor = ctypes.c_int(), ctypes.c_int()
  if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0: raise CompileError(f"nvrtcVersion failed for {path}; {NVRTC_INSTALL}")
  return lib, f"{major.value}.{minor.value}"

class NVRTCCompiler(Compiler):
  """CUDA C -> cubin bytes with NVRTC for `arch` (--gpu-architecture=sm_XX, nvrtcGetCUBIN). No FMA contraction (--fmad=false):
  only the renderer's explicit fma/fmaf fuse, as in the PTX path. The cache key names NVRTC's version and the arch."""
  def __init__(self, arch: str | None = None):
    self.info: ArchInfo = arch_info(arch)
    # without NVRTC the source still renders; compile() says what to install
    self.path = find_nvrtc()
    self.lib: Any = None
    self.version = "missing"
    if self.path is not None: self.lib, self.version = load_nvrtc(self.path)
    self.headers = find_cuda_headers()
    super().__init__(f"nv_cuda_nvrtc{self.version}_{self.info.name}")

  def options(self) -> list[str]:
    return [f"--gpu-architecture={self.info.name}", "--fmad=false"] + ([f"-I{self.headers}"] if self.headers else [])

  def _check(self, rc: int, what: str) -> None:
    if rc != 0: raise CompileError(f"NVRTC {self.version} {what} failed: {self.lib.nvrtcGetErrorString(rc).decode()}")

  def compile(self, src: str) -> bytes:
    if self.lib is None:
      raise CompileError(f"NV CUDA compiler for {self.info.name}: NVRTC (libnvrtc.so) was not found in the nvidia-cuda-nvrtc wheel or "
                         f"under /usr/local/cuda*/lib64. {NVRTC_INSTALL}; or set NVRTC=/path/to/libnvrtc.so.13")
    lib, prog = self.lib, ctypes.c_void_p()
    self._check(lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None), "nvrtcCreateProgram")
    try:
      opts = [o.encode() for o in self.options()]
      rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
      size = ctypes.c_size_t()
      lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
      log = ctypes.create_string_buffer(size.value)
      lib.nvrtcGetProgramLog(prog, log)
      if rc != 0:
        hint = "" if self.headers or "cuda_fp16.h" not in log.value.decode(errors="replace") else \
          f"\n(cuda_fp16.h/cuda_bf16.h were not found: {NVRTC_INSTALL}, or set CUDA_PATH)"
        raise CompileError(f"NVRTC {self.version} {' '.join(self.options())} failed ({lib.nvrtcGetErrorString(rc).decode()}):\n"
                           f"{log.value.decode(errors='replace').strip()}{hint}\n--- source ---\n{src}")
      self._check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
      cubin = ctypes.create_string_buffer(size.value)
      self._check(lib.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
      return cubin.raw
    finally: lib.nvrtcDestroyProgram(ctypes.byref(prog))

  def disassemble(self, lib: bytes) -> str: return PTXCompiler.disassemble(self, lib)  # type: ignore[arg-type]
