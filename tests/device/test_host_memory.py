"""core.device.host_memory: aligned ctypes arrays and the allocator base of the software devices' host memory."""
import ctypes, gc
import numpy as np
import pytest
from core.device.allocator import BufferSpec
from core.device.host_memory import HostArrayAllocator, aligned_array

@pytest.mark.parametrize("size,align,room", [(1, 256, 0), (1000, 64, 0), (1000, 256, 1024), (4096, 4096, 0)])
def test_aligned_array_starts_on_the_alignment_and_owns_the_room(size, align, room):
  buf, raw = aligned_array(size, align, room)
  start = ctypes.addressof(buf)
  assert start % align == 0 and len(buf) == size
  # the owner holds max(size, room) bytes from the aligned start on
  assert ctypes.addressof(raw) <= start and start + max(size, room) <= ctypes.addressof(raw) + len(raw)

def test_an_aligned_view_keeps_its_owner_alive():
  buf, raw = aligned_array(64, 256)
  buf[:] = bytes(range(64))
  del raw
  gc.collect()
  assert bytes(buf) == bytes(range(64))

class Arrays(HostArrayAllocator):
  def _alloc(self, size, options): return (ctypes.c_uint8 * size)()

def test_views_copies_and_host_access_share_the_array():
  a = Arrays("HOST")
  buf = a.alloc(64)
  src = np.arange(16, dtype=np.float32)
  a._copyin(buf, memoryview(src.tobytes()))   # a read-only source
  view = a._offset(buf, 16, 32)
  assert np.frombuffer(a._as_buffer(view), np.float32).tolist() == [8.0, 9.0, 10.0, 11.0]
  a._copyin(view, memoryview(np.full(4, -1, np.float32)).cast("B"))
  out = np.empty(16, np.float32)
  a._copyout(memoryview(out).cast("B"), buf)
  np.testing.assert_array_equal(out, np.concatenate([src[:8], [-1] * 4, src[12:]]))

def test_freed_arrays_are_handed_out_again():
  a = Arrays("HOST")
  buf = a.alloc(128, BufferSpec())
  a.free(buf, 128, BufferSpec())
  assert a.alloc(128, BufferSpec()) is buf
