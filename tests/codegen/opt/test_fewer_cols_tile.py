"""A plain product whose columns the first plain tile (4 vectors x 4 rows on AVX-512) pads more than 2 vectors x 8 rows would
takes 2 x 8 (heuristic.MM_TILE_FEWER_COLS: the same accumulators): a 1x1 conv over 28x28 pixels (784: 832 in 64-wide tiles, 800
in 32-wide), a matmul with 80 columns (128 vs 96; its 5 whole vectors then go one at a time). Columns both pad alike (1024, 1000) keep 4 x 4; AVX2's 16 registers hold no
2 x 8 tile. Opts from AVX2-like and AVX-512-like renderers; results against numpy on both."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded, simd_lanes
from core.schedule.kernelize import create_schedule
from opt_helpers import run_ast, host_renderer

rng = np.random.default_rng(29)

def _conv1x1(n: int, c: int, hw: int, o: int) -> tuple[object, np.ndarray]:
  x, w = rng.standard_normal((n, c, hw, hw)).astype(np.float32), rng.standard_normal((o, c, 1, 1)).astype(np.float32)
  (item,), _, _ = create_schedule([Tensor(x).realize().conv2d(Tensor(w).realize()).uop])
  return item, np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))

def _matmul(m: int, kk: int, n: int) -> tuple[object, np.ndarray]:
  a, b = rng.standard_normal((m, kk)).astype(np.float32), rng.standard_normal((kk, n)).astype(np.float32)
  (item,), _, _ = create_schedule([(Tensor(a).realize() @ Tensor(b).realize()).uop])
  return item, a.astype(np.float64) @ b

def _tile(k: Kernel) -> tuple[int, int, int]:
  """(lanes, vectors, rows) of k's register tile: the first UPCAST (the lanes), the others of its axis and of the other axes."""
  ups = [o for o in k.applied if o.op is OptOps.UPCAST]
  vecs = [o.amt for o in ups[1:] if o.axis == ups[0].axis]
  rows = [o.amt for o in ups[1:] if o.axis != ups[0].axis]
  return ups[0].amt, int(np.prod(vecs or [1])), int(np.prod(rows or [1]))

CASES = {   # name: (build, AVX-512 tile (vectors, rows))
  "1x1 conv 4x256x28x28 -> 64": (lambda: _conv1x1(4, 256, 28, 64), (2, 8)),
  "matmul 256x256 @ 256x80": (lambda: _matmul(256, 256, 80), (1, 8)),   # 5 whole vectors: one at a time, not padded to 6
  "matmul 128x128 @ 128x1000": (lambda: _matmul(128, 128, 1000), (4, 4)),
  "matmul 256x256 @ 256x256": (lambda: _matmul(256, 256, 256), (4, 4)),
}

@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("case", list(CASES))
def test_plain_tile_pads_the_fewest_columns(simd_bytes, case):
  build, tile = CASES[case]
  item, want = build()
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  lanes, vecs, rows = _tile(k)
  assert lanes == simd_lanes(rnd, 4), k.applied
  if simd_bytes == 64: assert (vecs, rows) == tile, k.applied
  else: assert vecs * rows + vecs + 1 <= rnd.simd_regs and (vecs, rows) != (2, 8), k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
