"""The CPU plugin's runtime: 64-byte aligned host memory, kernels loaded from memory (memfd), and the device factory."""
from __future__ import annotations
import _ctypes, ctypes, os, time
from typing import Any
from core.helpers import to_function_name
from core.device.allocator import BufferSpec, LRUAllocator
from core.device.compiled import Compiled

ALIGN = 64  # a cache line, and enough for any AVX-512 vector load

class CPUAllocator(LRUAllocator):
  """Host memory as ctypes byte arrays whose address is 64-byte aligned. Views (`_offset`) keep their base alive."""
  def _alloc(self, size: int, options: BufferSpec) -> Any:
    if options.external_ptr is not None: return (ctypes.c_uint8 * size).from_address(options.external_ptr)
    raw = (ctypes.c_uint8 * (size + ALIGN - 1))()
    # from_buffer keeps `raw` referenced by the returned array, so the aligned window owns its memory
    return (ctypes.c_uint8 * size).from_buffer(raw, -ctypes.addressof(raw) % ALIGN)
  def _free(self, opaque: Any, options: BufferSpec) -> None: pass  # Python frees the array when the last reference goes
  def _offset(self, opaque: Any, size: int, offset: int) -> Any: return (ctypes.c_uint8 * size).from_buffer(opaque, offset)
  def _as_buffer(self, opaque: Any) -> memoryview: return memoryview(opaque).cast("B")
  def _copyin(self, dest: Any, src: memoryview) -> None:
    if src.readonly: memoryview(dest).cast("B")[:] = src.cast("B")  # ctypes can't take the address of read-only memory
    else: ctypes.memmove(dest, (ctypes.c_uint8 * src.nbytes).from_buffer(src), src.nbytes)
  def _copyout(self, dest: memoryview, src: Any) -> None: ctypes.memmove((ctypes.c_uint8 * dest.nbytes).from_buffer(dest), src, dest.nbytes)

def _ptr(b: Any) -> ctypes.c_void_p:
  return ctypes.c_void_p(b if isinstance(b, int) else None if b is None else ctypes.addressof(b))

class CPUProgram:
  """A kernel from shared-object bytes, loaded through an anonymous memfd so no file is written.
  The loader recognizes an already loaded library by its path, so the fd (and with it the unique /proc/self/fd/N name) stays open
  while the library is loaded; both are released together when the program is garbage collected."""
  def __init__(self, name: str, lib: bytes):
    self.name = name
    self.fd = os.memfd_create(f"core_{to_function_name(name)[:200]}", os.MFD_CLOEXEC)
    try:
      view = memoryview(lib)
      while view: view = view[os.write(self.fd, view):]
      self.lib = ctypes.CDLL(f"/proc/self/fd/{self.fd}")
    except BaseException:
      os.close(self.fd)
      raise
    try: self.fxn = getattr(self.lib, to_function_name(name))
    except AttributeError: raise RuntimeError(f"CPU: the compiled library has no kernel named {to_function_name(name)!r}") from None
    self.fxn.restype = None

  def __del__(self) -> None:
    # unload first: only then may the fd number (and so the path) be reused by another program
    try:
      if (lib := self.__dict__.pop("lib", None)) is not None:
        self.__dict__.pop("fxn", None)
        _ctypes.dlclose(lib._handle)
      if (fd := self.__dict__.pop("fd", None)) is not None: os.close(fd)
    except (OSError, AttributeError, TypeError): pass  # interpreter shutdown

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    args = [_ptr(b) for b in bufs] + [ctypes.c_int32(v) for v in vals]
    st = time.perf_counter()
    self.fxn(*args)
    return time.perf_counter() - st if wait else None

def llvmlite_available() -> bool:
  try: import llvmlite.binding  # noqa: F401
  except ImportError: return False
  return True

RENDERERS = ("C", "LLVM")

def make_device(name: str, target: Any = None) -> Compiled:
  """The CPU device for DEV target `target`: renderer C (the default: its kernels ran faster in bench/renderers.py) or
  LLVM; ARCH is -march/cpu."""
  which = (getattr(target, "renderer", None) or "C").upper()
  arch = getattr(target, "arch", None)
  from plugin_cpu.renderer import CPUCRenderer, CPULLVMRenderer
  from plugin_cpu.compiler import CCompiler, LLVMCompiler
  renderer: Any
  if which == "LLVM":
    if not llvmlite_available(): raise RuntimeError(f"{name}:LLVM needs llvmlite: pip install llvmlite, or use DEV={name}:C")
    renderer, compiler = CPULLVMRenderer(), LLVMCompiler(cpu=arch)
  elif which == "C": renderer, compiler = CPUCRenderer(), CCompiler(march=arch)
  else: raise ValueError(f"{name} has no renderer {which!r}; choose one of {', '.join(RENDERERS)} (DEV={name}:LLVM or DEV={name}:C)")
  renderer.device, renderer.arch = name, arch
  return Compiled(name, CPUAllocator(name), renderer, compiler, CPUProgram, target)
