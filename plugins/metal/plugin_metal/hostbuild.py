"""The MOCK's kernels: each kernel's MSL built as C++ against the host <metal_stdlib> (compiler.MetalHostCompiler, cached on disk by
source) and loaded once per process; a dispatch runs every threadgroup's threads on the calling host thread."""
from __future__ import annotations
import ctypes, functools, hashlib, os, tempfile, threading, weakref
from core.codegen.access_guard import GUARD_NAME, guard_fault, guard_table
from plugin_metal.compiler import buffer_params
from plugin_metal.runtime import ALLOCATIONS

@functools.cache
def host_compiler() -> object:
  from plugin_metal.compiler import MetalHostCompiler
  return MetalHostCompiler()

class HostKernel:
  """One kernel's host build. `dispatch(args, grid, threadgroup)`: args are the addresses bound at [[buffer(0..n-1)]]: buffers'
  memory, and for each variable the address of its int32 (Metal binds a `constant int&` as a buffer too)."""
  def __init__(self, name: str, msl: str):
    self.name, self.msl = name, msl
    # only then run threads as fibers (plain calls are much cheaper); a simdgroup multiply waits for its simdgroup like a barrier
    self.barriers = "threadgroup_barrier(" in msl or "simdgroup_multiply_accumulate(" in msl
    lib = host_compiler().compile_cached(msl)  # type: ignore[attr-defined]
    with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f: f.write(lib)
    try: self.lib = ctypes.CDLL(f.name)
    finally: os.unlink(f.name)
    self.fn = self.lib.core_metal_dispatch
    self.fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32), ctypes.c_int,
                        ctypes.c_void_p]
    self.fn.restype = ctypes.c_int
    # a kernel rendered with guard_accesses (MOCK+METAL's): its buffers' accesses not proven in range are checked at run time
    params = buffer_params(msl)[1]
    self.guarded = any(f" {GUARD_NAME} " in p for p in params)
    self.nbufs = sum(1 for p in params if p.startswith("device ") and f" {GUARD_NAME} " not in p)

  def dispatch(self, args: list[int], grid: tuple[int, ...], threadgroup: tuple[int, ...]) -> None:
    g, t = (tuple(grid) + (1, 1, 1))[:3], (tuple(threadgroup) + (1, 1, 1))[:3]
    if 0 in g or 0 in t: return
    argv = (ctypes.c_void_p * max(1, len(args)))(*args)
    bufs = args[:self.nbufs]
    table = guard_table(bufs, [ALLOCATIONS.span(a) for a in bufs]) if self.guarded else None
    if self.fn(argv, (ctypes.c_uint32 * 3)(*g), (ctypes.c_uint32 * 3)(*t), int(self.barriers), table) != 0:
      raise MemoryError(f"METAL MOCK: no memory for the {t} threads of kernel {self.name}'s threadgroup")
    if table is not None and (fault := guard_fault(self.name, table, bufs)) is not None: raise fault

# a host build lives while a program holds it (the MOCK's loaded programs, direct MockPrograms): each kept its .so mapped for good
_kernels: weakref.WeakValueDictionary[tuple[str, bytes], HostKernel] = weakref.WeakValueDictionary()
_lock = threading.Lock()

def host_kernel(name: str, msl: str) -> HostKernel:
  """The HostKernel of (name, MSL), built and loaded once while in use (the caller holds it; a rebuild comes from the disk cache)."""
  key = (name, hashlib.sha256(msl.encode()).digest())
  with _lock:
    if (k := _kernels.get(key)) is None: k = _kernels[key] = HostKernel(name, msl)
  return k
