"""Compiler base: source text -> binary, with a crash-safe on-disk cache keyed by compiler identity and source hash."""
from __future__ import annotations
import functools, os, pathlib, stat, threading
from typing import Any, NamedTuple
from core.helpers import ContextVar, cache_dir, sha256

DISABLE_COMPILER_CACHE = ContextVar("CORE_DISABLE_COMPILER_CACHE", 0)
_MAGIC = b"COREBIN1"   # entry = magic + sha256(binary) + binary, so a torn or corrupted file is detected and recompiled

class CompileError(RuntimeError):
  """The compiler rejected the source; the message carries the compiler's own output."""

class Compiler:
  """Subclasses implement compile(src) -> bytes; `cachekey` names the compiler and its version (None: never cached)."""
  def __init__(self, cachekey: str | None = None):
    self.cachekey = cachekey
    self.cache_hits = self.cache_misses = 0

  def compile(self, src: str) -> bytes: raise NotImplementedError(f"{type(self).__name__} must implement compile(src) -> bytes")
  def disassemble(self, lib: bytes) -> str: return f"<{type(self).__name__} can't disassemble {len(lib)} bytes>"

  def cache_path(self, src: str) -> pathlib.Path | None:
    """Where `src`'s binary is cached, or None when this compiler is not cached."""
    if self.cachekey is None or DISABLE_COMPILER_CACHE: return None
    return cache_dir() / "compile" / cache_folder(self.cachekey) / sha256(src.encode()).hexdigest()

  def compile_cached(self, src: str) -> bytes:
    if (path := self.cache_path(src)) is not None and (lib := _read_entry(path)) is not None:
      self.cache_hits += 1
      return lib
    self.cache_misses += 1
    lib = self.compile(src)
    if path is not None: _write_entry(path, lib)
    return lib

def cache_folder(key: str) -> str:
  """A compiler's cache key as one folder name: characters outside [A-Za-z0-9_.+-] become '_', leading dots go (never "." or "..").
  By str methods: the regular expression's compile was ~0.4M instructions of every start (a warm one reads an entry)."""
  return "".join(c if c.isascii() and (c.isalnum() or c in "_.+-") else "_" for c in key).lstrip(".") or "_"

def _read_entry(path: pathlib.Path) -> bytes | None:
  # opened without blocking and read only when it is a regular file: a FIFO or device node planted in the cache never hangs us
  try:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
      if not stat.S_ISREG(os.fstat(fd).st_mode): return None
      with os.fdopen(fd, "rb", closefd=False) as f: data = f.read()
    finally: os.close(fd)
  except OSError: return None
  head, digest, lib = data[:len(_MAGIC)], data[len(_MAGIC):len(_MAGIC)+32], data[len(_MAGIC)+32:]
  if head != _MAGIC or sha256(lib).digest() != digest: return None
  return lib

def _write_entry(path: pathlib.Path, lib: bytes) -> None:
  # temp file + os.replace: readers see the old entry or the new one, never half of one; a read-only cache is not an error.
  # tempfile (with shutil, bz2 and lzma, ~3 ms) is imported by a cache miss only: a warm start never writes an entry
  import tempfile
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
      with os.fdopen(fd, "wb") as f: f.write(_MAGIC + sha256(lib).digest() + lib)
      os.replace(tmp, path)
    except BaseException:
      os.unlink(tmp)
      raise
  except OSError: pass

_llvm_lock = threading.Lock()   # LLVM's target registry is initialised once per process

@functools.cache
def llvm_target(triple: str, what: str) -> Any:
  """llvmlite's binding with every target LLVM was built with initialised, checked to know `triple` (`what` names the target
  in the error): what a plugin compiling LLVM IR for a device asks first."""
  import llvmlite.binding as llvm
  with _llvm_lock:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
  try: llvm.Target.from_triple(triple)
  except RuntimeError as e: raise CompileError(f"this llvmlite's LLVM was built without the {what} target: {e}") from e
  return llvm

# llvmlite 0.50's create_pass_builder never frees the builder's instrumentation callbacks (about 63 KB per compile; reusing
# one builder leaks as much and calls the last run's dangling callbacks), so a long-lived process compiles only its first
# CORE_LLVM_INPROC kernels itself (fast first results, ~30 MB kept) and hands the rest to a worker process
# (core/device/llvm_worker.py) that is replaced after CORE_LLVM_WORKER_COMPILES compiles, which bounds the leak on both sides
LLVM_INPROC = ContextVar("CORE_LLVM_INPROC", 500)
LLVM_WORKER_COMPILES = ContextVar("CORE_LLVM_WORKER_COMPILES", 1000)
_inproc_lock = threading.Lock()
inproc_compiles = 0   # LLVM compiles this process ran itself (each leaked its pass builder)
# a thread that sets off_process.on hands its LLVM compiles to the worker process (llvm_worker.compile_off_process): llvmlite
# runs one call at a time in a process, so a second compile thread (core.hcq.state.compile_kernels) compiles in another one
off_process = threading.local()

class LLVMTarget(NamedTuple):   # a NamedTuple: a sixth of a frozen dataclass's class creation, at every start (the CPU compilers)
  """What an llvmlite target machine is made of: enough to build the same machine in the compile worker process."""
  triple: str
  cpu: str = ""
  features: str = ""
  opt: int = 2
  reloc: str = "default"
  codemodel: str = "jitdefault"
  options: tuple[str, ...] = ()   # LLVM command-line options ("-name=value", names from LLVM_OPTION_DEFAULTS) for its compiles
  def machine(self) -> Any: return _target_machine(self)

# LLVM's options are process-wide: a compile sets its target's and puts back the defaults of those it does not name, so one
# target's options never reach another's compiles in the same process (a CPU's and a GPU's kernels, the compile worker)
LLVM_OPTION_DEFAULTS = {"-dse-memoryssa-walklimit": "90"}
_options_now: dict[str, str] = {}

def _set_llvm_options(llvm: Any, options: tuple[str, ...]) -> None:
  want = dict(LLVM_OPTION_DEFAULTS)
  for opt in options:
    name, _, value = opt.partition("=")
    if name not in LLVM_OPTION_DEFAULTS: raise ValueError(f"LLVM option {name!r} has no default in LLVM_OPTION_DEFAULTS to restore")
    want[name] = value
  for name, value in want.items():
    if _options_now.get(name, LLVM_OPTION_DEFAULTS[name]) != value:
      llvm.set_option("", f"{name}={value}")
      _options_now[name] = value

@functools.cache
def _target_machine(t: LLVMTarget) -> Any:
  llvm = llvm_target(t.triple, t.triple)
  return llvm.Target.from_triple(t.triple).create_target_machine(cpu=t.cpu, features=t.features, opt=t.opt, reloc=t.reloc,
                                                                 codemodel=t.codemodel)

def llvm_object(target: LLVMTarget, src: str, what: str = "", assembly: bool = False) -> bytes:
  """LLVM IR text -> an object file (or, with `assembly`, the target's assembly text as bytes) with llvmlite: parse, verify,
  optimize at the target's opt level with the new pass manager and emit for `target` (shared by every plugin that compiles
  LLVM IR). `what` names the target in errors. In this process for the first CORE_LLVM_INPROC compiles, then in the compile
  worker; the bytes are the same either way."""
  global inproc_compiles
  if getattr(off_process, "on", False):
    from core.device.llvm_worker import compile_off_process
    return compile_off_process(target, src, what, assembly)
  with _inproc_lock:
    here = inproc_compiles < LLVM_INPROC.value
    if here: inproc_compiles += 1
  if here: return llvm_compile_here(target, src, what, assembly)
  from core.device.llvm_worker import compile_in_worker
  return compile_in_worker(target, src, what, assembly)

def llvm_compile_here(target: LLVMTarget, src: str, what: str = "", assembly: bool = False) -> bytes:
  """llvm_object's work, always in this process (leaking the pass builder's ~63 KB): what the compile worker runs."""
  import llvmlite.binding as llvm
  tm = target.machine()
  _set_llvm_options(llvm, target.options)
  # a context of its own: LLVM keeps every type and constant a module creates in its context until the context goes, so
  # compiling into the global one grows the process by tens of KB per kernel, forever
  ctx = llvm.create_context()
  try:
    try:
      mod = llvm.parse_assembly(src, context=ctx)
      mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
      mod.verify()
    except RuntimeError as e:
      raise CompileError(f"llvmlite (LLVM {'.'.join(map(str, llvm.llvm_version_info))}) rejected the IR{' for ' + what if what else ''}: {e}\n"
                         f"--- source ---\n{src}") from e
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=target.opt))
    pb.getModulePassManager().run(mod, pb)
    out = str(tm.emit_assembly(mod)).encode() if assembly else tm.emit_object(mod)
    mod.close()
    return out
  finally: ctx.close()
