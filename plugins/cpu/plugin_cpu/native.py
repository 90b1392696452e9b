"""The CPU plugin's native library (thread pool, command processor): native/*.c, built when the plugin is installed (setup.py), or
else compiled together on first use with the system C compiler and cached; loaded by ctypes (the prebuilt one's per-op entries
also imported as a CPython module: python_entries)."""
from __future__ import annotations
import ctypes, importlib.machinery, os, pathlib, threading
from types import ModuleType
from core.helpers import cache_dir, sha256, stamped
from core.device.compiler import Compiler, CompileError, cache_folder
from plugin_cpu.compiler import find_cc, host_id

NATIVE_DIR = pathlib.Path(__file__).resolve().parent / "native"
NATIVE_FLAGS = ("-O2", "-fPIC", "-pthread", "-shared", "-Wall")
CPU_MAX_ARGS = 64   # as in native/pool.h

def load_library(lib: bytes, tag: str) -> tuple[ctypes.CDLL, int]:
  """Loads shared-object bytes through an anonymous memfd (no file is written); returns the library and the fd, which must
  stay open while the library is loaded: the loader recognizes a loaded library by its /proc/self/fd/N path."""
  fd = os.memfd_create(tag, os.MFD_CLOEXEC)
  try:
    view = memoryview(lib)
    while view: view = view[os.write(fd, view):]
    return ctypes.CDLL(f"/proc/self/fd/{fd}"), fd
  except BaseException:
    os.close(fd)
    raise

def cc_file_identity(cc: str) -> str:
  """Names the compiler in the native library's cache key by the program `cc` resolves to, its size and modification time: a
  stat instead of `cc --version` (a process spawn, tens of ms on every start of a checkout whose prebuilt library is stale);
  installing another compiler version replaces the file and so changes the key."""
  real = os.path.realpath(cc)
  try: st = os.stat(real)
  except OSError as e: raise CompileError(f"the C compiler {cc} can't be read: {e}") from e
  return f"{os.path.basename(cc)}_{sha256(f'{real}:{st.st_size}:{st.st_mtime_ns}'.encode()).hexdigest()[:12]}"

def sources() -> dict[str, str]:
  """The native sources by file name (*.c and the headers they include)."""
  return {p.name: p.read_text() for p in sorted(NATIVE_DIR.iterdir()) if p.suffix in (".c", ".h")}

def sources_json(files: dict[str, str]) -> str:
  """json.dumps(files, sort_keys=True), the text setup.py hashes, from json's own C string encoder and its default separators:
  a warm start checks the prebuilt library's source hash, and the json package's import cost more than the rest of it (~1 ms)."""
  try: from _json import encode_basestring_ascii as quote
  except ImportError:
    import json
    return json.dumps(files, sort_keys=True)
  return "{" + ", ".join(f"{quote(k)}: {quote(v)}" for k, v in sorted(files.items())) + "}"

class NativeCompiler(Compiler):
  """A JSON map {file name: text} -> one shared object of all its .c files. The cache key is the compiler's identity, the key
  the source hash, so an edit to any file rebuilds it."""
  def __init__(self, cc: str | None = None):
    self.cc = cc or find_cc()
    super().__init__(f"cpu_native_{cc_file_identity(self.cc)}_{host_id()}")

  def cache_path(self, src: str) -> pathlib.Path:
    # the library is part of the plugin, not a kernel: cached even when CORE_DISABLE_COMPILER_CACHE turns the kernel cache off
    # (benchmarks of first-call compile times set it), so each process doesn't rebuild it
    return cache_dir() / "compile" / cache_folder(self.cachekey or "cpu_native") / sha256(src.encode()).hexdigest()

  def compile(self, src: str) -> bytes:
    import subprocess, tempfile   # only a rebuild runs the compiler: not imported at start-up
    import json
    files: dict[str, str] = json.loads(src)
    with tempfile.TemporaryDirectory(prefix="core_native_") as d:
      for name, text in files.items(): pathlib.Path(d, name).write_text(text)
      out = os.path.join(d, "native.so")
      cmd = [self.cc, *NATIVE_FLAGS, "-o", out, *(os.path.join(d, n) for n in files if n.endswith(".c"))]
      try: ret = subprocess.run(cmd, capture_output=True, timeout=600)
      except (OSError, subprocess.SubprocessError) as e: raise CompileError(f"building the CPU plugin's native library: {e}") from e
      if ret.returncode != 0:
        raise CompileError(f"building the CPU plugin's native library failed ({' '.join(cmd)}):\n{ret.stderr.decode(errors='replace')}")
      return pathlib.Path(out).read_bytes()

def source_hash() -> str:
  """sha256 of the native sources as one JSON map (setup.py computes the same when it builds the library at install time)."""
  return sha256(sources_json(sources()).encode()).hexdigest()

def installed_source_hash() -> str:
  """source_hash(), kept in the cache folder while no native source file has changed (core.helpers.stamped: their times, sizes
  and the folder's): every start checks the prebuilt library, and reading and hashing the sources was ~1 ms of it."""
  files = [str(NATIVE_DIR), *sorted(str(NATIVE_DIR / n) for n in os.listdir(NATIVE_DIR) if n.endswith((".c", ".h")))]
  return stamped("native_sources", "sha256", files, source_hash, lambda h: [h], lambda ls: ls[0] if len(ls) == 1 and len(ls[0]) == 64 else None)

def prebuilt() -> pathlib.Path | None:
  """The library setup.py built when the plugin was installed (plugin_cpu/_native*.so), or None when there is none or it was
  built from other sources than the ones installed (an edited checkout)."""
  suffix = importlib.machinery.EXTENSION_SUFFIXES[0] if importlib.machinery.EXTENSION_SUFFIXES else ".so"
  # listed, not globbed: a glob compiles its pattern to a regular expression (~0.4M instructions of every start)
  for path in sorted(NATIVE_DIR.parent / n for n in os.listdir(NATIVE_DIR.parent) if n.startswith("_native") and n.endswith(suffix)):
    try: fn = ctypes.CDLL(str(path)).cpu_native_source_hash
    except (OSError, AttributeError): continue
    fn.restype = ctypes.c_char_p
    if fn() == installed_source_hash().encode(): return path
  return None

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_fd: int | None = None   # the memfd of a library built at run time, open for the life of the process
_path: pathlib.Path | None = None   # the prebuilt library lib() loaded (None: one built at run time)

def lib() -> ctypes.CDLL:
  """The native library, loaded once per process (one pool for everyone, also when threads ask at once): the one built at
  install time when it matches the sources, else built now with the system C compiler (then cached on disk). cpu_launch and
  cpu_pool_* get their argtypes here; the command processor's are set by its user."""
  global _lib, _fd, _path
  if _lib is not None: return _lib
  with _lock:
    if _lib is None:
      if (path := prebuilt()) is not None: dll, _path = ctypes.CDLL(str(path)), path
      else: dll, _fd = load_library(NativeCompiler().compile_cached(sources_json(sources())), "core_cpu_native")
      dll.cpu_launch.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int64]
      dll.cpu_launch.restype = ctypes.c_int
      dll.cpu_pool_threads.argtypes, dll.cpu_pool_threads.restype = [], ctypes.c_int
      dll.cpu_pool_shutdown.argtypes, dll.cpu_pool_shutdown.restype = [], None
      dll.cpu_pool_park.argtypes, dll.cpu_pool_park.restype = [], None
      dll.cpu_pool_set_spin.argtypes, dll.cpu_pool_set_spin.restype = [ctypes.c_int64, ctypes.c_int64], None
      dll.cpu_pool_sleepers.argtypes, dll.cpu_pool_sleepers.restype = [], ctypes.c_int
      dll.cpu_pool_set_backoff.argtypes, dll.cpu_pool_set_backoff.restype = [ctypes.c_int64], None
      dll.cpu_guard_check.argtypes, dll.cpu_guard_check.restype = [], None
      _lib = dll
  return _lib

def python_entries() -> ModuleType | None:
  """The loaded library's CPython entries (native/pyentry.c: submit_wait, idle_clean), the same library imported as a module,
  or None when it has none (built at run time by the system compiler, without Python's headers): callers use ctypes then.
  Loads the library."""
  lib()
  if _path is None: return None
  import importlib.util
  spec = importlib.util.spec_from_file_location("plugin_cpu._native", _path)
  if spec is None or spec.loader is None: return None
  try: module = importlib.util.module_from_spec(spec)
  except ImportError: return None   # built without CPU_NATIVE_PYTHON: no PyInit__native
  return module

def park_pool() -> None:
  """Puts the pool's idle threads to sleep now instead of after their $CPU_SPIN_US of polling, and any that finishes a block later,
  until the next launch: before another library's threads run (a benchmark timing a peer right after our kernels). Nothing to do
  when the library was never loaded."""
  if _lib is not None: _lib.cpu_pool_park()

def set_pool_spin(spin_us: int = -1, pause_us: int = -1) -> None:
  """Sets how long idle pool threads poll before they sleep ($CPU_SPIN_US) and the pause part of it ($CPU_SPIN_PAUSE_US) in this
  process from now on; -1 leaves a value. Starts the pool."""
  lib().cpu_pool_set_spin(spin_us, pause_us)

def set_pool_backoff(backoff_us: int) -> None:
  """Sets how long launches keep their blocks on the calling thread after a pool job waited for a late (descheduled) worker
  ($CPU_BACKOFF_US, microseconds, doubling while the pool's next tries are late; 0 never), and ends a back-off in progress.
  Starts the pool."""
  lib().cpu_pool_set_backoff(backoff_us)

def pool_sleepers() -> int:
  """How many of the pool's threads sleep now (the rest poll for work or run blocks)."""
  return int(lib().cpu_pool_sleepers())

def pool_threads() -> int:
  """Threads the pool runs blocks on (the caller included); starts the pool."""
  return int(lib().cpu_pool_threads())
