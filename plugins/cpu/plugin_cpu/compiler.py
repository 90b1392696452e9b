"""The CPU plugin's compilers: C source through the system C compiler, LLVM IR through llvmlite; both give shared-object bytes."""
from __future__ import annotations
import functools, os
from typing import Any
from core.helpers import host_machine, sha256
from core.device.compiler import Compiler, CompileError, LLVMTarget, llvm_object
from core.device.llvm_host import host_cpu_id, host_llvm
from plugin_cpu import elfload
# subprocess is imported by the functions that run a tool: a warm start (its kernels in the compile cache) runs none

# no -ffast-math: NaN/inf must behave as in IEEE; -fwrapv makes int overflow wrap like the reference ALU;
# -ffp-contract=off keeps a*b+c two roundings, as the LLVM path and numpy compute it
C_FLAGS = ("-O2", "-fPIC", "-shared", "-fno-math-errno", "-fwrapv", "-ffp-contract=off", "-w")

def find_cc() -> str:
  """$CC when set (an error when it names no program: a silent fallback would build with another compiler than asked), else
  clang, else gcc, else cc."""
  import shutil   # shutil and tempfile (with bz2 and lzma, ~3 ms) load when a compiler is looked for or run, not at every start
  if (env := os.getenv("CC")):
    if (path := shutil.which(env)): return path
    raise CompileError(f"no C compiler at CC={env!r}: set CC to a compiler on PATH (gcc, clang) or unset it to pick one")
  for cand in ("clang", "gcc", "cc"):
    if (path := shutil.which(cand)): return path
  raise CompileError("no C compiler found: set CC or install clang or gcc (or use DEV=CPU:LLVM)")

@functools.cache
def cc_version(cc: str) -> str:
  import subprocess
  try: return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0].strip()
  except (OSError, subprocess.SubprocessError, IndexError) as e: raise CompileError(f"{cc} --version failed: {e}") from e

def cc_identity(cc: str) -> str:
  """Names the compiler in cache keys: its name, its version line and a hash of the program it resolves to, so binaries of
  gcc and clang (or two installs of one) never mix, whatever `cc` points at."""
  return f"{os.path.basename(cc)}_{cc_version(cc)}_{sha256(os.path.realpath(cc).encode()).hexdigest()[:8]}"

# C features the renderer uses where the compiler has them: each probe is a shared object that builds, with every symbol
# resolved (-z defs: a conversion the compiler leaves to a runtime helper that libgcc lacks fails here, not at load), only if it does
CC_FEATURES = {
  # clang before 15 has no _Float16 on x86-64 (gcc has it from 12): without it the C renderer emulates half (c_style.py)
  "_Float16": "_Float16 probe(_Float16 a, _Float16 b, float f, double d) { return (_Float16)(a * b + (_Float16)f + (_Float16)d); }\n"
              "double probe2(_Float16 a) { return (double)a + (float)a + (int)a; }\n",
}

@functools.cache
def _probe(cc: str, version: str, feature: str, march: str) -> bool:
  import subprocess, tempfile
  with tempfile.TemporaryDirectory(prefix="core_cc_probe_") as d:
    cmd = [cc, *C_FLAGS, f"-march={march}", "-Wl,-z,defs", "-x", "c", "-", "-o", os.path.join(d, "probe.so"), "-lm"]
    try: return subprocess.run(cmd, input=CC_FEATURES[feature].encode(), capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError): return False

def cc_supports(cc: str, feature: str, march: str = "native") -> bool:
  """Whether the C compiler `cc` builds code using `feature` (a key of CC_FEATURES) for `march`; probed once per compiler path
  and version in a process."""
  return _probe(cc, cc_version(cc), feature, march)

def host_id() -> str:
  """A short hash of this CPU's model and features: -march=native binaries must not be reused on another CPU."""
  return host_cpu_id()

@functools.cache
def host_flags() -> frozenset[str]:
  """This CPU's feature flags from /proc/cpuinfo (empty when unreadable)."""
  try:
    with open("/proc/cpuinfo") as f: return frozenset(next((ln.split(":", 1)[1].split() for ln in f if ln.startswith(("flags", "Features"))), []))
  except OSError: return frozenset()

@functools.cache
def host_vendor() -> str:
  """This CPU's vendor as /proc/cpuinfo names it (GenuineIntel, AuthenticAMD; empty when unreadable or not given)."""
  try:
    with open("/proc/cpuinfo") as f: return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("vendor_id")), "")
  except OSError: return ""

# what `cc -march=X -dM -E` predefines -> the /proc/cpuinfo flag names the plugin decides by
_ARCH_MACROS = {"__AVX__": "avx", "__AVX2__": "avx2", "__FMA__": "fma", "__AVX512F__": "avx512f", "__AVX512VL__": "avx512vl",
                "__AVX512DQ__": "avx512dq", "__AVX512BF16__": "avx512_bf16", "__AMXTILE__": "amx_tile",
                "__AMXBF16__": "amx_bf16"}

@functools.cache
def arch_flags(arch: str | None = None, runs_here: bool = True) -> frozenset[str]:
  """The CPU features kernels for `arch` may use, by /proc/cpuinfo's names: this CPU's for None, else those the C compiler enables
  for -march=`arch` (a GCC/LLVM CPU name: x86-64-v3, haswell, znver3), which this CPU must have too, since the kernels run here.
  DEV=CPU:LLVM:haswell thus runs, on any newer x86-64, the code and the tiles an AVX2 CPU gets. runs_here=False: for sources
  only (the tests' AVX-512 renderings on an AVX2 host), whatever this CPU has."""
  if arch is None: return host_flags()
  import subprocess
  cc = find_cc()
  try: r = subprocess.run([cc, f"-march={arch}", "-dM", "-E", "-x", "c", os.devnull], capture_output=True, text=True, timeout=60)
  except (OSError, subprocess.SubprocessError) as e: raise CompileError(f"CPU arch {arch!r}: running {cc} failed: {e}") from e
  if r.returncode != 0: raise CompileError(f"CPU arch {arch!r}: {os.path.basename(cc)} knows no -march={arch}: {r.stderr.strip()[:300]}")
  flags = frozenset(f for m, f in _ARCH_MACROS.items() if f"#define {m} " in r.stdout)
  if runs_here and host_flags() and (missing := flags - host_flags()):
    raise CompileError(f"CPU arch {arch!r} uses {', '.join(sorted(missing))}, which this CPU lacks: its kernels could not run here")
  return flags

def x86_fma(flags: frozenset[str]) -> bool:
  """An x86-64 CPU with FMA3: the C renderer can call GCC/clang's vfmadd builtins."""
  return host_machine() == "x86_64" and "fma" in flags

def host_x86_fma() -> bool: return x86_fma(host_flags())

def simd_bytes(flags: frozenset[str]) -> int:
  """Bytes of the widest float SIMD register (Renderer.simd_width): 64 with AVX-512, 32 with AVX/AVX2, else 16 (SSE, NEON)."""
  if host_machine() == "aarch64": return 16
  return 64 if "avx512f" in flags else 32 if "avx" in flags else 16

def host_simd_bytes() -> int: return simd_bytes(host_flags())

def _run(cmd: list[str], what: str, src: str, stdin: bytes | None = None) -> None:
  import subprocess
  try: ret = subprocess.run(cmd, input=stdin, capture_output=True, timeout=600)
  except (OSError, subprocess.SubprocessError) as e: raise CompileError(f"{what}: running {cmd[0]} failed: {e}\n--- source ---\n{src}") from e
  if ret.returncode != 0:
    raise CompileError(f"{what} failed ({' '.join(cmd)}, exit {ret.returncode}):\n{ret.stderr.decode(errors='replace')}\n--- source ---\n{src}")

def link_shared(cc: str, obj: bytes, src: str) -> bytes:
  """Links one object file into a shared object with `cc` and returns its bytes (the temp files are removed)."""
  import tempfile
  with tempfile.TemporaryDirectory(prefix="core_link_") as d:
    with open(os.path.join(d, "k.o"), "wb") as f: f.write(obj)
    _run([cc, "-shared", "-o", os.path.join(d, "k.so"), os.path.join(d, "k.o"), "-lm"], f"linking with {os.path.basename(cc)}", src)
    with open(os.path.join(d, "k.so"), "rb") as f: return f.read()

class CCompiler(Compiler):
  """C source -> .so bytes with $CC/clang/gcc at -O2 for `march` (default: this machine's CPU)."""
  def __init__(self, cc: str | None = None, march: str | None = None, extra_flags: tuple[str, ...] = ()):
    self.cc = cc or find_cc()
    # -O2, not -O3: the optimizer already vectorizes and unrolls; -O3 ran no faster here and compiles slower. gcc tunes AVX-512
    # CPUs to 256-bit vectors for loops it vectorizes itself: with -march=native on such a CPU ask for the full width
    wide = ("-mprefer-vector-width=512",) if march is None and host_simd_bytes() == 64 else ()
    self.flags = C_FLAGS + (f"-march={march or 'native'}",) + wide + tuple(extra_flags)
    flag_hash = sha256(" ".join(self.flags).encode()).hexdigest()[:8]
    super().__init__(f"cpu_c_{cc_identity(self.cc)}_{flag_hash}_{host_id()}")

  def compile(self, src: str) -> bytes:
    import tempfile
    with tempfile.TemporaryDirectory(prefix="core_cc_") as d:
      out = os.path.join(d, "k.so")
      # -lm after the input so `--as-needed` linkers keep it when a kernel calls libm
      _run([self.cc, *self.flags, "-x", "c", "-", "-o", out, "-lm"], f"compiling C with {os.path.basename(self.cc)}", src, src.encode())
      with open(out, "rb") as f: return f.read()

  def disassemble(self, lib: bytes) -> str:
    import subprocess, tempfile
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
      f.write(lib)
      f.flush()
      try: return subprocess.run(["objdump", "-d", f.name], capture_output=True, text=True, timeout=60).stdout
      except OSError as e: return f"<objdump failed: {e}>"

# Dead store elimination walks up from every store through the earlier ones, an alias query a step, up to 90 steps: a conv's
# 224 lane stores made it a fifth of the optimizer's time (ResNet-18 b8 inference: 216 of 974 ms). Our kernels overwrite no
# stored value, so the CPU's compiles walk no step (a store right before its overwrite still goes): ResNet-18's and the
# bench's kernels (native and znver3) give byte-identical objects. hcq_submit, whose copied template words the launch
# patches, is the host compiler's (core.device.hostjit): it keeps LLVM's walk
LLVM_OPTIONS = ("-dse-memoryssa-walklimit=0",)

class LLVMCompiler(Compiler):
  """LLVM IR -> machine code: llvmlite parses and optimizes (new pass manager, O3, host CPU and features) and emits an object
  file, which the runtime loads in-process on x86-64; elsewhere the C compiler links it into a shared object."""
  def __init__(self, cpu: str | None = None, features: str | None = None, cc: str | None = None, opt: int = 3):
    # the host's facts from the cache folder (core.device.llvm_host): a warm compile cache never loads LLVM
    host = host_llvm()
    self.cpu = cpu or host.cpu
    self.features = features if features is not None else (host.features if cpu is None else "")
    self.target = LLVMTarget(host.triple, self.cpu, self.features, opt, "pic", "default", LLVM_OPTIONS)
    self.opt, self._cc = opt, cc
    feat_hash = sha256((self.features + " ".join(LLVM_OPTIONS)).encode()).hexdigest()[:8]
    super().__init__(f"cpu_llvm_{host.version}_{host.triple}_{self.cpu}_{feat_hash}_O{opt}{'_obj' if elfload.supported() else ''}")

  @functools.cached_property
  def tm(self) -> Any: return self.target.machine()

  def compile(self, src: str) -> bytes:
    obj = llvm_object(self.target, src)
    # the runtime loads x86-64 objects itself (plugin_cpu.elfload): a linker process per kernel costs tens of ms
    return obj if elfload.supported() else link_shared(self._cc or find_cc(), obj, src)

  def disassemble(self, lib: bytes) -> str: return CCompiler.disassemble(self, lib)  # type: ignore[arg-type]
