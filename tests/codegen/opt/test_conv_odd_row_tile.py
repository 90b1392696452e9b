"""A conv that reads its input at a stride and whose output rows hold an odd number of vectors (the stem's 112 on AVX-512's 16
lanes: one vector a tile, where the tile has 4) takes the register tile's accumulators from the output rows (heuristic.
CONV_ODD_ROW_ACC): 1 vector x 4 channels x 4 rows, where it took MM_MIN_ACC's x 2 rows. AVX2's 16 registers hold no more than
its 8 (and 112 is 14 of its vectors): unchanged there. Opts from AVX2-like and AVX-512-like renderers; results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from opt_helpers import run_ast, host_renderer, register_tile

rng = np.random.default_rng(41)

CASES = {   # name: ((n, c, hw, o, k, stride, pad), AVX-512 tile (lanes, vectors, rows))
  "stem 1x3x96x96 7x7/2 -> 64 (rows of 48, read in place)": ((1, 3, 96, 64, 7, 2, 3), (16, 1, 16)),
  "stem 1x3x224x224 7x7/2 -> 64 (rows of 112)": ((1, 3, 224, 64, 7, 2, 3), (16, 1, 16)),
  "1x3x224x224 3x3/2 -> 32 (rows of 112)": ((1, 3, 224, 32, 3, 2, 1), (16, 1, 16)),
  # rows of 48 at stride 1 keep MM_MIN_ACC's tile: plain vector loads, and read in place through gates it ran slower
  "2x8x48x48 5x5 -> 16 (stride 1)": ((2, 8, 48, 16, 5, 1, 2), (16, 1, 8)),
}

def _reference(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
  k = w.shape[-1]
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  oh = (x.shape[-1] + 2 * pad - k) // stride + 1
  cols = np.stack([xp[:, :, i:i + stride * oh:stride, j:j + stride * oh:stride] for i in range(k) for j in range(k)], axis=2)
  return np.einsum("nckhw,ock->nohw", cols, w.reshape(w.shape[0], w.shape[1], k * k).astype(np.float64))

@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("case", list(CASES))
def test_strided_conv_rows_of_odd_vectors_fill_the_tile(simd_bytes, case):
  (n, c, hw, o, k, stride, pad), tile = CASES[case]
  x, w = rng.standard_normal((n, c, hw, hw), dtype=np.float32), rng.standard_normal((o, c, k, k), dtype=np.float32)
  items, _, _ = create_schedule([Tensor(x).realize().conv2d(Tensor(w).realize(), stride=stride, padding=pad).uop])
  rnd = host_renderer(simd_bytes)
  kern = hand_coded(Kernel(items[-1].ast, rnd))
  got_tile = register_tile(kern.applied)
  if simd_bytes == 64: assert got_tile == tile, kern.applied
  else: assert got_tile == (8, 2, 4), kern.applied   # 2 vectors x 4 rows: AVX2's tile, filled by its columns
  for it in items[:-1]: run_ast(it, hand_coded(Kernel(it.ast, rnd)).ast, rnd)   # the padded input's copy kernels
  got, _ = run_ast(items[-1], kern.ast, rnd)
  want = _reference(x, w, stride, pad)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
