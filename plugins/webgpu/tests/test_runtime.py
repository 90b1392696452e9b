"""The WEBGPU runtime: views at offsets that are not word- or binding-aligned read, write and bind correctly."""
from __future__ import annotations
from typing import Any
import numpy as np
from core.device.buffer import Buffer
from core.ir.dtype import dtypes

def test_unaligned_view_copies_keep_the_neighbours(webgpu: Any) -> None:
  base = Buffer("WEBGPU", 100, dtypes.uint8).allocate()
  base.copyin(memoryview(bytearray(range(100))))
  view = Buffer("WEBGPU", 10, dtypes.uint8, base=base, offset=37).allocate()
  view.copyin(memoryview(bytearray([200 + i for i in range(10)])))
  out = memoryview(bytearray(100))
  base.copyout(out)
  want = bytearray(range(100))
  want[37:47] = bytes(200 + i for i in range(10))
  assert bytes(out) == bytes(want)
  part = memoryview(bytearray(10))
  view.copyout(part)
  assert bytes(part) == bytes(200 + i for i in range(10))

def test_bind_entries_align_down_and_pass_element_offsets(webgpu: Any) -> None:
  from plugin_webgpu.gpu import gpu
  from plugin_webgpu.runtime import WGBuffer, bind_entries
  g = gpu()
  align = g.offset_alignment
  buf = g.device.create_buffer(size=4 * align, usage=g.wgpu.BufferUsage.STORAGE)
  meta = {"bufs": [[0, "float32", 4, True], [1, "uint8", 1, False]]}
  entries, args = bind_entries(g, meta, (WGBuffer(buf, align + 12, 8), WGBuffer(buf, 2 * align + 3, 5)), (-5,))
  assert [(e["resource"]["offset"], e["resource"]["size"]) for e in entries] == [(align, 20), (2 * align, 8)]
  assert np.frombuffer(args, dtype=np.int32).tolist() == [-5, 3, 3, 0]   # the variable, then element offsets 12/4 and 3/1

def test_kernel_on_a_view_of_a_realized_tensor(webgpu: Any) -> None:
  from core import Tensor
  a = np.arange(64, dtype=np.float32)
  t = Tensor(a, device="WEBGPU").realize()
  np.testing.assert_array_equal((t[3:40] * 2).numpy(), a[3:40] * 2)
  np.testing.assert_array_equal((t[5:9].contiguous() + t[1:5]).numpy(), a[5:9] + a[1:5])
