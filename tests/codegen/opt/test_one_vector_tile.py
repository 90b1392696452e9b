"""A plain product whose columns one vector pads less than two (784 pixels = 49 vectors of 16: 800 in pairs) and whose panel one
vector wide, from beyond the L2, is read in place where a two-vector one would be packed (16-row blocks read it, half as many as
8-row ones: 8 of them, heuristic.PANEL_STREAM_REUSE, not 16) takes one vector x 16 rows (MM_TILE_ONE_VECTOR) on AVX-512, unpadded: 1x1 convs to
128 channels of 28x28 pixels. Where both panels are read in place (64 channels, over an odd number of images) or both packed, 2 x 8
stays, as does 4 x 4 where no tile pads less (1024 columns); AVX2's 16 registers hold no 1 x 16 tile. Opts from AVX2-like and
AVX-512-like renderers; results against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded, mm_tile
from opt_helpers import run_ast, host_renderer, conv1x1_item, matmul_item, register_tile

rng = np.random.default_rng(31)

CASES = {   # name: (build, AVX-512 tile (vectors, rows))
  "1x1 conv 2x256x28x28 -> 128": (lambda: conv1x1_item(rng, 2, 256, 28, 128), (1, 16)),    # 8 one-vector row blocks, 16 of 2 x 8
  "1x1 conv 2x512x28x28 -> 128": (lambda: conv1x1_item(rng, 2, 512, 28, 128), (1, 16)),
  "matmul 128x512 @ 512x784": (lambda: matmul_item(rng, 128, 512, 784), (1, 16)),
  "1x1 conv 1x256x28x28 -> 128": (lambda: conv1x1_item(rng, 1, 256, 28, 128), (2, 8)),     # 784 KiB: in the L2, packed
  # both in place: 2 x 8 loads less (3 images: no pairs of them to hold the tile's vectors instead, WHOLE_ROW_THIRD_VECTORS)
  "1x1 conv 3x256x28x28 -> 64": (lambda: conv1x1_item(rng, 3, 256, 28, 64), (2, 8)),
  "1x1 conv 3x128x28x28 -> 32": (lambda: conv1x1_item(rng, 3, 128, 28, 32), (2, 8)),
  "matmul 64x256 @ 256x1024": (lambda: matmul_item(rng, 64, 256, 1024), (4, 4)),           # whole tiles of 4 vectors
}

@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("case", list(CASES))
def test_one_vector_tile_where_it_pads_less_and_a_two_vector_panel_is_packed(simd_bytes, case):
  build, tile = CASES[case]
  item, want = build()
  rnd = host_renderer(simd_bytes, masked=True)   # masked pad lanes decide how far a tile may pad the columns
  k = hand_coded(Kernel(item.ast, rnd))
  _, vecs, rows = register_tile(k.applied)
  if simd_bytes == 64:
    assert (vecs, rows) == tile, k.applied
    # 784 columns are 49 whole vectors: the one-vector tile pads none of them
    if tile == (1, 16): assert not any(o.op is OptOps.PADTO for o in k.applied), k.applied
  else: assert vecs * rows + vecs + 1 <= rnd.simd_regs and (vecs, rows) != (1, 16), k.applied
  rnd = host_renderer(simd_bytes)   # the values: the default renderer's own plan
  got, _ = run_ast(item, hand_coded(Kernel(item.ast, rnd)).ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

class _Regs:
  simd_regs, big_l2_tiles, l2_bytes = 32, False, 0

@pytest.mark.parametrize("n_cols, one_vector, tile", [
  (784, True, (1, 16)),     # 49 vectors: 1 x 16 pads none, 2 x 8 one, 4 x 4 three
  (784, False, (2, 8)),     # a panel read in place either way (or packed either way): 2 x 8 loads less per FMA
  (1024, True, (4, 4)),     # no tile pads less than the first plain one
  (80, True, (1, 16)),      # 5 vectors: 2 x 8 pads one, 1 x 16 none
])
def test_mm_tile_one_vector_choice(n_cols, one_vector, tile):
  assert mm_tile(_Regs(), False, 256 * 64, plain=True, n_cols=n_cols, lanes=16, one_vector=one_vector) == tile
  # sixteen registers hold no 1 x 16 tile (16 accumulators, a column vector and a broadcast)
  assert mm_tile(type("R16", (), {"simd_regs": 16, "big_l2_tiles": False, "l2_bytes": 0})(), False, 256 * 32, plain=True, n_cols=n_cols, lanes=8, one_vector=one_vector) != (1, 16)
