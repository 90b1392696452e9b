"""The METAL runtime: host-visible memory, the direct-call program, and make_device, which builds the Compiled device of the
interface DEV names (MTL: Metal on macOS, iface_mtl.py; MOCK: the host replays command-buffer programs, iface_mock.py)."""
from __future__ import annotations
import ctypes, time
from typing import Any
from core.codegen.access_guard import Allocations
from core.device.allocator import BufferSpec
from core.device.host_memory import HostArrayAllocator
from core.device.compiled import Compiled
from core.device.target import Target
from plugin_metal import INTERFACES

# every MOCK allocation, so a guarded kernel's accesses are checked against the allocation each buffer argument points into
ALLOCATIONS = Allocations()

class HostAllocator(HostArrayAllocator):
  """MOCK memory: ctypes byte arrays (zero-copy host access, views at an offset); an address is the host pointer."""
  def _alloc(self, size: int, options: BufferSpec) -> Any:
    buf = (ctypes.c_uint8 * size)()
    ALLOCATIONS.add(ctypes.addressof(buf), size)
    return buf
  def _free(self, opaque: Any, options: BufferSpec) -> None: ALLOCATIONS.remove(ctypes.addressof(opaque))

def arg_addresses(bufs: tuple[Any, ...], vals: tuple[int, ...]) -> tuple[list[int], Any]:
  """What a dispatch binds at [[buffer(0..)]]: each buffer's address, then the address of each variable's int32 (the array that
  holds the variables is returned too: it must live until the kernel ran)."""
  ints = (ctypes.c_int32 * max(1, len(vals)))(*vals)
  addrs = [b if isinstance(b, int) else ctypes.addressof(b) for b in bufs]
  return addrs + [ctypes.addressof(ints) + 4 * i for i in range(len(vals))], ints

class MockProgram:
  """A kernel called directly (outside core's HCQ pipeline): its MSL's host build, run on this thread."""
  def __init__(self, name: str, lib: bytes):
    from plugin_metal.hostbuild import host_kernel
    self.name, self.kernel = name, host_kernel(name, lib.decode())

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    st = time.perf_counter()
    args, keep = arg_addresses(bufs, vals)
    self.kernel.dispatch(args, global_size, local_size)
    del keep
    return time.perf_counter() - st if wait else None

def make_device(name: str, target: Target | None = None) -> Compiled:
  """The METAL device for DEV target `target`: MTL (the default; macOS only) or MOCK (DEV=MOCK+METAL, anywhere with clang++)."""
  target = target or Target(device=name)
  iface = (target.interface or INTERFACES[0]).upper()
  if iface not in INTERFACES: raise ValueError(f"{name} has no interface {iface!r}; choose {' or '.join(INTERFACES)} (DEV=MOCK+{name})")
  if iface == "MTL":
    from plugin_metal.iface_mtl import make_mtl_device
    return make_mtl_device(name, target)
  from plugin_metal.renderer import MetalRenderer
  from plugin_metal.compiler import MetalCheckCompiler
  from plugin_metal.iface_mock import mock_hcq
  renderer = MetalRenderer(target.arch)
  renderer.guard_accesses = True   # the MSL runs on the host: accesses not proven in range are checked (access_guard)
  # the address-space pass only: the host build (hostbuild.py) compiles each kernel's MSL as C++ anyway
  return Compiled(name, HostAllocator(name), renderer, MetalCheckCompiler(as_cxx=False), MockProgram, target=target, hcq=mock_hcq(name))
