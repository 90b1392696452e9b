"""A product whose output row holds no whole number of vectors and pads badly to the register tile's vectors (1x1 convs over
14x14 and 7x7 pixels: rows of 196 and 49; a 1x1/2 downsample's rows of 28; a matmul with 100 or 77 columns) takes a narrower
tile of whole vectors with more rows (heuristic._narrow_tile), where the row took part vectors (4 lanes of 16) or none at all;
a 1x1/2 conv whose row of 14 or 7 pads so to one vector takes it too, not the channel tile (vectors along the output channels).
The tile is read from the optimizer's opts on AVX2-like (8 lanes, 16 registers) and AVX-512-like (16 lanes, 32) renderers;
results against numpy on both."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded, simd_lanes, MM_MIN_ACC
from opt_helpers import run_ast, host_renderer, conv1x1_item, matmul_item, register_tile

rng = np.random.default_rng(31)

CASES = {
  "1x1 conv 14x14": lambda: conv1x1_item(rng, 1, 64, 14, 64, 1),
  "1x1 conv 7x7": lambda: conv1x1_item(rng, 2, 64, 7, 64, 1),
  "1x1/2 conv 56x56": lambda: conv1x1_item(rng, 2, 32, 56, 64, 2),
  "matmul 100 columns": lambda: matmul_item(rng, 64, 48, 100),
  "matmul 77 columns": lambda: matmul_item(rng, 96, 64, 77),
}

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("case", list(CASES))
def test_row_of_part_vectors_takes_whole_vectors(simd_bytes, case):
  item, want = CASES[case]()
  rnd = host_renderer(simd_bytes, masked=True)   # masked pad lanes decide the tile (the C renderer's rows pad to none)
  lanes = simd_lanes(rnd, 4)
  if case == "1x1 conv 7x7" and lanes == 16 and not rnd.masked_vectors:
    pytest.skip("49 pads to 64 (a third more) only where the pad lanes are masked")
  if case == "1x1/2 conv 56x56" and lanes == 8 and not rnd.masked_vectors:
    pytest.skip("a strided row of 28 pads to two vectors of 8 only where the pad lanes are masked (else gathered either way)")
  k = hand_coded(Kernel(item.ast, rnd))
  got_lanes, vecs, rows = register_tile(k.applied)
  # whole vectors along the row, enough accumulators to hide the FMA latency, the tile in the vector registers
  assert got_lanes == lanes and vecs * rows >= MM_MIN_ACC and vecs * rows + vecs + 1 <= rnd.simd_regs, k.applied
  rnd = host_renderer(simd_bytes)   # the values: the default renderer's own plan
  got, _ = run_ast(item, hand_coded(Kernel(item.ast, rnd)).ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

@pytest.mark.parametrize("simd_bytes, hw, along_row", [
  (64, 28, True),    # 14 output columns pad to one vector of 16: the register tile (was the channel tile)
  (32, 14, True),    # 7 pad to one of 8 (was the channel tile)
  (64, 14, False),   # 7 would pad to 16: the channel tile, vectors along the output channels
])
def test_strided_1x1_conv_row_of_one_padded_vector(simd_bytes, hw, along_row):
  item, want = conv1x1_item(rng, 2, 64, hw, 64, 2)
  rnd = host_renderer(simd_bytes)
  got, _ = run_ast(item, hand_coded(Kernel(item.ast, rnd)).ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
  rnd = host_renderer(simd_bytes, masked=True)   # the padded vector's lanes masked
  k = hand_coded(Kernel(item.ast, rnd))
  # the first UPCAST takes the vector lanes: along the output row (axis 3 of n, o, oh, ow) or the output channels (axis 1)
  first = next(o for o in k.applied if o.op is OptOps.UPCAST)
  assert first.amt == simd_lanes(rnd, 4) and (first.axis == 3) == along_row, k.applied
