"""Buffer on a real device (PYTHON, always present): copies, views with offsets, and freeing when unreachable."""
from __future__ import annotations
import gc
import numpy as np
import pytest
from core.device.buffer import Buffer
from core.device.counters import GlobalCounters
from core.device.registry import Device
from core.ir.dtype import dtypes

def test_copyin_copyout_numpy_roundtrip() -> None:
  x = np.arange(10, dtype=np.int32) * 3 - 7
  b = Buffer("PYTHON", 10, dtypes.int32).copyin(memoryview(x))
  assert b.is_allocated() and b.nbytes == 40
  np.testing.assert_array_equal(b.numpy(), x)
  out = bytearray(40)
  b.copyout(memoryview(out))
  np.testing.assert_array_equal(np.frombuffer(out, np.int32), x)

def test_views_read_and_write_their_base() -> None:
  base = Buffer("PYTHON", 8, dtypes.float32).copyin(memoryview(np.arange(8, dtype=np.float32)))
  v = base.view(3, dtypes.float32, 8).allocate()         # elements 2..4
  np.testing.assert_array_equal(v.numpy(), [2, 3, 4])
  v.copyin(memoryview(np.array([-1, -2, -3], np.float32)))
  np.testing.assert_array_equal(base.numpy(), [0, 1, -1, -2, -3, 5, 6, 7])
  vv = v.view(1, dtypes.int32, 4).allocate()             # a view of a view points into the same base, offsets add up
  assert vv.base is base and vv.offset == 12
  assert vv.numpy()[0] == np.array([-2], np.float32).view(np.int32)[0]

def test_view_must_fit_in_its_base() -> None:
  base = Buffer("PYTHON", 4, dtypes.int32)
  with pytest.raises(ValueError, match="does not fit"): base.view(2, dtypes.int32, 12)

def test_view_keeps_base_alive_and_base_is_freed_when_unreachable() -> None:
  gc.collect()
  before = GlobalCounters.mem_used["PYTHON"]
  base = Buffer("PYTHON", 256, dtypes.uint8).allocate()
  assert GlobalCounters.mem_used["PYTHON"] == before + 256
  v = base.view(16, dtypes.uint8, 32).allocate()
  del base
  gc.collect()
  assert GlobalCounters.mem_used["PYTHON"] == before + 256   # the view still holds it
  v.copyin(bytes(range(16)))
  assert v.numpy().tolist() == list(range(16))
  del v
  gc.collect()
  assert GlobalCounters.mem_used["PYTHON"] == before

def test_unallocated_reads_fail_clearly_and_sizes_are_checked() -> None:
  b = Buffer("PYTHON", 4, dtypes.int32)
  with pytest.raises(RuntimeError, match="not allocated"): b.numpy()
  with pytest.raises(ValueError, match="copyin of 3 bytes"): b.copyin(b"abc")
  b.allocate()
  with pytest.raises(RuntimeError, match="already allocated"): b.allocate()

def test_as_buffer_is_zero_copy_on_host_memory() -> None:
  b = Buffer("PYTHON", 4, dtypes.uint8).copyin(b"\x01\x02\x03\x04")
  mv = b.as_buffer()
  mv[0] = 9
  assert b.numpy().tolist() == [9, 2, 3, 4]

def test_device_canonical_names_share_one_instance() -> None:
  assert Device["python"] is Device["PYTHON:0"] is Device["PYTHON"]
  assert Device["PYTHON:1"] is not Device["PYTHON"] and Device["PYTHON:1"].device == "PYTHON:1"
