"""Host code in this process: LLVM IR compiled by llvmlite and loaded in process, with no C compiler and no backend
plugin. Core uses it for what runs on the host for every device: the HCQ submit program, and the host builds of GPU
kernels that MOCK devices run (core/codegen/hostbuild.py)."""
from __future__ import annotations
import ctypes, functools, threading
from typing import Any, Callable
from core.device import elfload
from core.device.compiler import Compiler, LLVMTarget, llvm_object
from core.device.llvm_host import host_llvm
from core.helpers import LRUCache, sha256

class HostCompiler(Compiler):
  """LLVM IR -> an object file for this CPU (its features, O2), cached on disk like every compiler's output. Built from the
  host's facts as cached on disk (core.device.llvm_host): LLVM itself is loaded only when something is compiled."""
  def __init__(self, opt: int = 2):
    host = host_llvm()
    self.cpu, self.features, self.opt = host.cpu, host.features, opt
    self.target = LLVMTarget(host.triple, self.cpu, self.features, opt, "pic", "default")
    super().__init__(f"host_{host.version}_{host.triple}_{self.cpu}_{sha256(self.features.encode()).hexdigest()[:8]}_O{opt}")

  def target_machine(self) -> Any:
    """A new target machine like the compiler's (an MCJIT engine takes ownership of the one it is given)."""
    import llvmlite.binding as llvm
    t = self.target
    return llvm.Target.from_triple(t.triple).create_target_machine(cpu=t.cpu, features=t.features, opt=t.opt, reloc=t.reloc,
                                                                   codemodel=t.codemodel)

  def compile(self, src: str) -> bytes:
    _init_native()
    return llvm_object(self.target, src, "the host")

@functools.cache
def _init_native() -> None:
  import llvmlite.binding as llvm
  from core.device.compiler import llvm_target
  llvm_target(llvm.get_process_triple(), "host")
  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()
  llvm.initialize_native_asmparser()

class HostLibrary:
  """Object code loaded into this process: on x86-64 placed and relocated by core.device.elfload (no LLVM needed, so a warm
  compile cache never loads it), elsewhere or for what that loader doesn't handle by llvmlite's MCJIT linker (symbols such as
  libm's resolved against the process). Kept alive as long as any function taken from it is: the code lives in its memory."""
  def __init__(self, obj: bytes, compiler: HostCompiler):
    self.obj = obj
    self.loaded: elfload.LoadedObject | None = None
    if elfload.supported() and elfload.is_relocatable(obj):
      try:
        self.loaded = elfload.LoadedObject(obj)
        return
      except elfload.ELFLoadError: pass   # a relocation kind or symbol it doesn't handle: LLVM's linker does
    import llvmlite.binding as llvm
    _init_native()
    # an engine owns the target machine it is given (llvmlite marks it owned and disposes of it with the engine): each library
    # gets its own, or dropping one library (the LRU cache evicts them) frees the machine every later engine still uses
    self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), compiler.target_machine())
    self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    self.engine.finalize_object()

  def address(self, name: str) -> int:
    addr = self.loaded.symbols.get(name, 0) if self.loaded is not None else self.engine.get_function_address(name)
    if not addr: raise RuntimeError(f"the host library has no function named {name!r}")
    return addr

  def function(self, name: str, restype: Any, *argtypes: Any) -> Callable[..., Any]:
    """A ctypes function for the symbol `name` (it holds this library alive); ctypes releases the GIL while it runs."""
    fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address(name))
    fn._library = self   # type: ignore[attr-defined]
    return fn

@functools.cache
def host_compiler() -> HostCompiler: return HostCompiler()

_lock = threading.Lock()
_libraries: LRUCache = LRUCache("host_libraries", 512, 256 << 20, lambda lib: len(lib.obj))

def host_library(src: str) -> HostLibrary:
  """LLVM IR `src` (from core.codegen.llvm_ir.HostLLVMRenderer, or whole modules) compiled (disk cache) and loaded once per process."""
  with _lock:
    if (hit := _libraries.get(src)) is not None: return hit
  comp = host_compiler()
  lib = HostLibrary(comp.compile_cached(src), comp)
  with _lock:
    if (hit := _libraries.get(src)) is None: _libraries[src] = hit = lib
    return hit
