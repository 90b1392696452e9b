"""Shorter LLVM IR for the same machine code: a vector of one value in every lane is one insertelement and a splat shuffle
(core.codegen.llvm_ir._render_vectorize), not an insertelement per lane; the lane addresses of a block step from one GEP of the
buffer at their index (renderer._llvm_offset_index), not one each. Results match numpy."""
import re
import numpy as np
from cpu_kernels import run, device, run_rendered, lane_copy

def test_a_broadcast_is_one_lane_and_a_splat_shuffle():
  # an outer product: a[i] broadcast over the lanes of b's vector
  a, b = np.arange(24, dtype=np.float32) - 5, np.linspace(-2, 3, 64, dtype=np.float32)
  got, src = run_rendered(device("LLVM").renderer, lambda x, y: x.reshape(24, 1) * y.reshape(1, 64), a, b)
  np.testing.assert_array_equal(got.reshape(24, 64), a[:, None] * b[None, :])
  assert re.search(r"= shufflevector <\d+ x float> %t\d+, <\d+ x float> poison, <\d+ x i32> zeroinitializer", src), src
  # no chain of insertelements repeating a value (lane 1 of a vector built from the value in lane 0)
  for vec, val in re.findall(r"(%\w+) = insertelement <\d+ x float> poison, float (%\w+), i32 0", src):
    assert not re.search(rf"= insertelement <\d+ x float> {vec}, float {val}, i32 1\n", src), src

def test_a_blocks_lanes_share_the_buffer_at_their_index():
  src = device("LLVM").renderer.render("lane_copy", lane_copy())
  for data in ("%data0", "%data1"):
    (base,) = re.findall(rf"(%\w+) = getelementptr float, ptr {data}, i32 %\w+\n", src)
    assert len(re.findall(rf"= getelementptr float, ptr {base}, i64 \d+\n", src)) == 8, src
  x = np.arange(32, dtype=np.float32) * 0.5 - 3
  res = run("LLVM", lane_copy(), [np.zeros(32, np.float32), x])[0]
  np.testing.assert_array_equal(res, x.reshape(4, 8).T.reshape(-1))
