"""The LLVM renderer marks a pack's copy loop whose step loads the rows of two or more vectors (load_rows: a 3x3 conv's
32-channel weight panel, a kh step of 32 masked rows and their transposes) llvm.loop.unroll.disable (renderer.row_copy_loops):
LLVM keeps its 3 steps rolled anyway and only costs out unrolling them. A 16-channel panel's step (one vector's rows) is left to
LLVM, which unrolls it. Results against numpy."""
from collections import Counter
import numpy as np
import pytest
from cpu_kernels import host_like_renderer, numpy_conv, run_item, sink_item, unroll_disabled_steps
from core import Tensor
from plugin_cpu import renderer as R

# (input, output channels, rows a copy step loads: 32 channels of 3 taps, or 16 where a 32-channel panel of 512 input channels
# would pass PACK_MAX_BYTES)
@pytest.mark.parametrize("shape,cout,rows", [((2, 64, 14, 14), 64, 32), ((2, 512, 7, 7), 32, 16)])
def test_a_copy_step_of_two_vectors_rows_is_not_unrolled(shape, cout, rows, monkeypatch):
  r = np.random.default_rng(5)
  x, w = r.standard_normal(shape).astype(np.float32), r.standard_normal((cout, shape[1], 3, 3)).astype(np.float32)
  def run():
    return run_item(sink_item(Tensor(x).conv2d(Tensor(w), padding=1)), host_like_renderer("LLVM", 64, threads=0))
  bufs, src = run()
  monkeypatch.setattr(R, "ROW_COPY_NO_UNROLL", False)
  _, off = run()
  assert src.count("call <4 x float> @llvm.masked.load.v4f32") == rows, src
  # beside the copy's channel loop (marked either way): its 3-step kh loop, where the step loads two vectors' rows
  assert set(Counter(unroll_disabled_steps(src)) - Counter(unroll_disabled_steps(off))) == ({3} if rows == 32 else set()), src
  ref = numpy_conv(x, w, pad=1)
  np.testing.assert_allclose(bufs[0].numpy().reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)
