"""A weight gradient dW = x.T @ dY (a.T @ b over a reduce of 256 or more: the GPT-2 block's 768x2304, 3072x768, 768x3072 over
256 tokens) takes the plain product's register tile: on AVX2 (16 ymm) 2 vectors x 6 rows, as a @ b does, not 2 x 4 (8
accumulators: one Zen 3 thread, 74 -> 85 GFLOP/s at 2304x768x256), its row blocks still packed where the rows divide the
row tiles; AVX-512 (32 zmm) keeps 4 x 4. A short reduce (128: the copy of the row block is not repaid) keeps 2 x 4.
Results against numpy on both renderers."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from opt_helpers import kernel_of, run_ast, host_renderer

rng = np.random.default_rng(31)

def _tile(k: Kernel) -> tuple[int, int]:
  """(column vectors, rows) of k's register tile: the first UPCAST is one vector of the columns."""
  ups = [o for o in k.applied if o.op is OptOps.UPCAST]
  cols = [o.amt for o in ups[1:] if o.axis == ups[0].axis]
  rows = [o.amt for o in ups[1:] if o.axis != ups[0].axis]
  return (cols[0] if cols else 1), rows[0]

@pytest.mark.parametrize("simd_bytes, want", [(32, (2, 6)), (64, (4, 4))])
@pytest.mark.parametrize("kk, n, m, packs", [(256, 384, 256, 2), (256, 192, 128, 2), (384, 200, 128, 1)])
def test_weight_gradient_takes_the_matmul_tile(simd_bytes, want, kk, n, m, packs):
  item, ref = kernel_of(lambda x, g: x.T @ g, (kk, n), (kk, m), rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  assert _tile(k) == want, k.applied
  # AVX2: rows that divide into row tiles, both inputs packed (row blocks and column panels); 200 rows padded to 6, the column
  # panel only (AVX-512's plans, unchanged, depend on how its wider panels split over the threads)
  if simd_bytes == 32: assert [o.op for o in k.applied].count(OptOps.PACK) == packs, k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())

@pytest.mark.parametrize("simd_bytes, want", [(32, (2, 4)), (64, (4, 4))])
def test_short_reduce_weight_gradient_keeps_its_tile(simd_bytes, want):
  item, ref = kernel_of(lambda x, g: x.T @ g, (128, 192), (128, 128), rng=rng)
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  assert _tile(k) == want, k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
