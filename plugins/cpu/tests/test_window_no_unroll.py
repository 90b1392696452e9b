"""The LLVM renderer marks a reduce loop of more than NEST_UNROLL_MAX and at most COPY_UNROLL_MAX steps around loops of at
most COPY_UNROLL_MAX (a 7x7 conv's kh taps around its kw taps) llvm.loop.unroll.disable (renderer._llvm_copy_end, window):
LLVM fully unrolls the kw taps, then costs out unrolling the kh loop around them and keeps it rolled, ResNet-18's stem a sixth
of its compile for the same object. A 3x3 conv's kh taps are left to LLVM (unrolled, they ran faster). Results against numpy."""
from collections import Counter
import numpy as np
import pytest
from cpu_kernels import host_like_renderer, numpy_conv, run_item, sink_item, unroll_disabled_steps
from core import Tensor
from plugin_cpu import renderer as R

def _conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> Tensor:
  return Tensor(x).conv2d(Tensor(w), stride=stride, padding=pad)

@pytest.mark.parametrize("simd", [32, 64])
@pytest.mark.parametrize("k,stride,pad,marked", [(7, 2, 3, True), (3, 1, 1, False)])
def test_a_window_loop_around_short_loops_is_not_unrolled(simd, k, stride, pad, marked, monkeypatch):
  r = np.random.default_rng(7)
  x, w = r.standard_normal((2, 3, 40, 40)).astype(np.float32), r.standard_normal((64, 3, k, k)).astype(np.float32)
  bufs, src = run_item(sink_item(_conv(x, w, stride, pad)), host_like_renderer("LLVM", simd, threads=0))
  monkeypatch.setattr(R, "NEST_NO_UNROLL", False)
  _, off = run_item(sink_item(_conv(x, w, stride, pad)), host_like_renderer("LLVM", simd, threads=0))
  # beside the pack copy's loops (marked either way): the 7x7 window's kh loop (7 steps, the kw loop inside); a 3x3 conv's
  # kh taps are not
  assert set(Counter(unroll_disabled_steps(src)) - Counter(unroll_disabled_steps(off))) == ({k} if marked else set()), src
  ref = numpy_conv(x, w, stride, pad)
  np.testing.assert_allclose(bufs[0].numpy().reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)
