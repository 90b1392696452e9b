"""The MOCK's kernels: each kernel's MSL built as C++ against the host <metal_stdlib> (compiler.MetalHostCompiler, cached on disk by
source) and loaded once per process; a dispatch runs every threadgroup's threads on the calling host thread."""
from __future__ import annotations
import ctypes, functools, hashlib, os, tempfile, threading

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
    self.fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32), ctypes.c_int]
    self.fn.restype = ctypes.c_int

  def dispatch(self, args: list[int], grid: tuple[int, ...], threadgroup: tuple[int, ...]) -> None:
    g, t = (tuple(grid) + (1, 1, 1))[:3], (tuple(threadgroup) + (1, 1, 1))[:3]
    if 0 in g or 0 in t: return
    argv = (ctypes.c_void_p * max(1, len(args)))(*args)
    if self.fn(argv, (ctypes.c_uint32 * 3)(*g), (ctypes.c_uint32 * 3)(*t), int(self.barriers)) != 0:
      raise MemoryError(f"METAL MOCK: no memory for the {t} threads of kernel {self.name}'s threadgroup")

_kernels: dict[tuple[str, bytes], HostKernel] = {}
_lock = threading.Lock()

def host_kernel(name: str, msl: str) -> HostKernel:
  """The HostKernel of (name, MSL), built and loaded once per process (captured submissions may launch it any time later)."""
  key = (name, hashlib.sha256(msl.encode()).digest())
  with _lock:
    if (k := _kernels.get(key)) is None: k = _kernels[key] = HostKernel(name, msl)
  return k
