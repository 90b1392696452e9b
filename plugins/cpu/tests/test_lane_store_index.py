"""The LLVM renderer writes a scalar store's address at a constant offset from a 32-bit index as the buffer + (the index widened
+ the offset) in i64 (renderer._llvm_lane_store_index: LLVM's loop passes grew with the square of per-lane i32 adds, an AVX-512
conv's output stores most of its compile); loads keep the i32 add. Results match numpy."""
import re
import numpy as np
from core.ir.dtype import dtypes
from cpu_kernels import Linear, c, rng, buf, run, device

def _transposing_copy() -> list:
  # out[k*4 + i] = x[i*8 + k]: 8 scalar stores a step, at offsets 4k from the row index i
  out, x = buf(0, dtypes.float32, 32), buf(1, dtypes.float32, 32)
  lin = Linear()
  lin.add(out, x)
  i = lin.add(rng(4, 0))
  for k in range(8): lin.add(out.index(i + c(4 * k)).store(x.index(i * c(8) + c(k)).load()))
  lin.add(lin.uops[-1].end(i))
  return lin.uops

def test_lane_stores_index_in_i64_loads_in_i32():
  src = device("LLVM").renderer.render("lane_stores", _transposing_copy())
  assert sorted(int(o) for o in re.findall(r"= add nsw i64 %\w+, (\d+)\n", src)) == [4 * k for k in range(8)]   # the stores'
  assert src.count("getelementptr inbounds float, ptr %data0, i64") == 8
  assert src.count("getelementptr inbounds float, ptr %data1, i32") == 8   # the loads' i32 index, as before

def test_lane_stores_store_where_the_i32_index_did():
  x = np.arange(32, dtype=np.float32) * 0.5 - 3
  res = run("LLVM", _transposing_copy(), [np.zeros(32, np.float32), x])[0]
  np.testing.assert_array_equal(res, x.reshape(4, 8).T.reshape(-1))
