"""The LLVM renderer writes the address of a scalar store, or of a scalar load outside reduce loops, at a constant offset from a
32-bit index as the buffer at the index, then the constant in i64 (renderer._llvm_lane_index, through _llvm_offset_index): a
tile's lanes then step from one address. As one GEP at (the index widened + the offset), the instruction selector rebuilt every
lane's address from its sum. Loads in reduce loops keep the i32 add. Results match numpy."""
import re
import numpy as np
from cpu_kernels import run, device, offset_row_sums, lane_copy

def _steps(src: str, data: str) -> list[int]:
  """The constant offsets of the lane addresses that step from `data` at an i32 index (the lane's base) in `src`."""
  at = set(re.findall(rf"(%\w+) = getelementptr float, ptr {data}, i32 %\w+\n", src))
  return sorted(int(o) for b, o in re.findall(r"= getelementptr float, ptr (%\w+), i64 (\d+)\n", src) if b in at)

def test_lane_stores_and_loads_step_from_their_index():
  src = device("LLVM").renderer.render("lane_copy", lane_copy())
  assert _steps(src, "%data0") == [4 * k for k in range(8)]
  assert _steps(src, "%data1") == list(range(8))
  assert "add nsw i64" not in src

def test_loads_in_a_reduce_loop_keep_the_i32_index():
  src = device("LLVM").renderer.render("row_sums", offset_row_sums())
  # (the two loads, one block, share the buffer at the index: _llvm_offset_index)
  assert len(re.findall(r"getelementptr (inbounds )?float, ptr %data1, i32", src)) == 1 and "ptr %data1, i64" not in src

def test_lane_indices_address_what_the_i32_index_did():
  x = np.arange(40, dtype=np.float32) * 0.5 - 3
  res = run("LLVM", lane_copy(), [np.zeros(32, np.float32), x[:32].copy()])[0]
  np.testing.assert_array_equal(res, x[:32].reshape(4, 8).T.reshape(-1))
  res = run("LLVM", offset_row_sums(), [np.zeros(4, np.float32), x])[0]
  np.testing.assert_allclose(res, [x[i * 8 + 1:i * 8 + 9].sum() + x[i * 8 + 2:i * 8 + 10].sum() for i in range(4)], rtol=1e-6)
