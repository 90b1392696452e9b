"""Host memory as ctypes byte arrays: the memory of software devices (mocks, simulators, kernels run on the host). An array is
its own zero-copy host view, and its address is the pointer the kernels take."""
from __future__ import annotations
import ctypes
from typing import Any
from core.device.allocator import LRUAllocator

def aligned_array(size: int, align: int, room: int = 0) -> tuple[ctypes.Array, ctypes.Array]:
  """`size` bytes whose address is a multiple of `align`, and the array that owns them, which holds max(size, room) bytes from
  that address on. The view keeps its owner alive (from_buffer); a caller registering the span may keep the owner too."""
  raw = (ctypes.c_uint8 * (max(size, room) + align - 1))()
  return (ctypes.c_uint8 * size).from_buffer(raw, -ctypes.addressof(raw) % align), raw

class HostArrayAllocator(LRUAllocator[Any]):
  """Buffers are ctypes byte arrays, made by the subclass's `_alloc`. A view at an offset shares its base array (from_buffer
  keeps the base alive), the host reads a buffer in place, and a copy is one memmove."""
  def _offset(self, opaque: Any, size: int, offset: int) -> Any: return (ctypes.c_uint8 * size).from_buffer(opaque, offset)
  def _as_buffer(self, opaque: Any) -> memoryview: return memoryview(opaque).cast("B")
  # a memoryview slice assignment is one memmove, without ctypes' array type and from_buffer per call (0.8 vs 2.2 us for 24 KiB,
  # the same for MiBs), and takes read-only sources
  def _copyin(self, dest: Any, src: memoryview) -> None: memoryview(dest).cast("B")[:] = src.cast("B")
  def _copyout(self, dest: memoryview, src: Any) -> None: dest.cast("B")[:] = memoryview(src).cast("B")
