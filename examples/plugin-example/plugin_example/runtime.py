"""The EXAMPLE runtime: host memory through ctypes, kernels loaded from shared objects, and the device factory (DIRECT or SIM)."""
from __future__ import annotations
import ctypes, os, tempfile, time
from typing import Any
from core.device.allocator import BufferSpec
from core.device.host_memory import HostArrayAllocator
from core.device.compiled import Compiled
from core.device.target import Target

class ExampleAllocator(HostArrayAllocator):
  """Buffers are ctypes byte arrays (core's HostArrayAllocator gives the views, host access and copies)."""
  def _alloc(self, size: int, options: BufferSpec) -> Any: return (ctypes.c_uint8 * size)()

class ExampleProgram:
  """One kernel: the shared object is written to a temp file just long enough for dlopen to map it."""
  def __init__(self, name: str, lib: bytes):
    with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f: f.write(lib)
    try: self.lib = ctypes.CDLL(f.name)
    finally: os.unlink(f.name)
    self.fxn = getattr(self.lib, name)
    self.handle = 0   # what a SIM LAUNCH names it by (SimHCQ.load_program numbers it)

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    st = time.perf_counter()
    self.fxn(*[ctypes.cast(b, ctypes.c_void_p) for b in bufs], *[ctypes.c_int32(v) for v in vals])
    return time.perf_counter() - st if wait else None

def make_device(name: str, target: Target | None = None) -> Compiled:
  """The EXAMPLE device for DEV target `target`. Interface DIRECT (the default): core calls each kernel through ExampleProgram.
  SIM (DEV=SIM+EXAMPLE): core's HCQ pipeline runs whole schedules as packets on the simulated driver's queues (iface_sim.py)."""
  from plugin_example import make_c
  target = target or Target(device=name)
  renderer, compiler = make_c(target.arch)
  iface = (target.interface or "DIRECT").upper()
  if iface not in ("DIRECT", "SIM"): raise ValueError(f"{name} has no interface {iface!r}; choose DIRECT (the default) or SIM (DEV=SIM+{name})")
  from plugin_example.iface_sim import sim_hcq
  return Compiled(name, ExampleAllocator(name), renderer, compiler, ExampleProgram, target=target, hcq=sim_hcq(name) if iface == "SIM" else None)
