"""The LLVM renderer marks a pack's copy loop whose step loads the rows of two or more vectors (load_rows: a 3x3 conv's
32-channel weight panel, a kh step of 32 masked rows and their transposes) llvm.loop.unroll.disable (renderer.row_copy_loops):
LLVM keeps its 3 steps rolled anyway and only costs out unrolling them. A 16-channel panel's step (one vector's rows) is left to
LLVM, which unrolls it. Results against numpy."""
import re
from collections import Counter
import numpy as np
import pytest
from cpu_kernels import host_like_renderer, run_item
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from plugin_cpu import renderer as R

def _item(out: Tensor):
  (item,) = [it for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK]
  return item

def _marked(src: str) -> list[int]:
  """The step counts of the loops whose back edge carries unroll.disable metadata."""
  return [int(re.search(rf"^{loop}\.head:\n.*\n\s+%t\d+ = icmp slt i32 %ridx\d+, (\d+)", src, re.M).group(1))
          for loop in re.findall(r"br label %(loop\d+)\.head, !llvm.loop !\d+\n", src)]

def _numpy_conv3x3(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
  return np.einsum("nchwij,ocij->nohw", win, w)

# (input, output channels, rows a copy step loads: 32 channels of 3 taps, or 16 where a 32-channel panel of 512 input channels
# would pass PACK_MAX_BYTES)
@pytest.mark.parametrize("shape,cout,rows", [((2, 64, 14, 14), 64, 32), ((2, 512, 7, 7), 32, 16)])
def test_a_copy_step_of_two_vectors_rows_is_not_unrolled(shape, cout, rows, monkeypatch):
  r = np.random.default_rng(5)
  x, w = r.standard_normal(shape).astype(np.float32), r.standard_normal((cout, shape[1], 3, 3)).astype(np.float32)
  def run():
    return run_item(_item(Tensor(x).conv2d(Tensor(w), padding=1)), host_like_renderer("LLVM", 64, threads=0))
  bufs, src = run()
  monkeypatch.setattr(R, "ROW_COPY_NO_UNROLL", False)
  _, off = run()
  assert src.count("call <4 x float> @llvm.masked.load.v4f32") == rows, src
  # beside the copy's channel loop (marked either way): its 3-step kh loop, where the step loads two vectors' rows
  assert set(Counter(_marked(src)) - Counter(_marked(off))) == ({3} if rows == 32 else set()), src
  ref = _numpy_conv3x3(x, w)
  np.testing.assert_allclose(bufs[0].numpy().reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)
