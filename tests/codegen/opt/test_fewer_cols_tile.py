"""A plain product whose columns the first plain tile (4 vectors x 4 rows on AVX-512) pads more than 2 vectors x 8 rows would
takes 2 x 8 (heuristic.MM_TILE_FEWER_COLS: the same accumulators): a 1x1 conv over 28x28 pixels (784: 832 in 64-wide tiles, 800
in 32-wide), a matmul with 80 columns (128 vs 96; its 5 whole vectors then go one at a time). Columns both pad alike (1024, 1000) keep 4 x 4; AVX2's 16 registers hold no
2 x 8 tile. Opts from AVX2-like and AVX-512-like renderers; results against numpy on both."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded, simd_lanes
from opt_helpers import run_ast, host_renderer, conv1x1_item, matmul_item, register_tile

rng = np.random.default_rng(29)

CASES = {   # name: (build, AVX-512 tile (vectors, rows))
  # (3 images: no pairs of them to hold the tile's vectors instead, WHOLE_ROW_THIRD_VECTORS)
  "1x1 conv 3x256x28x28 -> 64": (lambda: conv1x1_item(rng, 3, 256, 28, 64), (2, 8)),
  "matmul 256x256 @ 256x80": (lambda: matmul_item(rng, 256, 256, 80), (1, 8)),   # 5 whole vectors: one at a time, not padded to 6
  "matmul 128x128 @ 128x1000": (lambda: matmul_item(rng, 128, 128, 1000), (4, 4)),
  "matmul 256x256 @ 256x256": (lambda: matmul_item(rng, 256, 256, 256), (4, 4)),
}

@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("case", list(CASES))
def test_plain_tile_pads_the_fewest_columns(simd_bytes, case):
  build, tile = CASES[case]
  item, want = build()
  rnd = host_renderer(simd_bytes, masked=True)   # masked pad lanes decide how far a tile may pad the columns
  k = hand_coded(Kernel(item.ast, rnd))
  lanes, vecs, rows = register_tile(k.applied)
  assert lanes == simd_lanes(rnd, 4), k.applied
  if simd_bytes == 64: assert (vecs, rows) == tile, k.applied
  else: assert vecs * rows + vecs + 1 <= rnd.simd_regs and (vecs, rows) != (2, 8), k.applied
  rnd = host_renderer(simd_bytes)   # the values: the default renderer's own plan
  got, _ = run_ast(item, hand_coded(Kernel(item.ast, rnd)).ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
