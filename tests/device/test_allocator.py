"""Allocator and LRUAllocator: reuse of freed blocks, and OutOfMemory messages that say what happened."""
from __future__ import annotations
from types import SimpleNamespace
from typing import Any
import pytest
from core.device.allocator import Allocator, BufferSpec, LRUAllocator, OutOfMemory

class CappedMemory(LRUAllocator[bytearray]):
  """Host memory with a hard limit, so running out is deterministic."""
  def __init__(self, limit: int):
    super().__init__("TEST")
    self.limit, self.live, self.freed = limit, 0, 0
  def _alloc(self, size: int, options: BufferSpec) -> bytearray:
    if self.live + size > self.limit: raise MemoryError(f"device has {self.limit - self.live} bytes left")
    self.live += size
    return bytearray(size)
  def _free(self, opaque: bytearray, options: BufferSpec) -> None:
    self.live -= len(opaque)
    self.freed += 1
  def _copyin(self, dest: bytearray, src: memoryview) -> None: dest[:] = src
  def _copyout(self, dest: memoryview, src: bytearray) -> None: dest[:] = src

def test_lru_reuses_freed_block_of_same_size_and_options() -> None:
  a = CappedMemory(1000)
  x = a.alloc(100)
  a.free(x, 100)
  assert a.live == 100 and a.used == 0 and a.cached_bytes == 100
  assert a.alloc(100) is x                           # same size: the cached block comes back
  assert a.alloc(100, BufferSpec(uncached=True)) is not x and a.live == 200   # other options: a new block
  assert a.used == 200

def test_nolru_blocks_are_freed_at_once() -> None:
  a = CappedMemory(1000)
  x = a.alloc(64, BufferSpec(nolru=True))
  a.free(x, 64, BufferSpec(nolru=True))
  assert a.live == 0 and a.freed == 1 and a.cached_bytes == 0

def test_cache_is_flushed_before_giving_up() -> None:
  a = CappedMemory(300)
  for blk in [a.alloc(100), a.alloc(100)]: a.free(blk, 100)
  y = a.alloc(250)                                   # only fits once the two cached blocks go back to the device
  assert len(y) == 250 and a.freed == 2 and a.cached_bytes == 0

def test_out_of_memory_says_asked_in_use_and_flushed() -> None:
  a = CappedMemory(300)
  keep = a.alloc(200)
  a.free(a.alloc(50), 50)
  with pytest.raises(OutOfMemory) as e: a.alloc(200)
  msg = str(e.value)
  assert "200 B (200 bytes)" in msg and "200 B in use" in msg and "cache of 1 freed buffers (50 B) was flushed first" in msg
  assert "TEST" in msg and isinstance(e.value, MemoryError) and len(keep) == 200
  assert a.used == 200 and a.live == 200             # the failed attempt changed nothing

def test_plain_allocator_wraps_memory_error() -> None:
  class Tiny(Allocator[bytearray]):
    def _alloc(self, size: int, options: BufferSpec) -> bytearray: raise MemoryError("no")
  with pytest.raises(OutOfMemory, match=r"DEV0: out of memory allocating 1.00 KB \(1024 bytes\) with 0 B in use"): Tiny("DEV0").alloc(1024)

@pytest.mark.parametrize("size", [0, -5, 1.5])
def test_bad_sizes_are_refused(size) -> None:
  with pytest.raises(ValueError, match="positive int"): CappedMemory(10).alloc(size)

@pytest.mark.parametrize("cls", [Allocator, LRUAllocator])
@pytest.mark.parametrize("device, kind", [(SimpleNamespace(device="TEST"), "SimpleNamespace"), (None, "NoneType")])
def test_device_that_is_not_a_name_is_refused_at_construction(cls: type, device: Any, kind: str) -> None:
  # a device object (a Compiled, with the name in .device) is the likely mistake: refused here, not by a later error
  with pytest.raises(TypeError, match=rf"^{cls.__name__}\(device\): device is the device's name \(a str such as 'CPU'\), not a {kind}; "):
    cls(device)

def test_subclass_may_skip_init() -> None:
  class NoInit(LRUAllocator[bytearray]):
    def __init__(self) -> None: pass
    def _alloc(self, size: int, options: BufferSpec) -> bytearray: return bytearray(size)
  a = NoInit()
  x = a.alloc(8)
  a.free(x, 8)
  assert a.alloc(8) is x and a.used == 8

def test_the_cache_of_freed_blocks_is_bounded_oldest_first(monkeypatch):
  import core.device.allocator as A
  monkeypatch.setattr(A, "ALLOC_CACHE_BYTES", 1000)
  class Counting(A.LRUAllocator):
    def __init__(self) -> None:
      super().__init__("TEST")
      self.released: list[int] = []
    def _alloc(self, size, options): return bytearray(size)
    def _free(self, opaque, options): self.released.append(len(opaque))
  a = Counting()
  blocks = [a.alloc(n) for n in (300, 400, 500, 200)]
  for b in blocks: a.free(b, len(b))
  # 1400 bytes freed into a 1000-byte cache: the first-freed sizes went back to the device until it fit
  assert a.released == [300, 400] and a.cached_bytes == 700
  assert len(a.alloc(500)) == 500 and a.cached_bytes == 200 and a.released == [300, 400]   # a hit from the cache
  big = a.alloc(2000)
  a.free(big, 2000)   # larger than the whole cache: straight back to the device
  assert a.released[-1] == 2000 and a.cached_bytes == 200
  a.free_cache()
  assert a.cached_bytes == 0 and sorted(a.released) == [200, 300, 400, 2000]
