"""The LLVM renderer writes a scalar load's 32-bit index plus a constant as `add nsw` (renderer._llvm_index_offset), and the
load's address as the buffer at the index, then the constant in i64 (renderer._llvm_offset_index): a tile's lanes read one by
one in a reduce loop are then one address plus displacements to LLVM's loop passes. Other int32 adds (the data's) keep
wrapping. Results match numpy."""
import re
import numpy as np
from core.ir.dtype import dtypes
from cpu_kernels import Linear, c, rng, buf, run, device, offset_row_sums

def _plus_one() -> list:
  # out[i] = x[i] + 1 in int32: a data add, which must wrap
  out, x = buf(0, dtypes.int32, 4), buf(1, dtypes.int32, 4)
  lin = Linear()
  lin.add(out, x)
  i = lin.add(rng(4, 0))
  lin.add(out.index(i).store(x.index(i).load() + c(1)).end(i))
  return lin.uops

def test_a_scalar_loads_offset_index_is_nsw():
  src = device("LLVM").renderer.render("lane_sums", offset_row_sums())
  assert sorted(int(o) for o in re.findall(r"= add nsw i32 %\w+, (\d+)\n", src)) == [1, 2]

def test_a_scalar_loads_offset_is_an_i64_step_from_its_index():
  # both loads address data1 at the same i32 index (i*8 + j), then 1 and 2 floats on in i64: no address of their own
  src = device("LLVM").renderer.render("lane_sums", offset_row_sums())
  at = dict(re.findall(r"(%\w+) = getelementptr inbounds float, ptr %data1, i32 (%\w+)\n", src))
  steps = [(at[p], int(o)) for p, o in re.findall(r"getelementptr inbounds float, ptr (%\w+), i64 (\d+)", src) if p in at]
  assert sorted(o for _, o in steps) == [1, 2] and len({i for i, _ in steps}) == 1

def test_a_data_add_still_wraps():
  src = device("LLVM").renderer.render("plus_one", _plus_one())
  assert "nsw" not in src
  x = np.array([2**31 - 1, -1, 0, 5], np.int32)
  np.testing.assert_array_equal(run("LLVM", _plus_one(), [np.zeros(4, np.int32), x])[0], np.array([-2**31, 0, 1, 6], np.int32))

def test_lane_sums_match_numpy():
  x = np.arange(40, dtype=np.float32) * 0.5 - 3
  res = run("LLVM", offset_row_sums(), [np.zeros(4, np.float32), x])[0]
  np.testing.assert_allclose(res, [x[i * 8 + 1:i * 8 + 9].sum() + x[i * 8 + 2:i * 8 + 10].sum() for i in range(4)], rtol=1e-6)
