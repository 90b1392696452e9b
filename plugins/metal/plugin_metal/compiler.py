"""The METAL compilers: on Linux a check of every kernel's MSL with clang++ against the host <metal_stdlib> (shim.py); the MOCK's host
build of that MSL into a shared object; on macOS Metal's own compiler (newLibraryWithSource through libobjc)."""
from __future__ import annotations
import functools, hashlib, os, re, shutil, subprocess, sys, tempfile
from core.codegen.access_guard import GUARD_NAME
from core.device.compiler import Compiler, CompileError
from plugin_metal.shim import METAL_STDLIB, RUNNER, shim_dir

CXX_CANDIDATES = ("clang++-15", "clang++")
CXX_INSTALL = "install clang 15 or newer (Debian/Ubuntu: apt-get install clang-15) or set CXX to a clang++ with _Float16"
# C++17 for __builtin_bit_cast and `if constexpr`-free templates; -fwrapv and -ffp-contract=off keep int overflow and a*b+c as
# the reference computes them; -w: Metal's [[...]] attributes are unknown to the host compiler
CHECK_FLAGS = ("-std=c++17", "-fsyntax-only", "-w", "-x", "c++")
# the second pass: C++ for OpenCL, where device/threadgroup/constant are real address spaces (a cast between two is an error);
# without OpenCL's own header, whose global math overloads would make `trunc` ambiguous with metal::trunc
CHECK_CL_FLAGS = ("-cl-std=clc++1.0", "-cl-no-stdinc", "-fsyntax-only", "-w", "-x", "clcpp")
# the host build links no C++ library: the kernels and the runner call only libc and libm, and linking libstdc++ took about
# half of a small kernel's build time (0.13 of 0.27 s of CPU here)
BUILD_FLAGS = ("-std=c++17", "-O1", "-fPIC", "-shared", "-nostdlib++", "-w", "-fwrapv", "-ffp-contract=off", "-fno-math-errno", "-x", "c++")

@functools.cache
def _version(cxx: str) -> str:
  try: return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0].strip()
  except (OSError, subprocess.SubprocessError, IndexError) as e: raise CompileError(f"{cxx} --version failed: {e}") from e

@functools.cache
def _has_float16(cxx: str) -> bool:
  with tempfile.TemporaryDirectory(prefix="core_metal_probe_") as d:
    cmd = [cxx, "-std=c++17", "-fPIC", "-shared", "-Wl,-z,defs", "-x", "c++", "-", "-o", os.path.join(d, "p.so")]
    src = b'extern "C" _Float16 probe(_Float16 a, float f) { return (_Float16)(a * a + (_Float16)f); }\n'
    try: return subprocess.run(cmd, input=src, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError): return False

def find_cxx() -> str:
  """$CXX when set (an error when it is missing or lacks _Float16), else the first of clang++-15 and clang++ that has _Float16."""
  if (env := os.getenv("CXX")):
    if (path := shutil.which(env)) is None: raise CompileError(f"no C++ compiler at CXX={env!r}: {CXX_INSTALL}")
    if not _has_float16(path): raise CompileError(f"CXX={env!r} has no _Float16 (MSL's half): {CXX_INSTALL}")
    return path
  for cand in CXX_CANDIDATES:
    if (path := shutil.which(cand)) and _has_float16(path): return path
  raise CompileError(f"no clang++ with _Float16 found (tried {', '.join(CXX_CANDIDATES)}) to check MSL on this host: {CXX_INSTALL}")

def _run(cmd: list[str], what: str, src: str) -> None:
  try: ret = subprocess.run(cmd, input=src.encode(), capture_output=True, timeout=600)
  except (OSError, subprocess.SubprocessError) as e: raise CompileError(f"{what}: running {cmd[0]} failed: {e}") from e
  if ret.returncode != 0:
    raise CompileError(f"{what} failed ({' '.join(cmd)}, exit {ret.returncode}):\n{ret.stderr.decode(errors='replace')}\n--- source ---\n{src}")

def _cxx_key(cxx: str, flags: tuple[str, ...], *texts: str) -> str:
  h = hashlib.sha256("\0".join((os.path.realpath(cxx), " ".join(flags)) + texts).encode()).hexdigest()[:12]
  return f"{os.path.basename(cxx)}_{_version(cxx)}_{h}"

class MetalCheckCompiler(Compiler):
  """Linux: clang++ checks the MSL against the host <metal_stdlib> (syntax, types, overloads; then address spaces, as C++ for
  OpenCL); the 'binary' is the source itself,
  as Metal compiles it on the device (newLibraryWithSource), so the MOCK and a Mac get the text that was checked.
  `as_cxx=False` leaves out the C++ pass, for the MOCK: its host build compiles the same MSL as C++ right after."""
  def __init__(self, cxx: str | None = None, as_cxx: bool = True):
    self.cxx = cxx or find_cxx()
    self.passes = (((CHECK_FLAGS, "as C++"),) if as_cxx else ()) + ((CHECK_CL_FLAGS, "as C++ for OpenCL (address spaces)"),)
    super().__init__(f"metal_check_{_cxx_key(self.cxx, tuple(f for flags, _ in self.passes for f in flags), METAL_STDLIB)}")

  def compile(self, src: str) -> bytes:
    for flags, what in self.passes:
      _run([self.cxx, *flags, "-I", shim_dir(), "-"], f"checking MSL {what} with {os.path.basename(self.cxx)}", src)
    return src.encode()

_SIGNATURE = re.compile(r"^kernel void (\w+)\((.*?)\)\s*\{", re.M | re.S)

def buffer_params(msl: str) -> tuple[str, list[str]]:
  """The kernel's name and its [[buffer(i)]] parameters in order (buffers, variables, and last the fault guard's table when
  the MSL was rendered with guard_accesses)."""
  m = _SIGNATURE.search(msl)
  if m is None: raise CompileError(f"no `kernel void name(...)` line in the MSL:\n{msl}")
  return m.group(1), [q for q in m.group(2).split(", ") if "[[buffer(" in q]

def host_source(msl: str) -> str:
  """The MOCK's C++: the kernel's MSL unchanged except that threadgroup arrays (declared at the start of a line) become statics
  the threads of a group share, then the dispatcher with the call of this kernel (buffers, then variables, then positions; the
  guard's table comes from the dispatcher, not from the bound buffers)."""
  name, params = buffer_params(msl)
  args, i = [], 0
  for p in params:
    if f" {GUARD_NAME} " in p: args.append("(long*)core_guard_table")
    else:
      args.append(f"core_ptr{{args[{i}]}}" if p.startswith("device ") else f"*(const int*)args[{i}]")
      i += 1
  call = f"{name}({', '.join(args + ['gid', 'lid'])})"
  return re.sub(r"^(\s*)threadgroup ", r"\1static ", msl, flags=re.M) + RUNNER.replace("KERNEL_CALL", call)

class MetalHostCompiler(Compiler):
  """The MOCK's host build: the MSL (already checked) -> a shared object exporting core_metal_dispatch, cached by source."""
  def __init__(self, cxx: str | None = None):
    self.cxx = cxx or find_cxx()
    super().__init__(f"metal_host_{_cxx_key(self.cxx, BUILD_FLAGS, METAL_STDLIB, RUNNER)}")

  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="core_metal_") as d:
      out = os.path.join(d, "k.so")
      _run([self.cxx, *BUILD_FLAGS, "-I", shim_dir(), "-", "-lm", "-o", out], f"building MSL for the host with {os.path.basename(self.cxx)}",
           host_source(src))
      with open(out, "rb") as f: return f.read()

class MetalCompiler(Compiler):
  """macOS: Metal's compiler (MTLDevice newLibraryWithSource:options:error:) checks the MSL; the binary stays the source, which
  the runtime builds into its pipeline (Metal caches compiled libraries itself). Fast math is off: NaN and inf behave as IEEE."""
  def __init__(self) -> None:
    from plugin_metal.objc import metal_device
    self.device = metal_device()
    super().__init__(None)

  def compile(self, src: str) -> bytes:
    from plugin_metal.objc import new_library, release
    release(new_library(self.device, src))
    return src.encode()

def make_compiler() -> Compiler:
  """Metal's compiler on macOS, the clang++ check elsewhere."""
  return MetalCompiler() if sys.platform == "darwin" else MetalCheckCompiler()
