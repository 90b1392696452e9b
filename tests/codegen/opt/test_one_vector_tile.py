"""A plain product whose columns one vector pads less than two (784 pixels = 49 vectors of 16: 800 in pairs), whose column panel
is read in place and whose row-side input, re-read for every panel, is over heuristic.ONE_VECTOR_MIN_ROW_BYTES takes one vector
x 16 rows (MM_TILE_ONE_VECTOR) on AVX-512, unpadded: conv1x1's 32x256x28x28 -> 64 (64 KiB of weights). Where the row side fits
beside a two-vector panel (256 -> 32, 128 -> 64 channels: 32 KiB) 2 x 8 stays, as does 4 x 4 where no tile pads less (1024
columns), and AVX2's 16 registers hold no 1 x 16 tile. Opts from AVX2-like and AVX-512-like renderers; results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded, mm_tile
from opt_helpers import run_ast, host_renderer, conv1x1_item, matmul_item, register_tile

rng = np.random.default_rng(31)

CASES = {   # name: (build, AVX-512 tile (vectors, rows))
  "1x1 conv 2x256x28x28 -> 64": (lambda: conv1x1_item(rng, 2, 256, 28, 64), (1, 16)),      # weights 64 KiB
  "1x1 conv 2x256x28x28 -> 128": (lambda: conv1x1_item(rng, 2, 256, 28, 128), (1, 16)),    # 128 KiB, 8 row blocks
  "matmul 64x256 @ 256x784": (lambda: matmul_item(rng, 64, 256, 784), (1, 16)),
  "1x1 conv 2x256x28x28 -> 32": (lambda: conv1x1_item(rng, 2, 256, 28, 32), (2, 8)),       # 32 KiB: fits beside the panel
  "1x1 conv 2x128x28x28 -> 64": (lambda: conv1x1_item(rng, 2, 128, 28, 64), (2, 8)),
  "matmul 64x256 @ 256x1024": (lambda: matmul_item(rng, 64, 256, 1024), (4, 4)),           # whole tiles of 4 vectors
}

@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("case", list(CASES))
def test_one_vector_tile_where_it_pads_less_and_the_row_side_streams(simd_bytes, case):
  build, tile = CASES[case]
  item, want = build()
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  _, vecs, rows = register_tile(k.applied)
  if simd_bytes == 64:
    assert (vecs, rows) == tile, k.applied
    # 784 columns are 49 whole vectors: the one-vector tile pads none of them
    if tile == (1, 16): assert not any(o.op is OptOps.PADTO for o in k.applied), k.applied
  else: assert vecs * rows + vecs + 1 <= rnd.simd_regs and (vecs, rows) != (1, 16), k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

class _Regs:
  simd_regs = 32

@pytest.mark.parametrize("n_cols, in_place, row_bytes, tile", [
  (784, True, 64 << 10, (1, 16)),     # 49 vectors: 1 x 16 pads none, 2 x 8 one, 4 x 4 three
  (784, True, 32 << 10, (2, 8)),      # the row side fits beside a two-vector panel
  (784, False, 64 << 10, (2, 8)),     # a packed one-vector panel would have the row side read twice as often
  (1024, True, 64 << 10, (4, 4)),     # no tile pads less than the first plain one
  (80, True, 64 << 10, (1, 16)),      # 5 vectors: 2 x 8 pads one, 1 x 16 none
])
def test_mm_tile_one_vector_choice(n_cols, in_place, row_bytes, tile):
  assert mm_tile(_Regs(), False, 256 * 64, plain=True, n_cols=n_cols, lanes=16, in_place=in_place, row_bytes=row_bytes) == tile
  # sixteen registers hold no 1 x 16 tile (16 accumulators, a column vector and a broadcast)
  assert mm_tile(type("R16", (), {"simd_regs": 16})(), False, 256 * 32, plain=True, n_cols=n_cols, lanes=8, in_place=in_place,
                 row_bytes=row_bytes) != (1, 16)
