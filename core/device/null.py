"""The NULL device: compiles with any installed plugin's renderer and compiler, allocates nothing and runs nothing."""
from __future__ import annotations
from typing import Any
from core.device.allocator import Allocator, BufferSpec
from core.device.compiled import Compiled
from core.device.target import Target

class NullAllocator(Allocator[int]):
  """Hands out size tokens instead of memory; copies do nothing (reads see whatever the destination held)."""
  def _alloc(self, size: int, options: BufferSpec) -> int: return size
  def _copyin(self, dest: int, src: memoryview) -> None: pass
  def _copyout(self, dest: memoryview, src: int) -> None: pass
  def _offset(self, opaque: int, size: int, offset: int) -> int: return size

class NullProgram:
  """A kernel that is never run; timing it reports zero seconds."""
  def __init__(self, name: str, lib: bytes): self.name, self.lib = name, lib
  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    return 0.0 if wait else None

def make_null_device(name: str, target: Target | None = None) -> Compiled:
  from core.device.plugins import get_plugins
  target = target or Target(device="NULL")
  spec, rname = get_plugins().borrowed_renderer_spec(target.renderer)
  renderer, compiler = spec.make_renderer(rname, target.arch)
  return Compiled(name, NullAllocator(name), renderer, compiler, NullProgram, target=target)
