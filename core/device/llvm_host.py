"""What LLVM says about this host (its version, the process triple, the host CPU's name and features), remembered on disk so
a process that only reads compiled binaries from the cache never loads LLVM.

Why: the LLVM compilers name their cache entries by these facts, and asking llvmlite for them means importing
llvmlite.binding, which loads the LLVM shared library (tens of ms of every start). The facts change only with llvmlite's
build or the CPU, so the file is named by both: llvmlite's library file (path, size and time), and this CPU's model and feature
flags from /proc/cpuinfo (without one, as on macOS, LLVM is asked in every process). The file holds the four facts one per
line (none holds a line break), not JSON: json's import would cost each start ~1 ms for reading four strings."""
from __future__ import annotations
import functools, os, threading
from typing import NamedTuple
from core.helpers import cache_dir, host_machine, sha256

class HostLLVM(NamedTuple):   # a NamedTuple: a quarter of a frozen dataclass's cost to create at import
  version: str    # LLVM's version, "20.1.8"
  triple: str     # llvm.get_process_triple()
  cpu: str        # llvm.get_host_cpu_name()
  features: str   # llvm.get_host_cpu_features().flatten()

@functools.cache
def _cpuinfo() -> str:
  """This CPU's model and feature flags as /proc/cpuinfo lists them ("" where there is no /proc/cpuinfo)."""
  try:
    with open("/proc/cpuinfo") as f:
      return "".join(ln for ln in f.read().splitlines(True) if ln.split(":")[0].strip() in ("model name", "flags", "Features", "CPU part"))
  except OSError: return ""

def host_cpu_id() -> str:
  """A short hash of this CPU's model and feature flags: binaries built for the host CPU must not be reused on another."""
  return host_machine() + "-" + sha256(_cpuinfo().encode()).hexdigest()[:12]

def _llvmlite_identity() -> str:
  import importlib.util
  spec = importlib.util.find_spec("llvmlite")
  if spec is None or not spec.submodule_search_locations: raise ImportError("llvmlite is not installed")
  folder = os.path.join(list(spec.submodule_search_locations)[0], "binding")
  stats = sorted((n, os.stat(os.path.join(folder, n)).st_size, os.stat(os.path.join(folder, n)).st_mtime_ns)
                 for n in os.listdir(folder) if n.startswith("libllvmlite"))
  return f"{folder}:{stats}"

def _ask_llvm() -> HostLLVM:
  import llvmlite.binding as llvm
  llvm.initialize_native_target()
  return HostLLVM(".".join(map(str, llvm.llvm_version_info)), llvm.get_process_triple(), llvm.get_host_cpu_name(),
                  llvm.get_host_cpu_features().flatten())

_lock = threading.Lock()

@functools.cache
def host_llvm() -> HostLLVM:
  """The facts, read from the cache folder when an earlier process with this llvmlite on this CPU wrote them, else asked of
  LLVM (importing llvmlite) and written there. A missing or damaged file is asked again; a read-only cache is no error."""
  with _lock:
    # nothing that names this CPU (no /proc/cpuinfo) or llvmlite's build: asked every time, never taken from a shared folder
    if not _cpuinfo(): return _ask_llvm()
    try: key = sha256(f"{_llvmlite_identity()}|{host_cpu_id()}".encode()).hexdigest()[:24]
    except (ImportError, OSError): return _ask_llvm()
    path = cache_dir() / "llvm_host" / f"{key}.txt"
    try:
      if len(lines := path.read_text().split("\n")) == len(HostLLVM._fields) and all(lines): return HostLLVM(*lines)
    except (OSError, ValueError): pass
    facts = _ask_llvm()
    try:
      path.parent.mkdir(parents=True, exist_ok=True)
      tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
      tmp.write_text("\n".join(facts))
      os.replace(tmp, path)
    except OSError: pass
    return facts
